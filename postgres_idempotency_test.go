package main

// Tests of Idempotency-Key on PostgreSQL (DECISIONS.md sections 15 and
// 22): a keyed create looks for an earlier answer in its own statement,
// under the catalog's lock, so that nothing a dead request leaves blocks a
// retry and a concurrent duplicate waits for the first's commit. They
// need PETSTORE_TEST_POSTGRES.

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestPostgresIdempotencyCrashFreesKeys sends 240 keyed creates from 40
// clients to the real program in its own process, SIGKILLs it while they run,
// restarts it and resends every one of them at once, with its key. A
// killed request holds nothing: each resend is a 201, fresh or a replay
// whose body is the row that the table holds, never a 409
// idempotency_key_in_use, and each pet exists exactly once.
func TestPostgresIdempotencyCrashFreesKeys(t *testing.T) {
	base := needPostgres(t)
	db := postgresSchema(t, base)
	key := pmBigKey(t, db)
	// --max-conns-per-addr 0: the 240 resends come at once from one
	// address, past its share of the requests in flight (64).
	p := startProcess(t, db, "--busy-timeout", "1s", "--max-conns-per-addr", "0")
	client := contractClient(t, nil)
	ts := &testServer{base: "http://" + p.addr, key: key, client: client}
	cat := decode[Category](t, ts.do(t, "POST", "/v1/categories", key, `{"name":"Dogs"}`))

	const n, clients, killAfter = 240, 40, 80
	type sent struct {
		name, body string
		first      []byte // the 201 before the kill, if any
	}
	all := make([]*sent, n)
	for i := range all {
		name := fmt.Sprintf("crash-%03d", i)
		all[i] = &sent{name: name, body: fmt.Sprintf(`{"name":%q,"categoryId":%d}`, name, cat.ID)}
	}
	var answered atomic.Int64
	killed := make(chan struct{})
	kill := sync.OnceFunc(func() { p.cmd.Process.Signal(syscall.SIGKILL); close(killed) })
	// Clients that send one create after another, so that creates keep
	// arriving and some are always running when the kill comes.
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; i < n; i += clients {
				s := all[i]
				r, _, err := pmSend(ts, 10*time.Second, "POST", "/v1/pets", key, s.body, "Idempotency-Key", s.name)
				if err != nil {
					return // killed: this one and the rest are resent
				}
				if r.status != 201 {
					t.Errorf("%s before the kill: %d %s", s.name, r.status, r.body)
					return
				}
				s.first = r.body
				if answered.Add(1) == killAfter {
					kill() // in the middle: most are still to come
				}
			}
		})
	}
	select {
	case <-killed:
	case <-time.After(10 * time.Second):
		kill() // the creates are slow: kill anyway, and see what ran
	}
	wg.Wait()
	p.wait(t, 10*time.Second)
	before := answered.Load()

	p = startProcess(t, db, "--busy-timeout", "1s", "--max-conns-per-addr", "0")
	ts = &testServer{base: "http://" + p.addr, key: key, client: client}
	resent := make([]response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i, s := range all {
		wg.Go(func() {
			<-start
			resent[i], _, errs[i] = pmSend(ts, 10*time.Second, "POST", "/v1/pets", key, s.body, "Idempotency-Key", s.name)
		})
	}
	close(start)
	wg.Wait()

	rows := map[string][]Pet{}
	for _, pet := range decode[[]Pet](t, ts.do(t, "GET", "/v1/pets", key, "")) {
		rows[pet.Name] = append(rows[pet.Name], pet)
	}
	inUse, replayed := 0, 0
	for i, s := range all {
		r := resent[i]
		switch {
		case errs[i] != nil:
			t.Errorf("resent %s: %v", s.name, errs[i])
			continue
		case r.status == 409 && pmErrorCode(r.body) == "idempotency_key_in_use":
			inUse++
			continue
		case r.status != 201:
			t.Errorf("resent %s: %d %s", s.name, r.status, r.body)
			continue
		}
		isReplay := r.header.Get("Idempotency-Replayed") == "true"
		if isReplay {
			replayed++
		}
		if s.first != nil && (!isReplay || string(r.body) != string(s.first)) {
			t.Errorf("resent %s, answered 201 before the kill: %s (replayed %v), want the replay of %s", s.name, r.body, isReplay, s.first)
		}
		var got Pet
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Errorf("resent %s: %s: %v", s.name, r.body, err)
			continue
		}
		if have := rows[s.name]; len(have) != 1 || have[0] != got {
			t.Errorf("resent %s: answered %+v, the table holds %+v", s.name, got, have)
		}
	}
	if inUse > 0 {
		t.Errorf("%d of %d resends got 409 idempotency_key_in_use after the restart: a killed request's mark outlived it", inUse, n)
	}
	if len(rows) != n {
		t.Errorf("%d pet names in the table, want %d", len(rows), n)
	}
	if before >= n {
		t.Errorf("all %d creates were answered before the kill: the test proves little", n)
	}
	t.Logf("%d keyed creates, %d answered before the kill; resent at once: %d replayed, %d in use", n, before, replayed, inUse)
}

// TestPostgresIdempotencyDuplicateWaits holds a keyed create running on one
// instance (its INSERT waits for a table lock the test holds): the same
// key sent meanwhile on another instance and on the same one waits for
// the first's commit and then gets its replay, byte for byte, never a 409
// and never a second row.
func TestPostgresIdempotencyDuplicateWaits(t *testing.T) {
	base := needPostgres(t)
	db := postgresSchema(t, base)
	key := pmBigKey(t, db)
	servers := pmStart(t, db, key, 2, "--busy-timeout", "5s")
	a, b := servers[0], servers[1]
	conn := pmConnect(t, db)
	ctx := context.Background()
	cat := decode[Category](t, a.do(t, "POST", "/v1/categories", key, `{"name":"Dogs"}`))
	body := fmt.Sprintf(`{"name":"Rex","categoryId":%d}`, cat.ID)

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE pets IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	send := func(ts *testServer) chan response {
		c := make(chan response, 1)
		go func() {
			r, _, err := pmSend(ts, 10*time.Second, "POST", "/v1/pets", key, body, "Idempotency-Key", "k")
			if err != nil {
				t.Error(err)
			}
			c <- r
		}()
		return c
	}
	first := send(a)
	watch := pmConnect(t, db)
	waiting := func(n int) {
		t.Helper()
		// Sessions of the test's schema that wait for a lock: the first
		// create for the table, the others for the catalog's lock.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			var got int
			if err := watch.QueryRow(ctx, `SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d sessions wait for a lock after 5s, want %d", got, n)
			}
		}
	}
	waiting(1)
	onB, onA := send(b), send(a)
	waiting(2) // b's batch waits for the catalog's lock; a's second waits in a's queue
	select {
	case r := <-onB:
		t.Fatalf("the duplicate on another instance answered while the first ran: %d %s", r.status, r.body)
	case r := <-onA:
		t.Fatalf("the duplicate on the same instance answered while the first ran: %d %s", r.status, r.body)
	case <-time.After(100 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r1 := <-first
	if r1.status != 201 {
		t.Fatalf("the held create: %d %s", r1.status, r1.body)
	}
	wantReplay(t, r1, <-onB)
	wantReplay(t, r1, <-onA)
	if n := countPets(t, a, "Rex"); n != 1 {
		t.Errorf("%d pets named Rex, want 1", n)
	}
}

// TestPostgresIdempotencySessionsBreak ends the instance's sessions
// (pg_terminate_backend) again and again during keyed creates from several
// clients: every answer is a 201 or a 503 unavailable with Retry-After,
// never another, and the instance recovers by itself; each create resent
// with its key until it gets a 201 then exists exactly once, as answered.
func TestPostgresIdempotencySessionsBreak(t *testing.T) {
	base := needPostgres(t)
	schema := postgresSchema(t, base)
	var rnd [4]byte
	crand.Read(rnd[:])
	app := "i42-" + hex.EncodeToString(rnd[:])
	u, err := url.Parse(schema)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	db := u.String()
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 1, "--busy-timeout", "1s")[0]
	conn := pmConnect(t, schema)
	ctx := context.Background()
	cut := func() int {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	type sent struct {
		name   string
		answer []byte
	}
	const writers, perWriter = 4, 60
	all := make([][]*sent, writers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	unavailable := 0
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				s := &sent{name: fmt.Sprintf("w%d-%d", w, i)}
				all[w] = append(all[w], s)
				r, _, err := pmSend(ts, 10*time.Second, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":%q}`, s.name), "Idempotency-Key", s.name)
				switch {
				case err != nil:
					t.Errorf("%s: %v", s.name, err)
				case r.status == 201:
					s.answer = r.body
				case r.status == 503 && pmErrorCode(r.body) == "unavailable" && r.header.Get("Retry-After") != "":
					mu.Lock()
					unavailable++
					mu.Unlock()
				default:
					t.Errorf("%s while the sessions break: %d %s", s.name, r.status, r.body)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	cuts := 0
	for range 5 {
		time.Sleep(60 * time.Millisecond)
		cuts += cut()
	}
	wg.Wait()
	if cuts == 0 {
		t.Fatal("no session was there to end: the test proves little")
	}

	// By itself, without a restart: a fresh keyed create gets its 201 (the
	// first may meet a pooled connection that the last cut ended: 503).
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := idemPost(t, ts, "/v1/categories", key, "after", `{"name":"after"}`)
		if r.status == 201 {
			break
		}
		if r.status != 503 || time.Now().After(deadline) {
			t.Fatalf("a keyed create after the breaks: %d %s, want 201 within 2s", r.status, r.body)
		}
	}
	resent := 0
	for _, ss := range all {
		for _, s := range ss {
			for deadline := time.Now().Add(5 * time.Second); s.answer == nil; time.Sleep(50 * time.Millisecond) {
				resent++
				r := idemPost(t, ts, "/v1/categories", key, s.name, fmt.Sprintf(`{"name":%q}`, s.name))
				if r.status == 201 {
					s.answer = r.body
				} else if time.Now().After(deadline) {
					t.Fatalf("resent %s: still %d %s after 5s", s.name, r.status, r.body)
				}
			}
		}
	}
	cats := map[string][]Category{}
	for _, c := range decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, "")) {
		cats[c.Name] = append(cats[c.Name], c)
	}
	for _, ss := range all {
		for _, s := range ss {
			var c Category
			if err := json.Unmarshal(s.answer, &c); err != nil {
				t.Fatalf("%s: %s: %v", s.name, s.answer, err)
			}
			if have := cats[s.name]; len(have) != 1 || have[0].ID != c.ID {
				t.Errorf("%s: answered %s, the table holds %+v", s.name, s.answer, have)
			}
		}
	}
	t.Logf("%d keyed creates, %d sessions ended in 5 cuts, %d answered 503, %d resent", writers*perWriter, cuts, unavailable, resent)
}

// TestPostgresIdempotencyConflictAnswers: a keyed category create refused
// as a conflict stores its 409, built in the database, byte for byte as
// the same create without a key answers it (the holder's name quoted as
// the server quotes it), whether the holder's name is the one sent, an
// ASCII variant of it with quotes and backslashes, or a non-ASCII one
// (stored by a statement of its own: pgKeepLate); each replays byte for
// byte, and the same key with another body is 422.
func TestPostgresIdempotencyConflictAnswers(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 1)[0]
	for i, tt := range []struct{ holder, sent string }{
		{`Dogs`, `Dogs`},
		{`a"b\c`, `A"B\C`},
		{`Straße`, `STRASSE`},
		{"ｃａｔ x", "cat X"},
	} {
		hb, _ := json.Marshal(map[string]string{"name": tt.holder})
		if r := ts.do(t, "POST", "/v1/categories", key, string(hb)); r.status != 201 {
			t.Fatalf("%q: %d %s", tt.holder, r.status, r.body)
		}
		sb, _ := json.Marshal(map[string]string{"name": tt.sent})
		plain := ts.do(t, "POST", "/v1/categories", key, string(sb))
		if plain.status != 409 {
			t.Fatalf("%q after %q: %d %s", tt.sent, tt.holder, plain.status, plain.body)
		}
		k := fmt.Sprintf("conflict-%d", i)
		first := idemPost(t, ts, "/v1/categories", key, k, string(sb))
		if first.status != 409 || !bytes.Equal(first.body, plain.body) {
			t.Errorf("%q after %q with a key: %d %s, want it as without one: %s", tt.sent, tt.holder, first.status, first.body, plain.body)
		}
		wantReplay(t, first, idemPost(t, ts, "/v1/categories", key, k, string(sb)))
		wantError(t, idemPost(t, ts, "/v1/categories", key, k, `{"name":"other"}`), 422, "idempotency_key_reused")
	}
}
