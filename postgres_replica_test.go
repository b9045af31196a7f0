package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// delayProxy is a TCP proxy that delays what it forwards by a fixed time
// each way, in order: a far primary on one machine.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func startDelayProxy(t *testing.T, target string, delay time.Duration) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
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

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
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
		var once sync.Once
		closeBoth := func() {
			once.Do(func() {
				c.Close()
				up.Close()
				p.mu.Lock()
				delete(p.conns, c)
				delete(p.conns, up)
				p.mu.Unlock()
			})
		}
		p.wg.Go(func() { p.pipe(up, c); closeBoth() })
		p.wg.Go(func() { p.pipe(c, up); closeBoth() })
	}
}

// pipe copies src to dst, each piece delay after it was read.
func (p *delayProxy) pipe(dst, src net.Conn) {
	type piece struct {
		at   time.Time
		data []byte
	}
	q := make(chan piece, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pc := range q {
			time.Sleep(time.Until(pc.at))
			if _, err := dst.Write(pc.data); err != nil {
				for range q { // drain
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- piece{time.Now().Add(p.delay), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
}

// rpReads returns an instance's petstore_db_reads_total by reason, and
// its waits for the replica (how many, how long in all).
func rpReads(t *testing.T, ts *testServer) map[string]float64 {
	t.Helper()
	m := ts.get(t, ts.admin+"/metrics")
	out := map[string]float64{}
	for _, s := range []string{`source="replica",reason="fresh"`, `source="primary",reason="lag"`, `source="primary",reason="wait"`, `source="primary",reason="error"`} {
		out[s[strings.LastIndex(s, "=")+2:len(s)-1]] = metricValue(m, "petstore_db_reads_total{"+s+"}")
	}
	out["waits"] = metricValue(m, "petstore_db_replica_waits_total")
	out["wait_s"] = metricValue(m, "petstore_db_replica_wait_seconds_total")
	return out
}

// rpToken checks that an answer carries a Petstore-Read-After token and
// returns it.
func rpToken(t *testing.T, what string, r response) string {
	t.Helper()
	tok := r.header.Get("Petstore-Read-After")
	if _, ok := parseReadPos(tok); !ok {
		t.Errorf("%s: Petstore-Read-After %q, want 16 hex digits", what, tok)
	}
	return tok
}

// rpCluster is a far primary (behind a proxy that adds 20 ms each way)
// and a near asynchronous standby (that applies commits applyDelay late),
// with petstore instances reading from the standby.
type rpCluster struct {
	primary, standby *pgNode
	db, replica, key string
	other            string // a key of another lineage, which never writes: its reads have no floor
}

func newRPCluster(t *testing.T, applyDelay time.Duration) *rpCluster {
	t.Helper()
	c := newPGCluster(t)
	a := c.addPrimary("a")
	b := c.addStandby("b", a, pgStandbyOptions{applyDelay: applyDelay})
	proxy := startDelayProxy(t, a.addr(), 20*time.Millisecond)
	rc := &rpCluster{primary: a, standby: b, db: pgMultiHost(proxy.addr()), replica: pgMultiHost(b.addr())}
	rc.key = pmBigKey(t, rc.db)
	rc.other = pmBigKey(t, rc.db)
	return rc
}

// rpRounds runs n rounds, by 20 workers, of a create on writer followed
// by a list on reader (with the 201's token when withToken), and fails
// for every list that lacks the row just created. Even rounds create a pet
// in the worker's own category and list the category's pets; odd ones
// create a category and list the categories.
func rpRounds(t *testing.T, writer, reader *testServer, key string, n int, withToken bool, tag string) {
	t.Helper()
	rpRoundsIn(t, writer, reader, key, rpCategories(t, writer, key, tag), n, withToken, tag)
}

// rpWorkers is how many clients rpRounds runs at once.
const rpWorkers = 20

// rpCategories creates a category for each of rpRounds's workers.
func rpCategories(t *testing.T, writer *testServer, key, tag string) []int64 {
	t.Helper()
	cats := make([]int64, rpWorkers)
	for w := range cats {
		r := writer.do(t, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":"%s-w%d"}`, tag, w))
		if r.status != http.StatusCreated {
			t.Fatalf("category: %d %s", r.status, r.body)
		}
		var c Category
		json.Unmarshal(r.body, &c)
		cats[w] = c.ID
	}
	return cats
}

// rpRoundsIn is rpRounds with the workers' categories made already.
func rpRoundsIn(t *testing.T, writer, reader *testServer, key string, cats []int64, n int, withToken bool, tag string) {
	t.Helper()
	const workers = rpWorkers
	var missed, failed atomic.Int64
	var mu sync.Mutex
	var reads []time.Duration
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				var create, list string
				if i%2 == 0 {
					create, list = "/v1/pets", fmt.Sprintf("/v1/pets?categoryId=%d", cats[w])
				} else {
					create, list = "/v1/categories", "/v1/categories"
				}
				body := fmt.Sprintf(`{"name":"%s-%d","categoryId":%d}`, tag, i, cats[w])
				if i%2 == 1 {
					body = fmt.Sprintf(`{"name":"%s-%d"}`, tag, i)
				}
				cr, _, err := pmSend(writer, 10*time.Second, "POST", create, key, body)
				if err != nil || cr.status != http.StatusCreated {
					failed.Add(1)
					t.Errorf("round %d: create: %v %d %s", i, err, cr.status, cr.body)
					continue
				}
				tok := rpToken(t, "201", cr)
				var row struct{ ID int64 }
				json.Unmarshal(cr.body, &row)
				var header []string
				if withToken {
					header = []string{"Petstore-Read-After", tok}
				}
				lr, took, err := pmSend(reader, 10*time.Second, "GET", list, key, "", header...)
				mu.Lock()
				reads = append(reads, took)
				mu.Unlock()
				if err != nil || lr.status != http.StatusOK {
					failed.Add(1)
					t.Errorf("round %d: list: %v %d %s", i, err, lr.status, lr.body)
					continue
				}
				rpToken(t, "list", lr)
				var rows []struct{ ID int64 }
				json.Unmarshal(lr.body, &rows)
				found := false
				for _, r := range rows {
					found = found || r.ID == row.ID
				}
				if !found {
					if missed.Add(1) <= 5 {
						t.Errorf("round %d: %s after the 201 of %s %d lacks it (%d rows)", i, list, create, row.ID, len(rows))
					}
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(reads)
	var fast, mid, slow int // at most 5 ms (no wait), 5-50 ms, more (the primary, 40 ms away)
	for _, d := range reads {
		switch {
		case d <= 5*time.Millisecond:
			fast++
		case d <= 50*time.Millisecond:
			mid++
		default:
			slow++
		}
	}
	t.Logf("%s: lists after the 201 within 5 ms %d, 5-50 ms %d, over 50 ms %d", tag, fast, mid, slow)
	if len(reads) > 0 {
		t.Logf("%s: %d rounds, %d lists lacked their row, %d requests failed; the list after the 201: p50 %v, p99 %v", tag, n,
			missed.Load(), failed.Load(), rpQuantile(reads, 0.5), rpQuantile(reads, 0.99))
	}
}

// TestPostgresReplicaReadYourWrites: reads right after a 201 see its row,
// through the instance that wrote (which remembers the key's last write)
// and through another one given the 201's token, with a standby that lags
// 300 ms behind a far primary; reads that need nothing recent come from
// the standby, with the same body and ETag as the primary's.
func TestPostgresReplicaReadYourWrites(t *testing.T) {
	t.Parallel()
	rc := newRPCluster(t, 300*time.Millisecond)
	// One waits 50 ms (the default) for the standby, then reads from the
	// primary; the other waits up to 2 s, and reads from the standby once
	// it has replayed the token.
	one := pmStart(t, rc.db, rc.key, 1, "--db-replica", rc.replica)[0]
	two := pmStart(t, rc.db, rc.key, 1, "--db-replica", rc.replica, "--replica-wait", "2s")[0]
	alone := pmStart(t, rc.db, rc.key, 1)[0] // the primary only

	rpRounds(t, one, one, rc.key, 1000, false, "one")
	before := rpReads(t, two)
	rpRounds(t, one, two, rc.key, 1000, true, "two")
	after := rpReads(t, two)
	if n := after["fresh"] - before["fresh"]; n < 900 {
		t.Errorf("the second instance read %v of 1000 lists from the replica (%v), want nearly all: it waits up to 2s for the token", n, after)
	}
	t.Logf("reads: the first instance %v; the second %v", rpReads(t, one), after)

	// Caught up, a read that needs nothing recent (another lineage, which
	// never wrote) comes from the standby, alike to the primary's.
	other := rc.other
	time.Sleep(time.Second)
	for _, path := range []string{"/v1/categories", "/v1/pets", "/v1/store/orders"} {
		before := rpReads(t, one)["fresh"]
		near := one.do(t, "GET", path, other, "")
		if rpReads(t, one)["fresh"] != before+1 {
			t.Errorf("GET %s without a token, caught up: not read from the replica", path)
		}
		far := alone.do(t, "GET", path, other, "")
		if near.status != 200 || string(near.body) != string(far.body) || near.header.Get("ETag") != far.header.Get("ETag") {
			t.Errorf("GET %s: the replica's answer (%d, ETag %s, %d bytes) differs from the primary's (%d, ETag %s, %d bytes)", path,
				near.status, near.header.Get("ETag"), len(near.body), far.status, far.header.Get("ETag"), len(far.body))
		}
		rpToken(t, "GET "+path+" on the primary alone", far)
	}
}

// TestPostgresReplicaPausedAndStopped: with the standby's replay paused,
// reads after a 201 wait --replica-wait and read from the primary; paused
// past --replica-max-lag, reads go to the primary at once; stopped, reads
// go on from the primary with no error, and it is used again when it is
// back.
func TestPostgresReplicaPausedAndStopped(t *testing.T) {
	t.Parallel()
	rc := newRPCluster(t, 300*time.Millisecond)
	ts := pmStart(t, rc.db, rc.key, 1, "--db-replica", rc.replica, "--replica-max-lag", "2s")[0]
	other := rc.other

	cats := rpCategories(t, ts, rc.key, "paused")
	time.Sleep(time.Second) // the standby applies 300 ms late
	rc.standby.exec("SELECT pg_wal_replay_pause()")
	before := rpReads(t, ts)
	start := time.Now()
	rpRoundsIn(t, ts, ts, rc.key, cats, 100, false, "paused")
	mid := rpReads(t, ts)
	// Within the max lag (2 s), each read waits --replica-wait, then reads
	// from the primary; a slow machine may take the rounds past it.
	if n := mid["wait"] + mid["lag"] - before["wait"] - before["lag"]; n != 100 || mid["fresh"] != before["fresh"] || mid["wait"]-before["wait"] < 50 {
		t.Errorf("paused replay: reads by reason went from %v to %v in %v, want all 100 on the primary, after waiting (for lag once it passes 2s)",
			before, mid, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("paused, reads by reason: %v, then %v after the rounds", before, mid)
	// Past the max lag (the rounds wrote: the primary is ahead), the
	// standby is skipped without waiting.
	time.Sleep(time.Until(start.Add(2500 * time.Millisecond)))
	lagBefore := rpReads(t, ts)
	for i := range 20 {
		if r := ts.do(t, "GET", "/v1/categories", other, ""); r.status != 200 {
			t.Fatalf("read %d: %d %s", i, r.status, r.body)
		}
	}
	lagAfter := rpReads(t, ts)
	if lagAfter["lag"]-lagBefore["lag"] != 20 {
		t.Errorf("paused past --replica-max-lag: reads by reason went from %v to %v, want 20 more for lag", lagBefore, lagAfter)
	}
	m := ts.get(t, ts.admin+"/metrics")
	if metricValue(m, "petstore_db_replica_lag_seconds") < 2 {
		t.Errorf("petstore_db_replica_lag_seconds %v, want at least 2", metricValue(m, "petstore_db_replica_lag_seconds"))
	}
	fams := parseExposition(t, m)
	for name, typ := range map[string]string{"petstore_db_reads_total": "counter", "petstore_db_replica_lag_seconds": "gauge",
		"petstore_db_replica_waits_total": "counter", "petstore_db_replica_wait_seconds_total": "counter"} {
		if f := fams[name]; f == nil || f.typ != typ || f.help != families[name].help || f.help == "" || len(f.samples) == 0 {
			t.Errorf("%s: %+v, want a %s with the help text of families", name, f, typ)
		}
	}
	rc.standby.exec("SELECT pg_wal_replay_resume()")
	rpWaitFresh(t, ts, other)

	// Stopped: reads go on from the primary, with no error.
	rc.standby.stop()
	for i := range 20 {
		if r := ts.do(t, "GET", "/v1/pets", other, ""); r.status != 200 {
			t.Fatalf("replica stopped, read %d: %d %s", i, r.status, r.body)
		}
	}
	rpRounds(t, ts, ts, rc.key, 40, false, "stopped")
	if r := rpReads(t, ts); r["error"] == 0 {
		t.Errorf("replica stopped: reads by reason %v, want some for error", r)
	}
	rc.standby.start()
	rpWaitFresh(t, ts, other)
}

// rpWaitFresh waits, at most 10 s, until a read without a token comes
// from the replica again.
func rpWaitFresh(t *testing.T, ts *testServer, key string) {
	t.Helper()
	start := time.Now()
	for {
		before := rpReads(t, ts)["fresh"]
		if r := ts.do(t, "GET", "/v1/categories", key, ""); r.status != 200 {
			t.Fatalf("read: %d %s", r.status, r.body)
		}
		if rpReads(t, ts)["fresh"] > before {
			t.Logf("the replica answers again %v later", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the replica did not answer again within 10s: %v", rpReads(t, ts))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rpLatencies sends n GETs of path, one at a time, and returns their
// latencies, sorted.
func rpLatencies(t *testing.T, ts *testServer, key, path string, n int) []time.Duration {
	t.Helper()
	var d []time.Duration
	for range n {
		r, took, err := pmSend(ts, 10*time.Second, "GET", path, key, "")
		if err != nil || r.status != 200 {
			t.Fatalf("GET %s: %v %d %s", path, err, r.status, r.body)
		}
		d = append(d, took)
	}
	slices.Sort(d)
	return d
}

// rpThroughput sends GETs of path from c clients for dur and returns
// their rate a second.
func rpThroughput(t *testing.T, ts *testServer, key, path string, c int, dur time.Duration) float64 {
	t.Helper()
	var n atomic.Int64
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for time.Now().Before(end) {
				if r, _, err := pmSend(ts, 10*time.Second, "GET", path, key, ""); err == nil && r.status == 200 {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / dur.Seconds()
}

func rpQuantile(d []time.Duration, q float64) time.Duration {
	return d[min(len(d)-1, int(float64(len(d))*q))]
}

// TestPostgresReplicaLatency: a list from an instance whose primary is far
// (20 ms each way) but whose replica is near is answered at the replica's
// speed: its p50 within 2 ms of a list on the primary without the delay.
// It logs the figures of BENCHMARKS.md ("Reading near the user").
func TestPostgresReplicaLatency(t *testing.T) {
	t.Parallel()
	rc := newRPCluster(t, 0)
	near := pmStart(t, rc.db, rc.key, 1, "--db-replica", rc.replica)[0]
	far := pmStart(t, rc.db, rc.key, 1)[0]
	direct := pmStart(t, pgMultiHost(rc.primary.addr()), rc.key, 1)[0]
	cat := near.do(t, "POST", "/v1/categories", rc.key, `{"name":"latency"}`)
	var c Category
	json.Unmarshal(cat.body, &c)
	for i := range 50 {
		if r := near.do(t, "POST", "/v1/pets", rc.key, fmt.Sprintf(`{"name":"p%d","categoryId":%d}`, i, c.ID)); r.status != 201 {
			t.Fatalf("pet: %d %s", r.status, r.body)
		}
	}
	time.Sleep(time.Second)
	reader := rc.other
	const path = "/v1/pets?status=available"
	figures := map[string][]time.Duration{}
	for range 3 { // alternated, so that the machine's load falls on each alike
		for name, ts := range map[string]*testServer{"near replica": near, "far primary": far, "primary, no delay": direct} {
			n := 100
			if name == "far primary" {
				n = 30
			}
			figures[name] = append(figures[name], rpLatencies(t, ts, reader, path, n)...)
		}
	}
	for name, d := range figures {
		slices.Sort(d)
		t.Logf("%s: list of 50 pets, p50 %v, p99 %v (%d reads)", name, rpQuantile(d, 0.5), rpQuantile(d, 0.99), len(d))
	}
	for name, ts := range map[string]*testServer{"near replica": near, "far primary": far} {
		t.Logf("%s: %.0f lists/s from 8 clients over 2 s", name, rpThroughput(t, ts, reader, path, 8, 2*time.Second))
	}
	if p, q := rpQuantile(figures["near replica"], 0.5), rpQuantile(figures["primary, no delay"], 0.5); p > q+2*time.Millisecond {
		t.Errorf("p50 of a list from the near replica %v, more than 2 ms above the primary's without the delay (%v)", p, q)
	}
	t.Logf("reads by source and reason on the near instance: %v", rpReads(t, near))

	// What read-your-writes costs with a standby that streams as usual:
	// lists right after a 201, through the instance that wrote.
	before := rpReads(t, near)
	rpRounds(t, near, near, rc.key, 400, false, "after a 201")
	after := rpReads(t, near)
	t.Logf("after a 201: reads by reason went from %v to %v", before, after)
}
