package main

// Tests of several serve instances on one PostgreSQL database (DECISIONS.md
// section 8), and of PostgreSQL going away under them. They need
// PETSTORE_TEST_POSTGRES and skip without it. Every instance runs in this
// process (run, as startServerOn does), on a schema of its own per test.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgresInstancesShareWrites creates categories, pets and orders
// round-robin over three instances, each pet in a category and each order
// for a pet that another instance created, and checks that every instance
// then lists exactly those rows, in ascending id order.
func TestPostgresInstancesShareWrites(t *testing.T) {
	t.Parallel()
	base := needPostgres(t)
	db := postgresSchema(t, base)
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 3)

	// Every instance caches its (empty) category list first: the creates on
	// the others must not leave it stale.
	for i, s := range ts {
		if r := s.do(t, "GET", "/v1/categories", key, ""); r.status != 200 || string(r.body) != "[]\n" {
			t.Fatalf("instance %d: empty list: %d %s", i, r.status, r.body)
		}
	}

	const n = 9
	var cats []Category
	for i := range n {
		s := ts[i%3]
		r := s.do(t, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":"cat-%d","description":"from instance %d"}`, i, i%3))
		if r.status != 201 {
			t.Fatalf("create category %d on instance %d: %d %s", i, i%3, r.status, r.body)
		}
		cats = append(cats, decode[Category](t, r))
	}
	var pets []Pet
	for i := range n {
		// The category was created on another instance (i+1 mod 3), just now.
		cat := cats[(i+1)%n]
		r := ts[i%3].do(t, "POST", "/v1/pets", key, fmt.Sprintf(`{"name":"pet-%d","categoryId":%d,"status":"pending"}`, i, cat.ID))
		if r.status != 201 {
			t.Fatalf("create pet %d on instance %d in category %d (made on instance %d): %d %s", i, i%3, cat.ID, (i+1)%3, r.status, r.body)
		}
		pets = append(pets, decode[Pet](t, r))
	}
	var orders []Order
	for i := range n {
		pet := pets[(i+2)%n]
		r := ts[i%3].do(t, "POST", "/v1/store/orders", key, fmt.Sprintf(`{"petId":%d,"quantity":%d}`, pet.ID, i+1))
		if r.status != 201 {
			t.Fatalf("create order %d on instance %d for pet %d (made on instance %d): %d %s", i, i%3, pet.ID, (i+2)%3, r.status, r.body)
		}
		orders = append(orders, decode[Order](t, r))
	}
	for what, ids := range map[string][]int64{
		"category": pmIDs(cats, func(c Category) int64 { return c.ID }),
		"pet":      pmIDs(pets, func(p Pet) int64 { return p.ID }),
		"order":    pmIDs(orders, func(o Order) int64 { return o.ID }),
	} {
		// One instance's creates follow the others': the ids they answered
		// with ascend in the order the 201s came.
		if !pmStrictlyAscending(ids) {
			t.Errorf("%s ids answered in order %v: not unique and ascending", what, ids)
		}
	}

	for i, s := range ts {
		gotCats := decode[[]Category](t, s.do(t, "GET", "/v1/categories", key, ""))
		if !slices.EqualFunc(gotCats, cats, pmSameCategory) {
			t.Errorf("instance %d lists categories\n%+v\nwant\n%+v", i, gotCats, cats)
		}
		gotPets := allPages[Pet](t, s, key, "/pets")
		if !slices.Equal(gotPets, pets) {
			t.Errorf("instance %d lists pets\n%+v\nwant\n%+v", i, gotPets, pets)
		}
		gotOrders := allPages[Order](t, s, key, "/store/orders")
		if !slices.Equal(gotOrders, orders) {
			t.Errorf("instance %d lists orders\n%+v\nwant\n%+v", i, gotOrders, orders)
		}
		for _, p := range pets {
			r := s.do(t, "GET", fmt.Sprintf("/v1/pets/%d", p.ID), key, "")
			if r.status != 200 || decode[Pet](t, r) != p {
				t.Errorf("instance %d: GET /v1/pets/%d: %d %s, want %+v", i, p.ID, r.status, r.body, p)
			}
		}
		// A page of the list agrees too.
		page := decode[[]Category](t, s.do(t, "GET", fmt.Sprintf("/v1/categories?limit=4&after_id=%d", cats[2].ID), key, ""))
		if !slices.EqualFunc(page, cats[3:7], pmSameCategory) {
			t.Errorf("instance %d: page after id %d: %+v, want %+v", i, cats[2].ID, page, cats[3:7])
		}
	}
}

func pmIDs[T any](rows []T, id func(T) int64) []int64 {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = id(r)
	}
	return ids
}

func pmStrictlyAscending(ids []int64) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}

func pmSameCategory(a, b Category) bool {
	return a.ID == b.ID && a.Name == b.Name && (a.Description == nil) == (b.Description == nil) &&
		(a.Description == nil || *a.Description == *b.Description)
}

// TestPostgresListCacheAcrossInstances checks that instance B's cached
// category list, its ETag and its cached pages do not outlive a create on
// instance A: a list answered after A's 201 holds the new row.
func TestPostgresListCacheAcrossInstances(t *testing.T) {
	t.Parallel()
	base := needPostgres(t)
	db := postgresSchema(t, base)
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 2)
	a, b := ts[0], ts[1]

	for i := range 3 {
		if r := a.do(t, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":"old-%d"}`, i)); r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
	}
	// B caches the list, a page that is not full, a full page, and the page
	// past the end.
	r := b.do(t, "GET", "/v1/categories", key, "")
	oldTag := r.header.Get("ETag")
	old := decode[[]Category](t, r)
	if r.status != 200 || oldTag == "" || len(old) != 3 {
		t.Fatalf("B's list: %d ETag %q %s", r.status, oldTag, r.body)
	}
	if r := b.do(t, "GET", "/v1/categories", key, "", "If-None-Match", oldTag); r.status != 304 {
		t.Fatalf("B with its own current ETag: %d, want 304", r.status)
	}
	last := old[2].ID
	notFull := b.do(t, "GET", "/v1/categories?limit=10", key, "")
	if notFull.status != 200 || len(decode[[]Category](t, notFull)) != 3 || notFull.header.Get("Link") != "" {
		t.Fatalf("B's page ?limit=10: %d %s Link %q", notFull.status, notFull.body, notFull.header.Get("Link"))
	}
	full := b.do(t, "GET", "/v1/categories?limit=2", key, "")
	if full.status != 200 || len(decode[[]Category](t, full)) != 2 || full.header.Get("Link") == "" {
		t.Fatalf("B's page ?limit=2: %d %s Link %q", full.status, full.body, full.header.Get("Link"))
	}
	pastEnd := fmt.Sprintf("/v1/categories?after_id=%d&limit=5", last)
	if r := b.do(t, "GET", pastEnd, key, ""); r.status != 200 || string(r.body) != "[]\n" {
		t.Fatalf("B's page past the end: %d %s", r.status, r.body)
	}

	r = a.do(t, "POST", "/v1/categories", key, `{"name":"new-on-A"}`)
	if r.status != 201 {
		t.Fatalf("create on A: %d %s", r.status, r.body)
	}
	created := decode[Category](t, r)
	want := append(slices.Clone(old), created)

	r = b.do(t, "GET", "/v1/categories", key, "", "If-None-Match", oldTag)
	if r.status != 200 {
		t.Fatalf("B with the ETag of before A's create: %d, want 200 with the new row (a 304 is a stale cache)", r.status)
	}
	newTag := r.header.Get("ETag")
	if got := decode[[]Category](t, r); !slices.EqualFunc(got, want, pmSameCategory) || newTag == oldTag || newTag == "" {
		t.Errorf("B's list after A's create: %+v ETag %q (was %q), want %+v", got, newTag, oldTag, want)
	}
	r = b.do(t, "GET", "/v1/categories", key, "")
	if got := decode[[]Category](t, r); r.status != 200 || !slices.EqualFunc(got, want, pmSameCategory) {
		t.Errorf("B's list without If-None-Match after A's create: %d %+v", r.status, got)
	}
	// The same list has the same ETag on either instance.
	if r := a.do(t, "GET", "/v1/categories", key, "", "If-None-Match", newTag); r.status != 304 {
		t.Errorf("A with B's ETag of the same list: %d, want 304", r.status)
	}

	r = b.do(t, "GET", "/v1/categories?limit=10", key, "", "If-None-Match", notFull.header.Get("ETag"))
	if got := decode[[]Category](t, r); r.status != 200 || !slices.EqualFunc(got, want, pmSameCategory) || r.header.Get("Link") != "" {
		t.Errorf("B's page ?limit=10 (not full before) after A's create: %d %+v, want %+v", r.status, got, want)
	}
	r = b.do(t, "GET", pastEnd, key, "")
	if got := decode[[]Category](t, r); r.status != 200 || !slices.EqualFunc(got, want[3:], pmSameCategory) {
		t.Errorf("B's page that was past the end, after A's create: %d %s, want %+v", r.status, r.body, want[3:])
	}
	// A full page cannot change: ids only grow.
	r = b.do(t, "GET", "/v1/categories?limit=2", key, "")
	if r.status != 200 || !bytes.Equal(r.body, full.body) || r.header.Get("ETag") != full.header.Get("ETag") {
		t.Errorf("B's full page changed: %d %s (was %s)", r.status, r.body, full.body)
	}
}

// TestPostgresPagingUnderConcurrentCreates pages through the categories by
// after_id on one instance while three instances create categories at once,
// and checks that the reader saw every acknowledged row exactly once, in
// ascending id order: no row became visible below one already seen.
func TestPostgresPagingUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	base := needPostgres(t)
	db := postgresSchema(t, base)
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 3)

	const (
		perWriter  = 300
		writeFor   = 1500 * time.Millisecond
		pageLimit  = 7
		maxPages   = 20000
		readerTime = 20 * time.Second
	)
	acked := make([][]Category, len(ts))
	var writersDone atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w, s := range ts {
		wg.Go(func() {
			for i := 0; i < perWriter && time.Since(start) < writeFor; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				r, _, err := pmSend(s, 10*time.Second, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":%q}`, name))
				if err != nil || r.status != 201 {
					t.Errorf("writer %d: create %s: %d %s %v", w, name, r.status, r.body, err)
					return
				}
				var c Category
				if err := json.Unmarshal(r.body, &c); err != nil || c.Name != name {
					t.Errorf("writer %d: create %s answered %s", w, name, r.body)
					return
				}
				acked[w] = append(acked[w], c)
			}
		})
	}
	go func() {
		wg.Wait()
		writersDone.Store(true)
	}()

	reader := ts[0]
	var seen []Category
	after, pages, emptyPolls := int64(0), 0, 0
	for {
		if pages++; pages > maxPages || time.Since(start) > readerTime {
			wg.Wait()
			t.Fatalf("the reader did not reach the end within %d pages / %v (after id %d)", maxPages, readerTime, after)
		}
		// Read before the request: a page that is not full ends the walk only
		// when it was asked for after every write was acknowledged.
		done := writersDone.Load()
		r, _, err := pmSend(reader, 10*time.Second, "GET", fmt.Sprintf("/v1/categories?limit=%d&after_id=%d", pageLimit, after), key, "")
		if err != nil || r.status != 200 {
			wg.Wait()
			t.Fatalf("page after %d: %d %s %v", after, r.status, r.body, err)
		}
		var page []Category
		if err := json.Unmarshal(r.body, &page); err != nil || len(page) > pageLimit {
			wg.Wait()
			t.Fatalf("page after %d: %s (%v)", after, r.body, err)
		}
		for _, c := range page {
			if c.ID <= after {
				wg.Wait()
				t.Fatalf("page after id %d holds id %d: ids not ascending", after, c.ID)
			}
			seen = append(seen, c)
			after = c.ID
		}
		if len(page) < pageLimit {
			if done {
				break
			}
			emptyPolls++
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()

	byID := map[int64]string{}
	for _, c := range seen {
		if prev, dup := byID[c.ID]; dup {
			t.Errorf("id %d seen twice (%q, %q)", c.ID, prev, c.Name)
		}
		byID[c.ID] = c.Name
	}
	total := 0
	for w := range acked {
		total += len(acked[w])
		for _, c := range acked[w] {
			if name, ok := byID[c.ID]; !ok || name != c.Name {
				t.Errorf("acknowledged %d %q: the reader saw %q (ok %v)", c.ID, c.Name, name, ok)
			}
		}
	}
	if len(seen) != total {
		t.Errorf("the reader saw %d rows, %d were acknowledged", len(seen), total)
	}
	if total < 3*50 {
		t.Errorf("only %d creates in %v: the test did not load the instances", total, writeFor)
	}
	t.Logf("%d creates on 3 instances (%d, %d, %d), read in %d pages of %d, %d polls at the end of the list, %v",
		total, len(acked[0]), len(acked[1]), len(acked[2]), pages, pageLimit, emptyPolls, time.Since(start).Round(time.Millisecond))
}

// pmWaitAll polls GET /v1/categories with key on every instance until each
// answers want, and fails when one has not by since+pmPropagation. Any
// answer but 200 or 401 fails at once.
func pmWaitAll(t *testing.T, ts []*testServer, key string, want int, since time.Time, what string) {
	t.Helper()
	pending := map[int]bool{}
	for i := range ts {
		pending[i] = true
	}
	for {
		for i := range ts {
			if !pending[i] {
				continue
			}
			r, _, err := pmSend(ts[i], 5*time.Second, "GET", "/v1/categories", key, "")
			if err != nil {
				t.Fatalf("%s: instance %d: %v", what, i, err)
			}
			if r.status != 200 && r.status != 401 {
				t.Fatalf("%s: instance %d answered %d %s", what, i, r.status, r.body)
			}
			if r.status == want {
				delete(pending, i)
			}
		}
		if len(pending) == 0 {
			t.Logf("%s: every instance answers %d, %v after", what, want, time.Since(since).Round(time.Millisecond))
			return
		}
		if time.Since(since) > pmPropagation {
			t.Fatalf("%s: instances %v still do not answer %d after %v", what, slices.Sorted(maps.Keys(pending)), want, time.Since(since).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPostgresKeyRevokedEverywhere checks that a key revoked with keys
// revoke stops working on every instance within 2 s, and that a key created
// while they run starts working on every one within 2 s.
func TestPostgresKeyRevokedEverywhere(t *testing.T) {
	t.Parallel()
	base := needPostgres(t)
	db := postgresSchema(t, base)
	k1 := createKeyJSON(t, db, "--plan", "business", "--name", "old")
	oldID, old := k1.ID, k1.Key
	// Keys that do not work count against the client address: lift that
	// limit, which is not what is tested here.
	ts := pmStart(t, db, old, 3, "--anon-rpm", "100000")
	for i, s := range ts {
		if r := s.do(t, "GET", "/v1/categories", old, ""); r.status != 200 {
			t.Fatalf("instance %d: the key created before the start: %d %s", i, r.status, r.body)
		}
	}

	k2 := createKeyJSON(t, db, "--plan", "business", "--name", "fresh")
	newID, fresh := k2.ID, k2.Key
	pmWaitAll(t, ts, fresh, 200, time.Now(), "key created while the instances run")

	out, errOut, err := runCLI(t, nil, "keys", "revoke", fmt.Sprint(oldID), "--db", db)
	revoked := time.Now()
	if err != nil || strings.TrimSpace(out) != fmt.Sprintf("key %d revoked", oldID) {
		t.Fatalf("keys revoke %d: %v %q %s", oldID, err, out, errOut)
	}
	pmWaitAll(t, ts, old, 401, revoked, "revoked key")
	for i, s := range ts {
		r := s.do(t, "GET", "/v1/categories", old, "")
		wantError(t, r, 401, "unauthorized")
		if r := s.do(t, "POST", "/v1/categories", old, fmt.Sprintf(`{"name":"revoked-%d"}`, i)); r.status != 401 {
			t.Errorf("instance %d: create with the revoked key: %d %s", i, r.status, r.body)
		}
		// The key made meanwhile was not touched by the revoke.
		if r := s.do(t, "GET", "/v1/categories", fresh, ""); r.status != 200 {
			t.Errorf("instance %d: the other key after the revoke: %d %s", i, r.status, r.body)
		}
	}

	if _, errOut, err := runCLI(t, nil, "keys", "revoke", fmt.Sprint(newID), "--db", db); err != nil {
		t.Fatalf("keys revoke %d: %v %s", newID, err, errOut)
	}
	pmWaitAll(t, ts, fresh, 401, time.Now(), "second revoked key")
	// And neither comes back.
	time.Sleep(1100 * time.Millisecond) // one more refresh of every keyring
	for i, s := range ts {
		for _, k := range []string{old, fresh} {
			if r := s.do(t, "GET", "/v1/categories", k, ""); r.status != 401 {
				t.Errorf("instance %d: a revoked key works again: %d", i, r.status)
			}
		}
	}
}

// TestPostgresDayQuotaAcrossInstances checks that two instances count a
// key's day quota together, through the database: requests alternating
// between them stop near the quota (past it by at most what the instances
// serve in about a second), the database ends with every served request
// counted, and an instance that served none of a key's requests refuses it
// once another used up its quota.
func TestPostgresDayQuotaAcrossInstances(t *testing.T) {
	clearOfMidnight(t, time.Minute)
	t.Parallel()
	base := needPostgres(t)
	db := postgresSchema(t, base)
	const quota = 20
	k3 := createKeyJSON(t, db, "--plan", "enterprise", "--rpm", "1000", "--rpd", fmt.Sprint(quota))
	id, key := k3.ID, k3.Key
	const quota2 = 10
	k4 := createKeyJSON(t, db, "--plan", "enterprise", "--rpm", "1000", "--rpd", fmt.Sprint(quota2))
	id2, key2 := k4.ID, k4.Key
	ts := pmStart(t, db, key, 2)
	conn := pmConnect(t, db)

	// One request every pace, alternating: each instance serves at most
	// 1s/(2*pace) a second, both together 1s/pace. The allowed overshoot is
	// what both serve in one second (DECISIONS.md: each instance's counts
	// reach the database, and the others' reach each instance, at most 1 s
	// late), plus one request in flight on each.
	const (
		pace        = 100 * time.Millisecond
		maxRequests = 150
	)
	overshoot := int(time.Second/pace) + 2
	ok, sent := 0, 0
	okOn := [2]int{}
	refusedAt := [2]int{-1, -1}
	start := time.Now()
	for i := 0; refusedAt[0] < 0 || refusedAt[1] < 0; i++ {
		if i >= maxRequests || time.Since(start) > 20*time.Second {
			t.Fatalf("after %d requests (%d served: %v) in %v, instances not both refusing: first refusals at %v",
				i, ok, okOn, time.Since(start).Round(time.Millisecond), refusedAt)
		}
		n := i % 2
		r := ts[n].do(t, "GET", "/v1/categories", key, "")
		sent++
		switch {
		case r.status == 200:
			ok++
			okOn[n]++
			if refusedAt[n] >= 0 {
				t.Errorf("instance %d served request %d after refusing request %d for the quota", n, i, refusedAt[n])
			}
		case r.status == 429 && pmErrorCode(r.body) == "quota_exceeded":
			if refusedAt[n] < 0 {
				refusedAt[n] = i
			}
		default:
			t.Fatalf("request %d on instance %d: %d %s", i, n, r.status, r.body)
		}
		time.Sleep(pace)
	}
	t.Logf("quota %d: %d served (%v per instance) of %d sent in %v; first refusals at requests %v",
		quota, ok, okOn, sent, time.Since(start).Round(time.Millisecond), refusedAt)
	if ok < quota {
		t.Errorf("%d requests served before both instances refused, want at least the quota %d", ok, quota)
	}
	if ok > quota+overshoot {
		t.Errorf("%d requests served with a quota of %d: more than the %d that two instances serve in a second at this pace (%v per request)",
			ok, quota, overshoot, pace)
	}
	// Every served request reaches the database, within a second of the
	// last (with a margin for the flush itself).
	pmWaitUsage(t, conn, id, int64(ok), 1500*time.Millisecond)
	time.Sleep(1100 * time.Millisecond)
	for i, s := range ts {
		r := s.do(t, "GET", "/v1/categories", key, "")
		wantError(t, r, 429, "quota_exceeded")
		if r.header.Get("Retry-After") == "" {
			t.Errorf("instance %d: quota_exceeded without Retry-After", i)
		}
	}
	if n := pmUsage(t, conn, id); n != int64(ok) {
		t.Errorf("the database counts %d requests, %d were served (refusals must not count)", n, ok)
	}

	// A key used up on A alone is refused on B, which never served it, once
	// A's counts reached the database and B read them (a second each).
	for i := range quota2 {
		if r := ts[0].do(t, "GET", "/v1/categories", key2, ""); r.status != 200 {
			t.Fatalf("request %d of %d on A: %d %s", i+1, quota2, r.status, r.body)
		}
	}
	wantError(t, ts[0].do(t, "GET", "/v1/categories", key2, ""), 429, "quota_exceeded")
	pmWaitUsage(t, conn, id2, quota2, 1500*time.Millisecond)
	time.Sleep(1200 * time.Millisecond) // B reads everyone's counts every second
	r := ts[1].do(t, "GET", "/v1/categories", key2, "")
	if r.status != 429 || pmErrorCode(r.body) != "quota_exceeded" {
		t.Errorf("B, a second after the database held A's %d requests (quota %d): %d %s, want 429 quota_exceeded",
			quota2, quota2, r.status, r.body)
	}
}

// pmServer is a serve process started by pmStartAtOnce.
type pmServer struct {
	ts   *testServer
	done chan error
}

// pmStartAtOnce starts n serve instances on db at the same moment and
// waits until each listens. startServerOn cannot be used: it fails the test
// from the goroutine it runs in.
func pmStartAtOnce(t *testing.T, db string, n int, args ...string) []*testServer {
	t.Helper()
	gate := make(chan struct{})
	procs := make([]pmServer, n)
	for i := range procs {
		ctx, cancel := context.WithCancel(context.Background())
		stderr := &syncBuffer{}
		done := make(chan error, 1)
		all := append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--db", db}, args...)
		go func() {
			<-gate
			done <- run(ctx, all, envFrom(nil), io.Discard, stderr)
		}()
		ts := &testServer{db: db, stderr: stderr, client: contractClient(t, args)}
		var once sync.Once
		ts.stop = func() {
			once.Do(func() {
				cancel()
				select {
				case err := <-done:
					// One stopped while it started (the test failed) may
					// say that it was cancelled.
					if err != nil && !errors.Is(err, context.Canceled) {
						t.Errorf("instance %d: serve returned %v", i, err)
					}
				case <-time.After(15 * time.Second):
					t.Errorf("instance %d: serve did not stop within 15s", i)
				}
			})
		}
		t.Cleanup(func() {
			ts.stop()
			if t.Failed() {
				t.Logf("instance %d log:\n%s", i, stderr.String())
			}
		})
		procs[i] = pmServer{ts: ts, done: done}
	}
	close(gate)
	deadline := time.Now().Add(15 * time.Second)
	servers := make([]*testServer, n)
	for i, p := range procs {
		for p.ts.base == "" {
			if addr := logAddr(listeningRE, p.ts.stderr.String()); addr != "" {
				p.ts.base = "http://" + addr
				break
			}
			select {
			case err := <-p.done:
				p.done <- err // for stop
				t.Fatalf("instance %d exited at its start: %v\n%s", i, err, p.ts.stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("instance %d did not start within 15s:\n%s", i, p.ts.stderr.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		servers[i] = p.ts
	}
	pmCloseIdleFirst(t, servers)
	return servers
}

var pmFirstKeyRE = regexp.MustCompile(`(?m)^(ps_live_[0-9A-Za-z]{40})$`)

// TestPostgresConcurrentStartCreatesOneFirstKey starts three instances at
// once on a new schema without keys, several times: they must all start,
// migrate it once to a clean latest version, and create exactly one
// first-run key, printed by exactly one of them and usable on all. Half
// the trials start on an empty schema (the instances race to migrate it);
// the others on one migrated beforehand, where nothing staggers the
// instances before they look for keys.
func TestPostgresConcurrentStartCreatesOneFirstKey(t *testing.T) {
	t.Parallel()
	base := needPostgres(t)
	latest, err := latestMigration("migrations/postgres")
	if err != nil {
		t.Fatal(err)
	}
	const trials = 8
	for trial := range trials {
		premigrated := trial%2 == 1
		t.Run(fmt.Sprintf("trial%d/premigrated=%v", trial, premigrated), func(t *testing.T) {
			db := postgresSchema(t, base)
			if premigrated {
				if _, errOut, err := runCLI(t, nil, "migrate", "--db", db); err != nil {
					t.Fatalf("migrate: %v %s", err, errOut)
				}
			}
			ts := pmStartAtOnce(t, db, 3)
			var printed []int
			var key string
			for i, s := range ts {
				log := s.stderr.String()
				if strings.Contains(log, "the database had no API keys") {
					printed = append(printed, i)
					if m := pmFirstKeyRE.FindStringSubmatch(log); m != nil {
						key = m[1]
					}
				} else if pmFirstKeyRE.MatchString(log) {
					t.Errorf("instance %d printed a key without the first-run message", i)
				}
			}
			if len(printed) != 1 || key == "" {
				t.Fatalf("instances %v printed the first-run key message (key found: %v), want exactly one", printed, key != "")
			}

			conn := pmConnect(t, db)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var keys int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM api_keys").Scan(&keys); err != nil || keys != 1 {
				t.Errorf("api_keys holds %d rows (%v), want the one first-run key", keys, err)
			}
			rows, err := conn.Query(ctx, "SELECT version, dirty FROM schema_migrations")
			if err != nil {
				t.Fatal(err)
			}
			type row struct {
				Version int64
				Dirty   bool
			}
			versions, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
			if err != nil || len(versions) != 1 || versions[0].Version != int64(latest) || versions[0].Dirty {
				t.Errorf("schema_migrations: %+v (%v), want one row: version %d, clean", versions, err, latest)
			}
			// The key works at once where it was printed; on the others
			// within 2 s (checked in the first trials only: it takes a second).
			if r := ts[printed[0]].do(t, "GET", "/v1/categories", key, ""); r.status != 200 {
				t.Errorf("the first-run key on the instance that printed it: %d %s", r.status, r.body)
			}
			if trial < 2 {
				pmWaitAll(t, ts, key, 200, time.Now(), "first-run key")
			}
		})
	}
}

// pmCreate is the outcome of one create of the outage test.
type pmCreate struct {
	name       string
	sent, got  time.Time
	status     int
	code       string
	retryAfter string
	id         int64
	err        error
}

// TestPostgresOutageGives503AndRecovers cuts the connection between two
// instances and PostgreSQL (a proxy in between) for 1.5 s, during
// concurrent creates: creates and reads answer 503 unavailable with
// Retry-After within the busy timeout, never 500 and never hang, /readyz
// answers 503; when the database is back the instances serve again without
// a restart, and every create that was answered 201 is in the table (a 503
// may hide a committed create: that is allowed).
func TestPostgresOutageGives503AndRecovers(t *testing.T) {
	t.Parallel()
	pmOutage(t, (*pmProxy).cut, 1500*time.Millisecond)
}

// TestPostgresStalledDatabaseGives503InTime is the outage test with a
// database that stops answering instead of refusing: a network that drops
// every packet, for longer than the busy timeout. Every answer must still
// come within the busy timeout (and a margin), as a 503.
func TestPostgresStalledDatabaseGives503InTime(t *testing.T) {
	t.Parallel()
	pmOutage(t, (*pmProxy).stall, 2500*time.Millisecond)
}

// pmOutage runs the outage tests: breakDB breaks the proxy between two
// instances and the database for outage, during concurrent creates.
func pmOutage(t *testing.T, breakDB func(*pmProxy), outage time.Duration) {
	base := needPostgres(t)
	db := postgresSchema(t, base)
	key := pmBigKey(t, db) // migrates the schema, straight
	proxy := pmStartProxy(t, pmTarget(t, db))
	proxied := pmViaProxy(t, db, proxy.addr())
	const busy = time.Second
	ts := pmStart(t, proxied, key, 2, "--busy-timeout", busy.String())

	// Every answer must come within the busy timeout; the margin covers a
	// loaded test machine (-race, parallel tests), but not a second wait of
	// the busy timeout (a create queued behind a batch that timed out).
	const answerWithin = busy + 500*time.Millisecond
	const (
		writers   = 4
		perWriter = 400
		pace      = 5 * time.Millisecond
		maxPause  = 100 * time.Millisecond
	)
	results := make([][]pmCreate, writers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			s := ts[w%len(ts)]
			for i := 0; i < perWriter; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c := pmCreate{name: fmt.Sprintf("o%d-%d", w, i), sent: time.Now()}
				r, _, err := pmSend(s, 10*time.Second, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":%q}`, c.name))
				c.got, c.err = time.Now(), err
				if err == nil {
					c.status, c.code, c.retryAfter = r.status, pmErrorCode(r.body), r.header.Get("Retry-After")
					if r.status == 201 {
						var cat Category
						if json.Unmarshal(r.body, &cat) != nil || cat.Name != c.name {
							c.err = fmt.Errorf("201 with body %s", r.body)
						}
						c.id = cat.ID
					}
				}
				results[w] = append(results[w], c)
				// Random pauses, so that creates also come while a batch
				// is on its way to the database, not only all at once.
				time.Sleep(pace + rand.N(maxPause))
			}
		})
	}
	stopWriters := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWriters()

	time.Sleep(400 * time.Millisecond)
	// A create answered while cut runs may have been either side of it.
	cutStart := time.Now()
	breakDB(proxy)
	cutAt := time.Now()
	// During the outage, on both instances at once: /readyz, and reads,
	// which need the database too (a list's generation, a page that is not
	// full, a streamed list, one pet): 503 unavailable, not 500, in time.
	type probe struct {
		instance  int
		path, key string
		r         response
		took      time.Duration
		err       error
	}
	var probes []*probe
	for i := range ts {
		probes = append(probes, &probe{instance: i, path: "/readyz"})
		for _, path := range []string{"/v1/categories", "/v1/categories?limit=5&after_id=1000000", "/v1/pets", "/v1/store/orders", "/v1/pets/1"} {
			probes = append(probes, &probe{instance: i, path: path, key: key})
		}
	}
	var probing sync.WaitGroup
	for _, p := range probes {
		probing.Go(func() {
			p.r, p.took, p.err = pmSend(ts[p.instance], 10*time.Second, "GET", p.path, p.key, "")
			// /readyz answers at once from the state it keeps: ready while
			// the database answered within the last second, so it turns
			// 503 a second after its first ping that found the database
			// away (DECISIONS.md section 21). Ask again until then.
			for p.path == "/readyz" && p.err == nil && p.r.status == 200 && p.took <= answerWithin && time.Since(cutAt) < outage {
				time.Sleep(50 * time.Millisecond)
				p.r, p.took, p.err = pmSend(ts[p.instance], 10*time.Second, "GET", p.path, p.key, "")
			}
		})
	}
	probing.Wait()
	if probed := time.Since(cutAt); probed > outage {
		t.Errorf("the probes took %v, longer than the outage of %v", probed, outage)
	}
	for _, p := range probes {
		switch {
		case p.err != nil:
			t.Errorf("instance %d: GET %s during the outage: %v after %v", p.instance, p.path, p.err, p.took)
		case p.r.status != 503 || pmErrorCode(p.r.body) != "unavailable" || p.r.header.Get("Retry-After") == "" || p.took > answerWithin:
			t.Errorf("instance %d: GET %s during the outage: %d %s Retry-After %q in %v, want 503 unavailable within %v",
				p.instance, p.path, p.r.status, p.r.body, p.r.header.Get("Retry-After"), p.took, answerWithin)
		}
	}
	time.Sleep(time.Until(cutAt.Add(outage)))
	restoreAt := time.Now()
	proxy.restore()

	// Without a restart, each instance creates again, and is ready again.
	for i, s := range ts {
		for n := 0; ; n++ {
			r, _, err := pmSend(s, 10*time.Second, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":"after-%d-%d"}`, i, n))
			if err == nil && r.status == 201 {
				break
			}
			if time.Since(restoreAt) > 5*time.Second {
				t.Fatalf("instance %d: no 201 within 5s of the database's return: %d %s %v", i, r.status, r.body, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for {
			r, _, err := pmSend(s, 10*time.Second, "GET", "/readyz", "", "")
			if err == nil && r.status == 200 {
				break
			}
			if time.Since(restoreAt) > 5*time.Second {
				t.Fatalf("instance %d: /readyz not 200 within 5s of the database's return: %d %s %v", i, r.status, r.body, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	recovered := time.Since(restoreAt)
	time.Sleep(300 * time.Millisecond) // some creates after the recovery
	stopWriters()

	var before, during, after, unavailable int
	acked := map[int64]string{}
	var slowest time.Duration
	for w := range results {
		for _, c := range results[w] {
			took := c.got.Sub(c.sent)
			slowest = max(slowest, took)
			switch {
			case c.err != nil:
				t.Errorf("create %s: %v after %v", c.name, c.err, took)
				continue
			case c.status == 201:
				if prev, dup := acked[c.id]; dup {
					t.Errorf("id %d answered 201 twice: %s and %s", c.id, prev, c.name)
				}
				acked[c.id] = c.name
			case c.status == 503:
				unavailable++
				if c.code != "unavailable" || c.retryAfter == "" {
					t.Errorf("create %s: 503 with code %q, Retry-After %q", c.name, c.code, c.retryAfter)
				}
			default:
				t.Errorf("create %s: %d %s (sent %v after the cut)", c.name, c.status, c.code, c.sent.Sub(cutAt))
			}
			if took > answerWithin {
				t.Errorf("create %s took %v, sent %v after the cut: more than the busy timeout %v and a margin", c.name, took, c.sent.Sub(cutAt).Round(time.Millisecond), busy)
			}
			switch {
			case c.sent.After(cutAt) && c.got.Before(restoreAt):
				during++
				// Nothing can be committed while no connection gets through.
				if c.status != 503 {
					t.Errorf("create %s, sent and answered during the outage: %d, want 503", c.name, c.status)
				}
			case c.got.Before(cutStart):
				before++
				if c.status != 201 {
					t.Errorf("create %s before the outage: %d %s", c.name, c.status, c.code)
				}
			case c.sent.After(restoreAt.Add(recovered)):
				after++
				if c.status != 201 {
					t.Errorf("create %s after the instances recovered: %d %s", c.name, c.status, c.code)
				}
			}
		}
	}
	t.Logf("creates: %d before the outage, %d during it, %d after the recovery (%v after the restore); %d answered 201, %d 503; slowest answer %v",
		before, during, after, recovered.Round(time.Millisecond), len(acked), unavailable, slowest.Round(time.Millisecond))
	if before == 0 || during < writers || after == 0 {
		t.Errorf("the writers did not cover the three phases: %d before, %d during, %d after", before, during, after)
	}

	// Straight to the database, not through the proxy: every 201 is there.
	conn := pmConnect(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := conn.Query(ctx, "SELECT id, name FROM categories ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	stored := map[int64]string{}
	names := map[string]int64{}
	for rows.Next() {
		var id int64
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			t.Fatal(err)
		}
		if _, dup := stored[id]; dup {
			t.Errorf("id %d stored twice", id)
		}
		if prev, dup := names[name]; dup {
			t.Errorf("name %q stored twice: ids %d and %d", name, prev, id)
		}
		stored[id], names[name] = name, id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for id, name := range acked {
		if got, ok := stored[id]; !ok || got != name {
			lost++
			if lost <= 10 {
				t.Errorf("create %s answered 201 with id %d; the table holds %q there (present: %v)", name, id, got, ok)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged creates are not in the table as answered", lost, len(acked))
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("reading the table took more than 10s")
	}
}
