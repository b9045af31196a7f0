package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// catalogOf reads the whole catalog through the API.
func catalogOf(t *testing.T, ts *testServer, key string) (cats []Category, pets []Pet, orders []Order) {
	t.Helper()
	return decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, "")),
		allPages[Pet](t, ts, key, "/pets"),
		allPages[Order](t, ts, key, "/store/orders")
}

// TestCopyBothWays fills a SQLite database through the API (a catalog, day
// counts, a revoked key, a banned key), copies it to PostgreSQL and back to
// a new SQLite file, and serves each copy: the same rows with the same ids,
// the keys as they were, the day's count kept, and new rows numbered after
// the copied ones.
func TestCopyBothWays(t *testing.T) {
	clearOfMidnight(t, time.Minute)
	base := needPostgres(t)
	first := filepath.Join(t.TempDir(), "first.db")
	key := createKey(t, first, "--plan", "business", "--name", "main")
	limited := createKey(t, first, "--plan", "enterprise", "--rpm", "1", "--rpd", "1000")
	revoked := createKey(t, first, "--plan", "free")
	if _, _, err := runCLI(t, nil, "keys", "revoke", "3", "--db", first); err != nil {
		t.Fatal(err)
	}
	// A read key that expires, rotated: its lineage, scope, expiry and the
	// key it replaces must survive the copy.
	createKey(t, first, "--plan", "pro", "--scope", "read", "--expires", "2099-01-01")
	if _, _, err := runCLI(t, nil, "keys", "rotate", "4", "--db", first); err != nil {
		t.Fatal(err)
	}
	args := []string{"--ban-threshold", "1", "--ban-duration", "15m"}
	ts := startServerOn(t, first, key, args...)
	for i := range 5 {
		c := decode[Category](t, ts.do(t, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":"Ĉat %d","description":"d%d"}`, i, i)))
		p := decode[Pet](t, ts.do(t, "POST", "/v1/pets", key, fmt.Sprintf(`{"name":"p%d","categoryId":%d,"status":"available"}`, i, c.ID)))
		ts.do(t, "POST", "/v1/store/orders", key, fmt.Sprintf(`{"petId":%d,"quantity":%d}`, p.ID, i+1))
	}
	// A pet that held the highest id, deleted: no copy gives its id again.
	gone := decode[Pet](t, ts.do(t, "POST", "/v1/pets", key, `{"name":"gone","categoryId":1}`))
	if r := ts.do(t, "DELETE", fmt.Sprintf("/v1/pets/%d", gone.ID), key, ""); r.status != 204 {
		t.Fatalf("delete pet %d: %d %s", gone.ID, r.status, r.body)
	}
	ts.do(t, "GET", "/v1/categories", limited, "")
	wantError(t, ts.do(t, "GET", "/v1/categories", limited, ""), 429, "rate_limited")
	wantError(t, ts.do(t, "GET", "/v1/categories", limited, ""), 429, "key_banned")
	cats, pets, orders := catalogOf(t, ts, key)
	ts.stop() // writes the day counts and the ban
	today := time.Now().UTC().Format(time.DateOnly)
	if counts, err := testStore(t, first, false).DayCounts(context.Background(), today); err != nil || counts[1] < 16 || counts[2] != 1 {
		t.Fatalf("day counts before the copy: %v, %v", counts, err)
	}

	pg := postgresSchema(t, base)
	last := filepath.Join(t.TempDir(), "last.db")
	for h, hop := range []struct{ from, to string }{{first, pg}, {pg, last}} {
		want, err := openTestStore(t, hop.from).DayCounts(context.Background(), today)
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, err := runCLI(t, nil, "copy", "--from", hop.from, "--to", hop.to)
		if err != nil {
			t.Fatalf("copy %s to %s: %v\n%s%s", hop.from, hop.to, err, out, errOut)
		}
		for _, line := range []string{"categories: 5 rows", "pets: 5 rows", "orders: 5 rows", "api_keys: 5 rows", "usage: 2 rows"} {
			if !strings.Contains(out, line) {
				t.Errorf("copy printed %q, want a line %q", out, line)
			}
		}
		got, err := openTestStore(t, hop.to).DayCounts(context.Background(), today)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("day counts in %s: %v (%v), want %v", hop.to, got, err, want)
		}
		if from, to := keysOf(t, hop.from), keysOf(t, hop.to); !reflect.DeepEqual(from, to) {
			for i := range min(len(from), len(to)) {
				if !reflect.DeepEqual(from[i], to[i]) {
					t.Errorf("key %d in %s:\n%+v\nwant\n%+v", from[i].ID, hop.to, to[i], from[i])
				}
			}
			if len(from) != len(to) {
				t.Errorf("keys in %s: %d, want %d", hop.to, len(to), len(from))
			}
		} else if k := to[4]; k.Lineage != 4 || k.Replaces != 4 || k.Scope != "read" || to[3].ExpiresAt.IsZero() || to[0].LastUsedAt.IsZero() {
			t.Errorf("keys in %s: %+v: the rotated key's lineage, scope and replaces, or an expiry, or a last use, are lost", hop.to, to)
		}
		copied := startServerOn(t, hop.to, key, args...)
		gc, gp, gorders := catalogOf(t, copied, key)
		if !reflect.DeepEqual(gc, cats) || !reflect.DeepEqual(gp, pets) || !reflect.DeepEqual(gorders, orders) {
			t.Errorf("catalog in %s:\n%v\n%v\n%v\nwant\n%v\n%v\n%v", hop.to, gc, gp, gorders, cats, pets, orders)
		}
		wantError(t, copied.do(t, "GET", "/v1/categories", limited, ""), 429, "key_banned")
		wantError(t, copied.do(t, "GET", "/v1/categories", revoked, ""), 401, "unauthorized")
		c := decode[Category](t, copied.do(t, "POST", "/v1/categories", key, `{"name":"after the copy"}`))
		if c.ID != cats[len(cats)-1].ID+1 {
			t.Errorf("a category created in %s got id %d, want %d", hop.to, c.ID, cats[len(cats)-1].ID+1)
		}
		wantError(t, copied.do(t, "POST", "/v1/categories", key, `{"name":"ĉAT 0"}`), 409, "conflict")
		// Past the deleted pet's id, and past the one each hop made and
		// deleted before it.
		p := decode[Pet](t, copied.do(t, "POST", "/v1/pets", key, `{"name":"after the copy","categoryId":1}`))
		if want := gone.ID + 1 + int64(h); p.ID != want {
			t.Errorf("a pet created in %s got id %d, want %d: an id handed out before the copy came back", hop.to, p.ID, want)
		}
		if r := copied.do(t, "DELETE", fmt.Sprintf("/v1/pets/%d", p.ID), key, ""); r.status != 204 {
			t.Fatalf("delete pet %d: %d %s", p.ID, r.status, r.body)
		}
		copied.stop()
		// Undo the create, so that the next hop copies the same rows.
		if s, ok := openTestStore(t, hop.to).(*sqliteStore); ok {
			_, err = s.w.Exec("DELETE FROM categories WHERE id = ?", c.ID)
		} else {
			_, err = openTestStore(t, hop.to).(*pgStore).pool.Exec(context.Background(), "DELETE FROM categories WHERE id = $1", c.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// A target that holds rows is refused, and left as it was.
	_, _, err := runCLI(t, nil, "copy", "--from", first, "--to", pg)
	if err == nil || !strings.Contains(err.Error(), "already holds rows") {
		t.Errorf("copy to a filled database: %v, want a refusal", err)
	}
}

// keysOf returns the keys of the database db, without what a copy does not
// keep as it is (seq, and a ban's nanoseconds).
func keysOf(t *testing.T, db string) []apiKey {
	t.Helper()
	keys, err := openTestStore(t, db).KeysSince(context.Background(), -1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		keys[i].seq = 0
		// PostgreSQL keeps a ban's end to the microsecond.
		keys[i].BannedUntil = keys[i].BannedUntil.Truncate(time.Microsecond)
	}
	return keys
}

// lyingCounts is a copy source whose pets count is one more than it holds,
// as if a pet were created while the copy ran.
type lyingCounts struct{ copier }

func (l lyingCounts) rowCount(ctx context.Context, t copyTable) (int64, error) {
	n, err := l.copier.rowCount(ctx, t)
	if t.name == "pets" {
		n++
	}
	return n, err
}

// TestCopyKeepsNothingWhenCountsDiffer copies between two SQLite files: a
// source whose counts do not match what was read leaves the target empty,
// and an honest one is copied whole.
func TestCopyKeepsNothingWhenCountsDiffer(t *testing.T) {
	ctx := context.Background()
	src := testStore(t, filepath.Join(t.TempDir(), "src.db"), true)
	c, err := src.CreateCategory(ctx, Category{Name: "Dogs"}, "dogs", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.CreatePet(ctx, Pet{Name: "Rex", CategoryID: c.ID, Status: "available"}, nil); err != nil {
		t.Fatal(err)
	}
	dst := testStore(t, filepath.Join(t.TempDir(), "dst.db"), true)
	var out strings.Builder
	err = copyDatabase(ctx, lyingCounts{src}, dst, "src", "dst", &out)
	if err == nil || !strings.Contains(err.Error(), "pets: 2 in the source, 1 copied") {
		t.Fatalf("copy from a source in use: %v, want the pets count named", err)
	}
	for _, tbl := range copyTables {
		if tbl.replace {
			continue // the deployment id: TestCopyCarriesTheDeploymentID
		}
		if n, err := dst.rowCount(ctx, tbl); err != nil || n != 0 {
			t.Errorf("%s holds %d rows (%v) after a refused copy, want none", tbl.name, n, err)
		}
	}
	if err := copyDatabase(ctx, src, dst, "src", "dst", &out); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if p, err := dst.Pet(ctx, 1); err != nil || p.Name != "Rex" || p.CategoryID != c.ID {
		t.Errorf("copied pet: %+v, %v", p, err)
	}
}

// TestCopyCarriesTheDeploymentID copies a SQLite database to a new SQLite
// file and, with PETSTORE_TEST_POSTGRES, to PostgreSQL and back: each
// target's own id (its migration made one) gives way to the source's, so
// that the copy keeps the source's Redis key names; a refused copy leaves
// the target's own.
func TestCopyCarriesTheDeploymentID(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src.db")
	createKey(t, src, "--plan", "free")
	id := deploymentIDOf(t, src)
	hops := []string{filepath.Join(t.TempDir(), "copy.db")}
	if os.Getenv(postgresEnv) != "" {
		hops = append(hops, postgresSchema(t, needPostgres(t)), filepath.Join(t.TempDir(), "back.db"))
	}
	from := src
	for _, to := range hops {
		if _, _, err := runCLI(t, nil, "migrate", "--db", to); err != nil {
			t.Fatal(err)
		}
		if own := deploymentIDOf(t, to); own == "" || own == id {
			t.Fatalf("%s's own deployment id before the copy: %q, want one of its own (the source's is %q)", redactDB(to), own, id)
		}
		if out, errOut, err := runCLI(t, nil, "copy", "--from", from, "--to", to); err != nil {
			t.Fatalf("copy %s to %s: %v\n%s%s", redactDB(from), redactDB(to), err, out, errOut)
		}
		if got := deploymentIDOf(t, to); got != id {
			t.Errorf("deployment id of %s after the copy: %q, want the source's %q", redactDB(to), got, id)
		}
		from = to
	}

	// A refused copy (the target holds a key) keeps the target's own id.
	full := filepath.Join(t.TempDir(), "full.db")
	createKey(t, full, "--plan", "free")
	own := deploymentIDOf(t, full)
	if _, _, err := runCLI(t, nil, "copy", "--from", src, "--to", full); err == nil || !strings.Contains(err.Error(), "already holds rows (api_keys: 1)") {
		t.Errorf("copy to a database that holds a key: %v, want a refusal naming api_keys alone", err)
	}
	if got := deploymentIDOf(t, full); got != own {
		t.Errorf("a refused copy changed the target's deployment id from %q to %q", own, got)
	}
}
