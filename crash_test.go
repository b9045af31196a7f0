package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ackedRow is a create that got a 2xx: what must be there after a crash.
type ackedRow struct {
	kind string // "category", "pet", "order"
	id   int64
	body string // what identifies it: a name, or the ids it refers to
}

// TestCrashKeepsEveryAcknowledgedWrite runs the real program in its own
// process, drives concurrent creates of categories, pets and orders from
// many clients, kills it with SIGKILL at a random moment, and restarts it
// on the same file, ten times over. Every create that got a 2xx must be
// there, the database must pass integrity_check, and no id may be handed
// out twice.
func TestCrashKeepsEveryAcknowledgedWrite(t *testing.T) {
	const rounds, clients = 10, 8
	db := filepath.Join(t.TempDir(), "crash.db")
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "100000000", "--rpd", "100000000")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var acked []ackedRow
	seen := map[string]string{} // kind/id -> body: an id acknowledged twice is reused
	for round := range rounds {
		p := startProcess(t, db)
		ts := &testServer{base: "http://" + p.addr, key: key, client: contractClient(t, nil)}
		var mu sync.Mutex
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for c := range clients {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					rows, ok := createChain(ts, key, fmt.Sprintf("r%d-c%d-%d", round, c, i))
					mu.Lock()
					acked = append(acked, rows...)
					mu.Unlock()
					if !ok {
						return // the server is gone
					}
				}
			})
		}
		time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond) // the random kill point
		p.cmd.Process.Signal(syscall.SIGKILL)
		close(stop)
		wg.Wait()
		p.wait(t, 10*time.Second)
	}

	ts := startServerOn(t, db, key)
	have := map[string]string{}
	for _, c := range decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, "")) {
		have[fmt.Sprintf("category/%d", c.ID)] = c.Name
	}
	for _, p := range allPages[Pet](t, ts, key, "/pets") {
		have[fmt.Sprintf("pet/%d", p.ID)] = fmt.Sprintf("%s in %d", p.Name, p.CategoryID)
	}
	for _, o := range allPages[Order](t, ts, key, "/store/orders") {
		have[fmt.Sprintf("order/%d", o.ID)] = fmt.Sprintf("pet %d x%d", o.PetID, o.Quantity)
	}
	lost := 0
	for _, a := range acked {
		k := fmt.Sprintf("%s/%d", a.kind, a.id)
		if prev, dup := seen[k]; dup && prev != a.body {
			t.Errorf("%s was acknowledged twice: %q and %q", k, prev, a.body)
		}
		seen[k] = a.body
		if have[k] != a.body {
			lost++
			t.Errorf("acknowledged %s %q is %q after the kills", k, a.body, have[k])
		}
	}
	// Ids are never reused: a new row gets an id above every one handed out.
	r := ts.do(t, "POST", "/v1/categories", key, `{"name":"after the crashes"}`)
	if c := decode[Category](t, r); r.status != 201 || have[fmt.Sprintf("category/%d", c.ID)] != "" {
		t.Errorf("a create after the kills got id %d (%d), which was taken", c.ID, r.status)
	}
	ts.stop()

	s := testStore(t, db, false)
	var check string
	if err := s.r.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check = %q, %v", check, err)
	}
	if len(acked) < rounds*10 {
		t.Errorf("only %d writes were acknowledged in %d rounds: the test proves little", len(acked), rounds)
	}
	t.Logf("%d kills, %d acknowledged writes checked, %d lost", rounds, len(acked), lost)
}

// createChain creates a category, a pet in it and an order of it, and
// returns the rows that were acknowledged; ok is false once the server no
// longer answers.
func createChain(ts *testServer, key, name string) (rows []ackedRow, ok bool) {
	post := func(path, body string) (map[string]any, bool) {
		req, _ := http.NewRequest("POST", ts.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := ts.client.Do(req)
		if err != nil {
			return nil, false
		}
		defer resp.Body.Close()
		var v map[string]any
		if resp.StatusCode/100 != 2 || json.NewDecoder(resp.Body).Decode(&v) != nil {
			return nil, false
		}
		return v, true
	}
	c, ok := post("/v1/categories", fmt.Sprintf(`{"name":%q}`, name))
	if !ok {
		return rows, false
	}
	cid := int64(c["id"].(float64))
	rows = append(rows, ackedRow{"category", cid, name})
	p, ok := post("/v1/pets", fmt.Sprintf(`{"name":%q,"categoryId":%d}`, name, cid))
	if !ok {
		return rows, false
	}
	pid := int64(p["id"].(float64))
	rows = append(rows, ackedRow{"pet", pid, fmt.Sprintf("%s in %d", name, cid)})
	o, ok := post("/v1/store/orders", fmt.Sprintf(`{"petId":%d,"quantity":2}`, pid))
	if !ok {
		return rows, false
	}
	rows = append(rows, ackedRow{"order", int64(o["id"].(float64)), fmt.Sprintf("pet %d x2", pid)})
	return rows, true
}

// TestKilledServerKeepsAcknowledgedWrites runs the real program in its own
// process, kills it with SIGKILL right after a burst of creates, and checks
// that every create that got a 201 is there after a restart.
func TestKilledServerKeepsAcknowledgedWrites(t *testing.T) {
	db := filepath.Join(t.TempDir(), "kill.db")
	key := createKey(t, db, "--plan", "business")

	p := startProcess(t, db)
	ts := &testServer{base: "http://" + p.addr, key: key, client: contractClient(t, nil)}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []string
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				name := fmt.Sprintf("k%d-%d", w, i)
				r := ts.do(t, "POST", "/v1/categories", key, `{"name":"`+name+`"}`)
				if r.status != http.StatusCreated {
					t.Errorf("create %s: %d", name, r.status)
					return
				}
				mu.Lock()
				acked = append(acked, name)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)

	after := startServerOn(t, db, key)
	have := map[string]bool{}
	for _, c := range decode[[]Category](t, after.do(t, "GET", "/v1/categories", key, "")) {
		have[c.Name] = true
	}
	for _, name := range acked {
		if !have[name] {
			t.Errorf("acknowledged %s is gone after the kill", name)
		}
	}
	if len(acked) != 200 {
		t.Errorf("%d creates acknowledged, want 200", len(acked))
	}
}
