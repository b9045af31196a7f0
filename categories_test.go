package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stalledStore is a store whose category list never comes while the
// request waits: a database that stopped answering.
type stalledStore struct {
	Store
	gen   atomic.Uint64
	reads atomic.Int64
}

func (s *stalledStore) CategoriesGen(context.Context) (uint64, error) { return s.gen.Add(1), nil }

func (s *stalledStore) EachCategory(ctx context.Context, fn func(Category) error) error {
	s.reads.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestListAnswers503WithinBusyTimeout sends GETs at once to a list whose
// database stalls: each is answered 503 within about the busy timeout of
// its arrival, not one busy timeout after another as they queue for the
// read, and those that waited for a failed read share its failure.
func TestListAnswers503WithinBusyTimeout(t *testing.T) {
	const busy = 300 * time.Millisecond
	s := &stalledStore{}
	h := handleCategoryList(s, "http://127.0.0.1/v1", busy)
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/categories", nil))
			took := time.Since(start)
			if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
				t.Errorf("GET %d: %d %s, want 503 with Retry-After", i, w.Code, w.Body)
			}
			// Queued one behind the other, the last would take n x busy.
			if took > 3*busy {
				t.Errorf("GET %d answered after %v; the busy timeout is %v", i, took, busy)
			}
		})
	}
	wg.Wait()
	if r := s.reads.Load(); r >= n {
		t.Errorf("%d reads for %d GETs: the waiters did not share the failed read", r, n)
	}
}

// TestListReaderLeavingIsNotAFailure: the GET reading the list goes away
// (its client closed the connection) while others wait for its read. They
// must not be answered with its cancellation, a 500: they read themselves,
// and here, the database stalling, get 503.
func TestListReaderLeavingIsNotAFailure(t *testing.T) {
	const busy = 300 * time.Millisecond
	s := &stalledStore{}
	h := handleCategoryList(s, "http://127.0.0.1/v1", busy)
	ctx, cancel := context.WithCancel(context.Background())
	leaving := make(chan struct{})
	go func() {
		defer close(leaving)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/categories", nil).WithContext(ctx))
	}()
	for deadline := time.Now().Add(5 * time.Second); s.reads.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first GET did not start reading within 5s")
		}
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/categories", nil))
			if w.Code != http.StatusServiceUnavailable {
				t.Errorf("GET %d waiting for the read of a client that left: %d %s, want 503", i, w.Code, w.Body)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // let them queue for the read (if late, they pass without testing this)
	cancel()
	<-leaving
	wg.Wait()
}

// TestConflictNamesTheCategoryThatExists: a 409 names the category that
// holds the name, as it is spelled, not only the one sent; with an
// Idempotency-Key too, and when the two meet in one batch.
func TestConflictNamesTheCategoryThatExists(t *testing.T) {
	ts := startServer(t)
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`); r.status != 201 {
		t.Fatalf("seed: %d %s", r.status, r.body)
	}
	message := func(r response) string {
		t.Helper()
		wantError(t, r, http.StatusConflict, "conflict")
		return decode[apiError](t, r).Message
	}
	if m := message(ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"dog"}`)); !strings.Contains(m, `"Dog"`) || !strings.Contains(m, `"dog"`) {
		t.Errorf("message %q does not name both Dog, which exists, and dog, which was sent", m)
	}
	if m := message(ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)); strings.Count(m, "Dog") != 1 {
		t.Errorf("message %q, want Dog named once when it was sent as it exists", m)
	}
	keyed := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"DOG"}`, "Idempotency-Key", "conflict-1")
	if m := message(keyed); !strings.Contains(m, `"Dog"`) {
		t.Errorf("keyed: message %q does not name Dog", m)
	}
	if again := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"DOG"}`, "Idempotency-Key", "conflict-1"); string(again.body) != string(keyed.body) {
		t.Errorf("replay %s, want the stored %s", again.body, keyed.body)
	}

	// Two spellings at once, keyed and not: whichever is made, the other's
	// 409 names it (on SQLite they often share a batch).
	for i := range 20 {
		names := [2]string{fmt.Sprintf("Cat%d", i), fmt.Sprintf("CAT%d", i)}
		var rs [2]response
		var wg sync.WaitGroup
		for j := range 2 {
			wg.Go(func() {
				var hdr []string
				if j == 1 {
					hdr = []string{"Idempotency-Key", fmt.Sprintf("race-%d", i)}
				}
				rs[j], _ = ts.send("POST", "/v1/categories", ts.key, `{"name":"`+names[j]+`"}`, hdr...)
			})
		}
		wg.Wait()
		won := slices.IndexFunc(rs[:], func(r response) bool { return r.status == 201 })
		if won < 0 || rs[1-won].status != 409 {
			t.Fatalf("round %d: statuses %d and %d, want one 201 and one 409", i, rs[0].status, rs[1].status)
		}
		if m := message(rs[1-won]); !strings.Contains(m, `"`+names[won]+`"`) {
			t.Errorf("round %d: %q was made, but the other's 409 says %q", i, names[won], m)
		}
	}
}

func TestCategoriesCreateAndList(t *testing.T) {
	ts := startServer(t)
	r := ts.do(t, "GET", "/v1/categories", ts.key, "")
	if r.status != 200 || string(r.body) != "[]\n" {
		t.Fatalf("empty list: status %d body %q, want 200 []", r.status, r.body)
	}

	r = ts.do(t, "POST", "/v1/categories", ts.key, `{"name": "  Dog\t", "description": "Loyal"}`)
	if r.status != 201 {
		t.Fatalf("status = %d, want 201; %s", r.status, r.body)
	}
	if got := string(r.body); got != `{"id":1,"name":"Dog","description":"Loyal"}`+"\n" {
		t.Errorf("created body = %s", got)
	}
	if loc := r.header.Get("Location"); loc != "" {
		t.Errorf("Location = %q, want none", loc)
	}
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name": "Cat"}`)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name": "Rabbit", "description": ""}`)

	r = ts.do(t, "GET", "/v1/categories", ts.key, "")
	want := `[{"id":1,"name":"Dog","description":"Loyal"},{"id":2,"name":"Cat"},{"id":3,"name":"Rabbit","description":""}]` + "\n"
	if r.status != 200 || string(r.body) != want {
		t.Errorf("list: status %d body %s, want %s", r.status, r.body, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
}

func TestCategoryValidation(t *testing.T) {
	ts := startServer(t)
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"dog"}`); r.status != 201 {
		t.Fatalf("seed: status %d", r.status)
	}
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"école"}`); r.status != 201 {
		t.Fatalf("seed: status %d", r.status)
	}
	long := strings.Repeat("x", 101)
	tests := []struct {
		name       string
		body       string
		header     []string
		wantStatus int
		wantCode   string
	}{
		{"missing name", `{"description":"x"}`, nil, 400, "validation_failed"},
		{"null name", `{"name":null}`, nil, 400, "validation_failed"},
		{"empty name", `{"name":""}`, nil, 400, "validation_failed"},
		{"blank name", `{"name":" \t\n "}`, nil, 400, "validation_failed"},
		{"101 characters", `{"name":"` + long + `"}`, nil, 400, "validation_failed"},
		{"101 code points", `{"name":"` + strings.Repeat("é", 101) + `"}`, nil, 400, "validation_failed"},
		{"control character", `{"name":"a\u0007b"}`, nil, 400, "validation_failed"},
		{"NUL", `{"name":"a\u0000b"}`, nil, 400, "validation_failed"},
		{"newline inside", `{"name":"a\nb"}`, nil, 400, "validation_failed"},
		{"DEL", `{"name":"a\u007fb"}`, nil, 400, "validation_failed"},
		{"name number", `{"name":5}`, nil, 400, "validation_failed"},
		{"name object", `{"name":{}}`, nil, 400, "validation_failed"},
		{"description number", `{"name":"n1","description":5}`, nil, 400, "validation_failed"},
		{"null description", `{"name":"nulldesc","description":null}`, nil, 400, "validation_failed"},
		{"description 1001", `{"name":"n2","description":"` + strings.Repeat("d", 1001) + `"}`, nil, 400, "validation_failed"},
		{"unknown field", `{"name":"n3","colour":"red"}`, nil, 400, "validation_failed"},
		{"duplicate", `{"name":"dog"}`, nil, 409, "conflict"},
		{"duplicate other case", `{"name":"DOG"}`, nil, 409, "conflict"},
		{"duplicate after trim", `{"name":"  Dog  "}`, nil, 409, "conflict"},
		{"duplicate accented upper", `{"name":"ÉCOLE"}`, nil, 409, "conflict"},
		{"trailing data", `{"name":"n4"} {}`, nil, 400, "invalid_json"},
		{"trailing garbage", `{"name":"n4"}x`, nil, 400, "invalid_json"},
		{"array", `[{"name":"n5"}]`, nil, 400, "invalid_json"},
		{"string", `"n6"`, nil, 400, "invalid_json"},
		{"null", `null`, nil, 400, "invalid_json"},
		{"malformed", `{"name":}`, nil, 400, "invalid_json"},
		{"truncated", `{"name":"n7"`, nil, 400, "invalid_json"},
		{"empty body", ``, []string{"Content-Type", "application/json"}, 400, "invalid_json"},
		{"invalid UTF-8", "{\"name\":\"a\xffb\"}", nil, 400, "invalid_json"},
		{"no content type", `{"name":"n8"}`, []string{"Content-Type", ""}, 415, "unsupported_media_type"},
		{"text/plain", `{"name":"n8"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"too large", `{"name":"n9","description":"` + strings.Repeat("d", 70000) + `"}`, nil, 413, "payload_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/categories", ts.key, tt.body, tt.header...)
			wantError(t, r, tt.wantStatus, tt.wantCode)
		})
	}

	valid := []struct{ name, body string }{
		{"100 characters", `{"name":"` + strings.Repeat("y", 100) + `"}`},
		{"100 code points", `{"name":"` + strings.Repeat("ü", 100) + `"}`},
		{"1000 description", `{"name":"d1000","description":"` + strings.Repeat("d", 1000) + `"}`},
		{"charset parameter", `{"name":"charset"}`},
		{"description with newline", `{"name":"nl","description":"two\nlines"}`},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/categories", ts.key, tt.body, "Content-Type", "application/json; charset=utf-8")
			if r.status != 201 {
				t.Fatalf("status = %d, want 201; %s", r.status, r.body)
			}
		})
	}
}

func TestConcurrentCreates(t *testing.T) {
	// 200 at once from one address: past its share of the requests in
	// flight (64, inflight.go), which is not what this test is about.
	ts := startServer(t, "--max-conns-per-addr", "0")
	const n = 200
	var wg sync.WaitGroup
	ids := make([]int64, n)
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"name":"cat-%03d"}`, i)
			req, _ := http.NewRequest("POST", ts.base+"/v1/categories", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+ts.key)
			resp, err := ts.client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var c Category
			if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 201 {
				errs <- fmt.Errorf("create %d: status %d, %v", i, resp.StatusCode, err)
				return
			}
			ids[i] = c.ID
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list := decode[[]Category](t, ts.do(t, "GET", "/v1/categories", ts.key, ""))
	if len(list) != n {
		t.Fatalf("listed %d categories, want %d", len(list), n)
	}
	seen := map[string]int64{}
	for i, c := range list {
		if i > 0 && c.ID <= list[i-1].ID {
			t.Errorf("ids not ascending at %d: %d after %d", i, c.ID, list[i-1].ID)
		}
		if _, dup := seen[c.Name]; dup {
			t.Errorf("%s listed twice", c.Name)
		}
		seen[c.Name] = c.ID
	}
	for i := range n {
		if got := seen[fmt.Sprintf("cat-%03d", i)]; got != ids[i] {
			t.Errorf("cat-%03d: listed with id %d, created with id %d", i, got, ids[i])
		}
	}
}

func TestCategoryListCacheAndPages(t *testing.T) {
	// A trailing slash on --public-url must not give the Link an empty segment.
	ts := startServer(t, "--public-url", "https://api.example.net/v1/")
	for i := range 5 {
		ts.do(t, "POST", "/v1/categories", ts.key, fmt.Sprintf(`{"name":"c%d"}`, i))
	}
	r := ts.do(t, "GET", "/v1/categories", ts.key, "")
	etag := r.header.Get("ETag")
	if r.status != 200 || etag == "" || len(decode[[]Category](t, r)) != 5 {
		t.Fatalf("list: %d, ETag %q", r.status, etag)
	}
	r = ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", etag)
	if r.status != 304 || len(r.body) != 0 || r.header.Get("ETag") != etag {
		t.Errorf("If-None-Match with the current tag: %d %q", r.status, r.body)
	}
	// If-None-Match in two lines is one list (RFC 9110): the second names it.
	r = ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", `"other"`, "If-None-Match", etag)
	if r.status != 304 {
		t.Errorf("If-None-Match with the current tag on its second line: %d", r.status)
	}
	// A write makes the cached list stale.
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"c5"}`)
	r = ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", etag)
	if r.status != 200 || r.header.Get("ETag") == etag || len(decode[[]Category](t, r)) != 6 {
		t.Errorf("after a write: %d, ETag %q (was %q), body %s", r.status, r.header.Get("ETag"), etag, r.body)
	}

	r = ts.do(t, "GET", "/v1/categories?limit=4", ts.key, "")
	page := decode[[]Category](t, r)
	if len(page) != 4 || page[0].ID != 1 || page[3].ID != 4 {
		t.Fatalf("first page: %s", r.body)
	}
	if got, want := r.header.Get("Link"), `<https://api.example.net/v1/categories?limit=4&after_id=4>; rel="next"`; got != want {
		t.Errorf("Link = %q, want %q", got, want)
	}
	r = ts.do(t, "GET", "/v1/categories?limit=4&after_id=4", ts.key, "")
	if page := decode[[]Category](t, r); len(page) != 2 || page[0].ID != 5 || r.header.Get("Link") != "" {
		t.Errorf("last page: %s, Link %q", r.body, r.header.Get("Link"))
	}
	if r := ts.do(t, "GET", "/v1/categories?after_id=6", ts.key, ""); string(r.body) != "[]\n" {
		t.Errorf("past the end: %s", r.body)
	}
	// Pages are cached: a full page stays as it is (ids only grow), a page
	// at the end of the list sees the next write, and both have ETags.
	first := ts.do(t, "GET", "/v1/categories?limit=4", ts.key, "")
	if tag := first.header.Get("ETag"); tag == "" || ts.do(t, "GET", "/v1/categories?limit=4", ts.key, "", "If-None-Match", tag).status != 304 {
		t.Errorf("first page: ETag %q, not answered with 304 when the client has it", tag)
	}
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"c6"}`)
	if r := ts.do(t, "GET", "/v1/categories?limit=4", ts.key, ""); string(r.body) != string(first.body) || r.header.Get("ETag") != first.header.Get("ETag") {
		t.Errorf("first page changed after a write past it: %s", r.body)
	}
	r = ts.do(t, "GET", "/v1/categories?limit=4&after_id=4", ts.key, "")
	if page := decode[[]Category](t, r); len(page) != 3 || page[2].Name != "c6" {
		t.Errorf("last page after a write: %s (stale?)", r.body)
	}
	if page := decode[[]Category](t, ts.do(t, "GET", "/v1/categories?after_id=6", ts.key, "")); len(page) != 1 || page[0].Name != "c6" {
		t.Errorf("the page that was past the end, after a write: %v", page)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after_id=-1", "after_id=1.5"} {
		wantError(t, ts.do(t, "GET", "/v1/categories?"+q, ts.key, ""), 400, "validation_failed")
	}
}

func TestLargeListIsStreamed(t *testing.T) {
	db := filepath.Join(t.TempDir(), "large.db")
	key := createKey(t, db, "--plan", "business")
	s := testStore(t, db, true)
	_, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
		INSERT INTO categories (name, fold, description) SELECT printf('category %06d', i), printf('category %06d', i), printf('%0100d', i) FROM n`)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	ts := startServerOn(t, db, key)
	r := ts.do(t, "GET", "/v1/categories", key, "")
	list := decode[[]Category](t, r)
	if r.status != 200 || len(list) != 20000 || list[19999].Name != "category 020000" {
		t.Fatalf("large list: %d, %d rows", r.status, len(list))
	}
	if r.header.Get("ETag") != "" || len(r.body) < maxCachedList {
		t.Errorf("a %d-byte list got ETag %q: it should be streamed, not cached", len(r.body), r.header.Get("ETag"))
	}
}

// TestTooLargeListIsNotReadTwice checks that once the list outgrew the
// cache, a request streams it straight away, instead of first reading and
// serializing a cache's worth of it to find out again, and that the stream
// still sees new rows.
func TestTooLargeListIsNotReadTwice(t *testing.T) {
	s := testStore(t, filepath.Join(t.TempDir(), "big.db"), true)
	h := handleCategoryList(s, "http://127.0.0.1/v1", defaultBusyTimeout).(*categoryLists)
	get := func() []Category {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/categories", nil))
		var list []Category
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || w.Code != 200 {
			t.Fatalf("list: %d, %v", w.Code, err)
		}
		return list
	}
	if _, err := s.CreateCategory(context.Background(), Category{Name: "small"}, "small", nil); err != nil {
		t.Fatal(err)
	}
	if list := get(); len(list) != 1 || h.cached.Load() == nil {
		t.Fatalf("a one-row list: %d rows, cached %v", len(list), h.cached.Load() != nil)
	}
	if _, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
		INSERT INTO categories (name, fold, description) SELECT printf('c%06d', i), printf('c%06d', i), printf('%0100d', i) FROM n`); err != nil {
		t.Fatal(err)
	}
	s.categoriesGen.Add(1) // as a create through the API would
	if list := get(); len(list) != 20001 || !h.tooLarge.Load() || h.cached.Load() != nil {
		t.Fatalf("the large list: %d rows, too large %v, an old copy kept %v", len(list), h.tooLarge.Load(), h.cached.Load() != nil)
	}
	if _, err := s.CreateCategory(context.Background(), Category{Name: "last"}, "last", nil); err != nil {
		t.Fatal(err)
	}
	if list := get(); len(list) != 20002 || list[20001].Name != "last" {
		t.Errorf("after a create: %d rows", len(list))
	}
}

// TestListReadOnceAfterWrite checks that the GETs in flight after a write
// share one read of the list, rather than each of the 32 here finding the
// cached copy stale and reading and serializing it on its own.
func TestListReadOnceAfterWrite(t *testing.T) {
	db := filepath.Join(t.TempDir(), "herd.db")
	key := createKey(t, db, "--plan", "business")
	s := testStore(t, db, true)
	// 5,000 rows, about 400 KB of JSON: cached, and long enough to read
	// that the GETs below overlap.
	if _, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
		INSERT INTO categories (name, fold, description) SELECT printf('category %06d', i), printf('category %06d', i), printf('%060d', i) FROM n`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ts := startServerOn(t, db, key)
	reads := func() int {
		m := ts.get(t, ts.admin+"/metrics")
		_, v, ok := strings.Cut(m, "\npetstore_category_list_reads_total ")
		n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(v, "\n", 2)[0]))
		if !ok || err != nil {
			t.Fatalf("no petstore_category_list_reads_total in the metrics")
		}
		return n
	}
	if r := ts.do(t, "POST", "/v1/categories", key, `{"name":"newest"}`); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	before := reads()
	start := make(chan struct{})
	etags := make([]string, 32)
	var wg sync.WaitGroup
	for i := range etags {
		wg.Go(func() {
			<-start
			r, err := ts.send("GET", "/v1/categories", key, "")
			if err != nil || r.status != 200 || !bytes.Contains(r.body, []byte(`"name":"newest"`)) {
				t.Errorf("GET: %d %v, without the new category", r.status, err)
			}
			etags[i] = r.header.Get("ETag")
		})
	}
	close(start)
	wg.Wait()
	if n := reads() - before; n != 1 {
		t.Errorf("32 GETs after a write read the list %d times, want 1", n)
	}
	for _, e := range etags {
		if e != etags[0] {
			t.Errorf("ETags differ: %q, %q", e, etags[0])
		}
	}
}
