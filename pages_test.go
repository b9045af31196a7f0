package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// execDB runs statements on a test's database behind the server's back:
// sqliteSQL on a SQLite file, pgSQL on PostgreSQL.
func execDB(t *testing.T, db, sqliteSQL, pgSQL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if isPostgresURL(db) {
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, pgSQL); err != nil {
			t.Fatal(err)
		}
		return
	}
	conn, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, sqliteSQL); err != nil {
		t.Fatal(err)
	}
}

// nextLink returns the path and query of r's Link to the next page, or "".
func nextLink(t *testing.T, r response) string {
	t.Helper()
	link := r.header.Get("Link")
	if link == "" {
		return ""
	}
	target, ok := strings.CutPrefix(link, "<")
	target, rest, ok2 := strings.Cut(target, ">")
	if !ok || !ok2 || rest != `; rel="next"` {
		t.Fatalf("Link %q is not one next link", link)
	}
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/v1") + "?" + u.RawQuery
}

// TestPetAndOrderPages (either store): the pet and order lists page like
// the category list; a Link keeps the filters, and following it gives each
// matching row once; status takes a comma-separated list; a list sent
// without limit gets the first 1,000 rows and a Link; bad paging is 400.
func TestPetAndOrderPages(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Cat"}`)
	statuses := []string{"available", "pending", "sold"}
	want := []int64{}
	for i := range 9 {
		r := ts.do(t, "POST", "/v1/pets", ts.key, fmt.Sprintf(`{"name":"P%d","categoryId":%d,"status":%q}`, i, 1+i%2, statuses[i%3]))
		if p := decode[Pet](t, r); p.CategoryID == 1 && p.Status != "pending" {
			want = append(want, p.ID)
		}
	}
	var got []int64
	path, pages := "/pets?categoryId=1&status=available,sold&limit=2", 0
	for path != "" && pages < 10 {
		r := ts.do(t, "GET", "/v1"+path, ts.key, "")
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		for _, p := range decode[[]Pet](t, r) {
			if p.CategoryID != 1 || p.Status == "pending" {
				t.Errorf("GET %s: %+v does not match the filters", path, p)
			}
			got = append(got, p.ID)
		}
		path = nextLink(t, r)
		pages++
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pets by following the Links: %v, want %v", got, want)
	}

	for range 3 {
		ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":1}`)
	}
	r := ts.do(t, "GET", "/v1/store/orders?limit=2", ts.key, "")
	if list := decode[[]Order](t, r); len(list) != 2 || nextLink(t, r) != "/store/orders?after_id=2&limit=2" {
		t.Errorf("orders?limit=2: %+v, Link %q", list, r.header.Get("Link"))
	}
	r = ts.do(t, "GET", "/v1/store/orders?limit=2&after_id=2", ts.key, "")
	if list := decode[[]Order](t, r); len(list) != 1 || list[0].ID != 3 || r.header.Get("Link") != "" {
		t.Errorf("orders after 2: %+v, Link %q", list, r.header.Get("Link"))
	}

	// Without limit: the first 1,000, and a Link to the rest.
	execDB(t, ts.db, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
		INSERT INTO orders (pet_id, quantity, status, created_at) SELECT 1, 1, 'placed', '2026-01-01T00:00:00Z' FROM n`,
		`INSERT INTO orders (pet_id, quantity, status, created_at) SELECT 1, 1, 'placed', now() FROM generate_series(1, 1000)`)
	r = ts.do(t, "GET", "/v1/store/orders", ts.key, "")
	if list := decode[[]Order](t, r); len(list) != 1000 || list[999].ID != 1000 || nextLink(t, r) != "/store/orders?after_id=1000&limit=1000" {
		t.Errorf("orders without limit: %d rows, Link %q; want the first 1,000 and a Link", len(list), r.header.Get("Link"))
	}

	for _, bad := range []string{"/pets?status=available,lost", "/pets?status=available,", "/pets?limit=0", "/pets?limit=1001",
		"/pets?after_id=-1", "/pets?limit=1&limit=2", "/store/orders?limit=x", "/store/orders?after_id=1&after_id=2"} {
		wantError(t, ts.do(t, "GET", "/v1"+bad, ts.key, ""), 400, "validation_failed")
	}
}

// allPages returns every row of a paged list (path, without a query),
// following its Links: the lists of pets and orders hold at most 1,000
// rows a page.
func allPages[T any](t *testing.T, ts *testServer, key, path string) []T {
	t.Helper()
	var all []T
	for next, pages := path, 0; next != ""; pages++ {
		if pages > 10000 {
			t.Fatalf("%s: more than 10,000 pages", path)
		}
		r := ts.do(t, "GET", "/v1"+strings.TrimPrefix(next, "/v1"), key, "")
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", next, r.status, r.body)
		}
		all = append(all, decode[[]T](t, r)...)
		next = nextLink(t, r)
	}
	return all
}
