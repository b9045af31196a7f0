package main

// Tests of the creates' flights on PostgreSQL (DECISIONS.md section 22):
// what a create sends the primary, counted by a proxy in the test. They
// need PETSTORE_TEST_POSTGRES.

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// flightProxy is a TCP proxy to PostgreSQL that counts the client's
// flights: what the client writes between two waits for the server (data
// from the client after data from the server, on any connection, starts
// one).
type flightProxy struct {
	ln      net.Listener
	target  string
	flights atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

func startFlightProxy(t *testing.T, target string) *flightProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flightProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *flightProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		var turn sync.Mutex
		serverSpoke := true // the client speaks first
		copyCounting := func(dst, src net.Conn, client bool) {
			defer dst.Close()
			defer src.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 {
					turn.Lock()
					if client && serverSpoke {
						p.flights.Add(1)
					}
					serverSpoke = !client
					turn.Unlock()
					if _, werr := dst.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}
		p.wg.Go(func() { copyCounting(up, c, true) })
		p.wg.Go(func() { copyCounting(c, up, false) })
	}
}

// TestPostgresCreateOneFlight: once its connection is made, an unkeyed
// create, a keyed create and the replay of a keyed create (of a category,
// a pet and an order) each send the primary one flight: BEGIN, the lock,
// the statements (prepared the first time in the same flight), COMMIT and
// the position, and nothing before or after. Other work of the instance
// (its key and count upkeep) may add flights at any moment, so each is
// counted a few times and the fewest taken: a create that cost two would
// cost two every time.
func TestPostgresCreateOneFlight(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	key := pmBigKey(t, db)
	proxy := startFlightProxy(t, pmTarget(t, db))
	ts := pmStart(t, pmViaProxy(t, db, proxy.ln.Addr().String()), key, 1, "--db-max-conns", "1")[0]
	cat := decode[Category](t, ts.do(t, "POST", "/v1/categories", key, `{"name":"warm"}`))
	pet := decode[Pet](t, ts.do(t, "POST", "/v1/pets", key, fmt.Sprintf(`{"name":"warm","categoryId":%d}`, cat.ID)))
	n := 0
	bodies := map[string]func() string{
		"/v1/categories": func() string { return fmt.Sprintf(`{"name":"c%d"}`, n) },
		"/v1/pets":       func() string { return fmt.Sprintf(`{"name":"p%d","categoryId":%d}`, n, cat.ID) },
		"/v1/store/orders": func() string {
			return fmt.Sprintf(`{"petId":%d,"quantity":1}`, pet.ID)
		},
	}
	for _, path := range []string{"/v1/categories", "/v1/pets", "/v1/store/orders"} {
		for _, kind := range []string{"unkeyed", "keyed", "replay"} {
			fewest := int64(-1)
			for range 5 {
				n++
				body, idemKey := bodies[path](), fmt.Sprintf("k%d", n)
				if kind == "replay" {
					if r := idemPost(t, ts, path, key, idemKey, body); r.status != 201 {
						t.Fatalf("%s %s: %d %s", kind, path, r.status, r.body)
					}
				}
				before := proxy.flights.Load()
				var r response
				if kind == "unkeyed" {
					r = ts.do(t, "POST", path, key, body)
				} else {
					r = idemPost(t, ts, path, key, idemKey, body)
				}
				flights := proxy.flights.Load() - before
				if r.status != 201 || (kind == "replay") != (r.header.Get("Idempotency-Replayed") == "true") {
					t.Fatalf("%s %s: %d %s", kind, path, r.status, r.body)
				}
				if fewest < 0 || flights < fewest {
					fewest = flights
				}
				if fewest == 1 {
					break
				}
			}
			if fewest != 1 {
				t.Errorf("%s create %s: %d flights to the primary, want 1", kind, path, fewest)
			}
		}
	}
}

// TestPostgresCreateEmptyValues: an empty value sent in a flight is
// stored empty, not NULL: an empty description stays "".
func TestPostgresCreateEmptyValues(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 1)[0]
	made := decode[Category](t, idemPost(t, ts, "/v1/categories", key, "e", `{"name":"empty","description":""}`))
	for _, c := range decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, "")) {
		if c.ID == made.ID && (c.Description == nil || *c.Description != "") {
			t.Errorf("a category created with an empty description lists with %v", c.Description)
		}
	}
}

// TestPgFlightGate: to a near primary one batch flies at a time and the
// writes that come meanwhile fly together when it lands; to a far one (the
// quickest recent round trip 5 ms or more) up to max at once; one quick
// round trip in the window keeps a loaded near host near; after drain
// every batch flies in the loop. No database needed.
func TestPgFlightGate(t *testing.T) {
	job := func() []*writeJob[*pgBatch] { return []*writeJob[*pgBatch]{{}} }
	g := &pgFlightGate{max: 3}
	if now, wait := g.enter(job()); len(now) != 1 || wait {
		t.Fatalf("the first batch: %d jobs fly, wait %v", len(now), wait)
	}
	for range 2 {
		if now, _ := g.enter(job()); now != nil {
			t.Fatal("near: a second batch flew while one was in the air")
		}
	}
	if next := g.leave(time.Millisecond); len(next) != 2 {
		t.Fatalf("near: %d writes flew when the batch landed, want the 2 that waited", len(next))
	}
	if next := g.leave(time.Millisecond); next != nil || g.n != 0 {
		t.Fatalf("near: %d in the air after both landed, %d flew", g.n, len(next))
	}
	// Far: round trips of 40 ms (a gate of its own: the 1 ms ones above
	// stay in the window).
	g = &pgFlightGate{max: 3}
	g.enter(job())
	g.leave(40 * time.Millisecond)
	for i := range 3 {
		if now, _ := g.enter(job()); now == nil {
			t.Fatalf("far: batch %d waited with %d in the air, max 3", i+1, g.n)
		}
	}
	if now, _ := g.enter(job()); now != nil {
		t.Fatal("far: a fourth batch flew, max 3")
	}
	if next := g.leave(40 * time.Millisecond); len(next) != 1 {
		t.Fatalf("far: %d flew when one landed, want the one that waited", len(next))
	}
	for range 3 {
		g.leave(40 * time.Millisecond)
	}
	// A loaded near host: round trips of 6 ms but for one of 1 ms stay near.
	g = &pgFlightGate{max: 3}
	for i := range pgFarWindow {
		g.enter(job())
		rtt := 6 * time.Millisecond
		if i == 5 {
			rtt = time.Millisecond
		}
		g.leave(rtt)
	}
	if g.far {
		t.Error("a host whose quickest round trip in the window was 1 ms is taken for far")
	}
	g.drain()
	if now, wait := g.enter(job()); now == nil || !wait {
		t.Errorf("after drain: a batch flies %v, in the loop %v; want both", now != nil, wait)
	}
}
