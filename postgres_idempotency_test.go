package main

// Tests of Idempotency-Key's in-flight marks on PostgreSQL (DECISIONS.md
// section 15): advisory locks that live as long as the request holding
// them, on connections of their own. They need PETSTORE_TEST_POSTGRES.

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	p := startProcess(t, db, "--busy-timeout", "1s")
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

	p = startProcess(t, db, "--busy-timeout", "1s")
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

// pgIdemLockHeld reports whether any session holds the advisory lock of
// an Idempotency-Key of the schema in db's search_path.
func pgIdemLockHeld(t *testing.T, conn *pgx.Conn, db string, keyID int64, key string) bool {
	t.Helper()
	lock := pgIdemLockKey(mustSearchPath(t, db), keyID, key)
	var held bool
	err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND objsubid = 1 AND ((classid::int8 << 32) | objid::int8) = $1)`, lock).Scan(&held)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// TestIdempotencyInUseOnAnyInstance holds a keyed create running on one
// instance (its INSERT waits for a table lock the test holds): the same
// key on another instance, and on the same one, is 409 in use with
// Retry-After: 1, and the lock is gone once the create has committed, so
// that the other instance then replays its answer.
func TestIdempotencyInUseOnAnyInstance(t *testing.T) {
	base := needPostgres(t)
	db := postgresSchema(t, base)
	k1 := createKeyJSON(t, db, "--plan", "enterprise", "--rpm", "10000000", "--rpd", "1000000000")
	id, key := k1.ID, k1.Key
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
	held := make(chan response, 1)
	go func() {
		r, _, err := pmSend(a, 10*time.Second, "POST", "/v1/pets", key, body, "Idempotency-Key", "k")
		if err != nil {
			t.Error(err)
		}
		held <- r
	}()
	// A separate connection: conn is inside the transaction.
	watch := pmConnect(t, db)
	for deadline := time.Now().Add(5 * time.Second); !pgIdemLockHeld(t, watch, db, id, "k"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the keyed create did not take its lock within 5s")
		}
	}
	for _, ts := range servers {
		r := idemPost(t, ts, "/v1/pets", key, "k", body)
		wantError(t, r, 409, "idempotency_key_in_use")
		if r.header.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q, want 1", r.header.Get("Retry-After"))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-held
	if first.status != 201 {
		t.Fatalf("the held create: %d %s", first.status, first.body)
	}
	if pgIdemLockHeld(t, watch, db, id, "k") {
		t.Fatal("the key's lock is still held after its create answered 201")
	}
	wantReplay(t, first, idemPost(t, b, "/v1/pets", key, "k", body))
	// A key of the same lineage and name in another schema (another
	// deployment on the database) is another lock.
	if pgIdemLockKey("other", id, "k") == pgIdemLockKey(mustSearchPath(t, db), id, "k") {
		t.Fatal("the lock of a key does not depend on the schema")
	}
}

func mustSearchPath(t *testing.T, db string) string {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("search_path")
}

// TestPostgresIdempotencyLockConnectionsBreak ends the lock connections'
// sessions (pg_terminate_backend) again and again during keyed creates
// from several clients: every answer is a 201 or a 503 unavailable with
// Retry-After, never another, and the instance recovers by itself; each
// create resent with its key until it gets a 201 then exists exactly once,
// as answered.
func TestPostgresIdempotencyLockConnectionsBreak(t *testing.T) {
	base := needPostgres(t)
	schema := postgresSchema(t, base)
	var rnd [4]byte
	crand.Read(rnd[:])
	app := "i26-" + hex.EncodeToString(rnd[:])
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
		err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app+" idempotency locks").Scan(&n)
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
					t.Errorf("%s while the lock connections break: %d %s", s.name, r.status, r.body)
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
		t.Fatal("no lock connection was there to end: the test proves little")
	}

	// By itself, without a restart: a fresh keyed create gets its 201.
	if r := idemPost(t, ts, "/v1/categories", key, "after", `{"name":"after"}`); r.status != 201 {
		t.Fatalf("a keyed create after the breaks: %d %s", r.status, r.body)
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
	t.Logf("%d keyed creates, %d lock sessions ended in 5 cuts, %d answered 503, %d resent", writers*perWriter, cuts, unavailable, resent)
}

// pgIdemLockHolder returns the pid of the session that holds the advisory
// lock of an Idempotency-Key of the schema in db's search_path, or 0.
func pgIdemLockHolder(t *testing.T, conn *pgx.Conn, db string, keyID int64, key string) int32 {
	t.Helper()
	lock := pgIdemLockKey(mustSearchPath(t, db), keyID, key)
	var pid int32
	err := conn.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND objsubid = 1 AND ((classid::int8 << 32) | objid::int8) = $1`, lock).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestPostgresIdempotencyHangUpKeepsOthersLocks: a client that hangs up
// while its lookup runs on a lock connection ends its own request, not
// the session that holds other requests' locks. Request a holds its lock;
// request b, whose key's hash picks a's connection, waits in its lookup
// (the test holds the idempotency table) and its client hangs up: a's lock
// is still held by the same session afterwards, so that the same key on
// another instance is still 409 in use while a runs.
func TestPostgresIdempotencyHangUpKeepsOthersLocks(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	s := openTestStore(t, db).(*pgStore)
	watch := pmConnect(t, db)
	ctx := context.Background()
	req := func(key string, owner int64) idemRequest {
		now := time.Now()
		return idemRequest{KeyID: 1, Key: key, Owner: owner, Now: now, Since: now.Add(-time.Hour)}
	}
	conn := func(key string) uint64 { return uint64(pgIdemLockKey(s.idemLocks.schema, 1, key)) % pgIdemLockConns }
	bKey := ""
	for n := 0; bKey == ""; n++ {
		if k := fmt.Sprintf("b%d", n); conn(k) == conn("a") {
			bKey = k
		}
	}
	a, b := req("a", 1), req(bKey, 2)
	if ans, err := s.BeginIdempotent(ctx, a); err != nil || ans != nil {
		t.Fatalf("begin a: %v %v", ans, err)
	}
	holder := pgIdemLockHolder(t, watch, db, 1, "a")
	if holder == 0 {
		t.Fatal("a's lock is not held")
	}

	hold := pmConnect(t, db)
	tx, err := hold.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE idempotency IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	bctx, hangUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.BeginIdempotent(bctx, b)
		done <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting bool
		if err := watch.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)", holder).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's lookup did not wait for the table within 5s")
		}
	}
	hangUp()
	// Give the hang-up time to reach b's statement (on a binary that
	// breaks it off, it does within microseconds); too short a wait could
	// only let such a binary pass, never fail a good one.
	time.Sleep(50 * time.Millisecond)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Logf("b: %v", err)
	} else {
		s.EndIdempotent(ctx, b)
	}
	// b's statement has ended, one way or the other: its session is idle
	// or gone.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var active bool
		if err := watch.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state <> 'idle')", holder).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's lookup still runs 5s after the table was let go")
		}
	}
	if got := pgIdemLockHolder(t, watch, db, 1, "a"); got != holder {
		t.Fatalf("a's lock after another client hung up during its lookup: held by pid %d, want %d still: the hang-up ended the session of a running request's lock", got, holder)
	}
	other := openTestStore(t, db)
	if _, err := other.BeginIdempotent(ctx, req("a", 3)); !errors.Is(err, errInFlight) {
		t.Errorf("a on another instance while a runs: %v, want errInFlight", err)
	}
	if err := s.EndIdempotent(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got := pgIdemLockHolder(t, watch, db, 1, "a"); got != 0 {
		t.Errorf("a's lock after its end: held by pid %d", got)
	}
}

// TestPostgresIdempotencyLocksAfterClose: a keyed request that outlives
// the store's Close (a handler still running after the shutdown timeout)
// dials no new lock connection, which nothing would close: its lookup is
// 503 unavailable.
func TestPostgresIdempotencyLocksAfterClose(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	s, err := openStore(context.Background(), db, storeOptions{migrate: true, now: time.Now, busy: defaultBusyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	ps := s.(*pgStore)
	now := time.Now()
	r := idemRequest{KeyID: 1, Key: "late", Owner: 1, Now: now, Since: now.Add(-time.Hour)}
	if _, err := s.BeginIdempotent(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.EndIdempotent(context.Background(), r)
	r.Owner = 2
	_, err = s.BeginIdempotent(context.Background(), r)
	if !errors.Is(err, errUnavailable) {
		t.Errorf("a keyed lookup after Close: %v, want unavailable", err)
	}
	for i := range ps.idemLocks.conns {
		if c := &ps.idemLocks.conns[i]; c.conn != nil {
			c.close()
			t.Errorf("lock connection %d was dialled after Close", i)
		}
	}
}

// TestPostgresIdempotencyUnlockLateStillFrees: an unlock that could not
// wait for its connection (busy past its deadline) must not leave the key
// locked until something uses that connection again: on an idle instance
// that would be never, and every instance would answer 409 in use.
func TestPostgresIdempotencyUnlockLateStillFrees(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	s, err := openStore(context.Background(), db, storeOptions{migrate: true, now: time.Now, busy: defaultBusyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ps := s.(*pgStore)
	now := time.Now()
	r := idemRequest{KeyID: 1, Key: "late-unlock", Owner: 1, Now: now, Since: now.Add(-time.Hour)}
	if _, err := s.BeginIdempotent(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	watch := pmConnect(t, db)
	if !pgIdemLockHeld(t, watch, db, r.KeyID, r.Key) {
		t.Fatal("the lock was not taken")
	}
	c := &ps.idemLocks.conns[ps.idemLocks.held[r.Owner].conn]
	c.sem <- struct{}{} // another request holds the connection
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	err = s.EndIdempotent(ctx, r)
	cancel()
	if !errors.Is(err, errUnavailable) {
		t.Fatalf("an unlock that could not get its connection: %v, want unavailable", err)
	}
	<-c.sem // that request ends; nothing else comes
	deadline := time.Now().Add(5 * time.Second)
	for pgIdemLockHeld(t, watch, db, r.KeyID, r.Key) {
		if time.Now().After(deadline) {
			t.Fatal("the key is still locked 5 s after its connection became free")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
