package main

// Tests of Idempotency-Key's in-flight marks on PostgreSQL (DECISIONS.md
// section 15): advisory locks that live as long as the request holding
// them, on connections of their own. They need PETSTORE_TEST_POSTGRES.

import (
	"encoding/json"
	"fmt"
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
