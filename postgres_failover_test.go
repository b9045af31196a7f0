package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// foAnswerWithin is how long any answer may take while the database fails
// over: the default busy timeout (the instances run with it), and a margin
// for a loaded test machine.
const foAnswerWithin = defaultBusyTimeout + 1500*time.Millisecond

// foLoad is a steady stream of keyed creates on the instances: each writer
// sends one category create at a time, each with an Idempotency-Key of its
// own (its name), and resends one answered otherwise than 201 with the same
// key, on the other instance, until it is answered 201.
type foLoad struct {
	servers []*testServer
	key     string
	stop    chan struct{}
	wg      sync.WaitGroup

	mu    sync.Mutex
	tries []foTry
	acked map[string]int64 // a create's name: the id its 201 gave
}

// foTry is one request of the load.
type foTry struct {
	name, instance   string
	sent, got        time.Time
	status           int
	code, retryAfter string
	replayed         bool
	id               int64
	err              error
	attempt, instIdx int
}

// foMaxPerWriter bounds each writer's creates.
const foMaxPerWriter = 4000

// startFOLoad starts writers writers on servers, until stopLoad.
func startFOLoad(t *testing.T, servers []*testServer, key string, writers int) *foLoad {
	l := &foLoad{servers: servers, key: key, stop: make(chan struct{}), acked: map[string]int64{}}
	for w := range writers {
		l.wg.Go(func() { l.writer(w) })
	}
	t.Cleanup(l.stopLoad)
	return l
}

func (l *foLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

var foStopOnce sync.Map

// stopLoad stops the writers and waits for them; a create being resent
// when it stops may end without a 201.
func (l *foLoad) stopLoad() {
	if _, done := foStopOnce.LoadOrStore(l, true); !done {
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *foLoad) writer(w int) {
	for i := 0; i < foMaxPerWriter && !l.stopped(); i++ {
		name := fmt.Sprintf("w%d-%d", w, i)
		inst := w % len(l.servers)
		for attempt := 1; attempt <= 500; attempt++ {
			tr := l.send(inst, name, attempt)
			if tr.status == 201 || l.stopped() {
				break
			}
			inst = (inst + 1) % len(l.servers)
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// send sends one create of name to instance i, and records it.
func (l *foLoad) send(i int, name string, attempt int) foTry {
	tr := foTry{name: name, instIdx: i, attempt: attempt, sent: time.Now()}
	r, _, err := pmSend(l.servers[i], foAnswerWithin+10*time.Second, "POST", "/v1/categories", l.key,
		fmt.Sprintf(`{"name":%q}`, name), "Idempotency-Key", name)
	tr.got, tr.err = time.Now(), err
	if err == nil {
		tr.status, tr.code, tr.retryAfter = r.status, pmErrorCode(r.body), r.header.Get("Retry-After")
		tr.replayed = r.header.Get("Idempotency-Replayed") == "true"
		if r.status == 201 {
			var c Category
			if json.Unmarshal(r.body, &c) != nil || c.Name != name {
				tr.err = fmt.Errorf("201 with body %s", r.body)
			}
			tr.id = c.ID
		}
	}
	l.mu.Lock()
	l.tries = append(l.tries, tr)
	if tr.status == 201 && tr.err == nil {
		if prev, ok := l.acked[name]; ok && prev != tr.id {
			tr.err = fmt.Errorf("201 with id %d, and %d before", tr.id, prev)
			l.tries[len(l.tries)-1] = tr
		}
		l.acked[name] = tr.id
	}
	l.mu.Unlock()
	return tr
}

// ackedCount is how many creates have had their 201.
func (l *foLoad) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitAcked waits until n more creates have had their 201, for at most
// within.
func (l *foLoad) waitAcked(t *testing.T, n int, within time.Duration) {
	t.Helper()
	want := l.ackedCount() + n
	deadline := time.Now().Add(within)
	for l.ackedCount() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d creates answered 201 after %v, want %d", l.ackedCount(), within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// snapshot returns the requests so far.
func (l *foLoad) snapshot() []foTry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]foTry(nil), l.tries...)
}

// firstOKAfter waits up to 15 s for a 201 answered after at, and returns
// how long after at the first came.
func (l *foLoad) firstOKAfter(t *testing.T, at time.Time) time.Duration {
	t.Helper()
	deadline := at.Add(15 * time.Second)
	for {
		first := time.Time{}
		for _, tr := range l.snapshot() {
			if tr.status == 201 && tr.got.After(at) && (first.IsZero() || tr.got.Before(first)) {
				first = tr.got
			}
		}
		if !first.IsZero() {
			return first.Sub(at)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 201 within 15s of %v", at.Format(time.TimeOnly))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rate is the 201s a second answered within [from, to).
func foRate(tries []foTry, from, to time.Time) float64 {
	n := 0
	for _, tr := range tries {
		if tr.status == 201 && !tr.got.Before(from) && tr.got.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// foFullRate is how long after at the 201s came again at least at 80 % of
// base a second, over 500 ms; -1 if they never did.
func foFullRate(tries []foTry, at time.Time, base float64) time.Duration {
	for d := time.Duration(0); d < 15*time.Second; d += 50 * time.Millisecond {
		from := at.Add(d)
		if from.Add(500 * time.Millisecond).After(time.Now()) {
			break
		}
		if foRate(tries, from, from.Add(500*time.Millisecond)) >= 0.8*base {
			return d
		}
	}
	return -1
}

// eachAlone sends n keyed creates to each instance alone, one at a time:
// every one must be answered 201 (an instance stuck on a lost primary must
// not hide behind the other).
func eachAlone(t *testing.T, servers []*testServer, key, tag string, n int) {
	t.Helper()
	for i, ts := range servers {
		for j := range n {
			name := fmt.Sprintf("alone-%s-%d-%d", tag, i, j)
			r, took, err := pmSend(ts, foAnswerWithin+10*time.Second, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":%q}`, name), "Idempotency-Key", name)
			if err != nil || r.status != 201 {
				t.Errorf("%s: instance %d alone, create %d: %d %s %v after %v, want 201", tag, i, j, r.status, r.body, err, took)
				return
			}
		}
	}
}

// check checks every request of the load: a 201, or a 503 unavailable with
// Retry-After, within foAnswerWithin; a create resent with its key was
// made once, whichever answer its resends got.
func (l *foLoad) check(t *testing.T) (answered503 int) {
	t.Helper()
	bad := 0
	for _, tr := range l.snapshot() {
		took := tr.got.Sub(tr.sent)
		switch {
		case tr.err != nil:
			bad++
			if bad <= 10 {
				t.Errorf("create %s (try %d, instance %d): %v after %v", tr.name, tr.attempt, tr.instIdx, tr.err, took)
			}
		case tr.status == 201:
		case tr.status == 503 && tr.code == "unavailable" && tr.retryAfter != "":
			answered503++
		default:
			bad++
			if bad <= 10 {
				t.Errorf("create %s (try %d, instance %d, sent %v): %d %s Retry-After %q, want 201 or 503 unavailable with Retry-After",
					tr.name, tr.attempt, tr.instIdx, tr.sent.Format("15:04:05.000"), tr.status, tr.code, tr.retryAfter)
			}
		}
		if took > foAnswerWithin {
			bad++
			if bad <= 10 {
				t.Errorf("create %s (try %d) took %v, sent %v: more than %v", tr.name, tr.attempt, took, tr.sent.Format("15:04:05.000"), foAnswerWithin)
			}
		}
	}
	if bad > 10 {
		t.Errorf("%d bad answers in all", bad)
	}
	replays := 0
	for _, tr := range l.snapshot() {
		if tr.status == 201 && tr.replayed {
			replays++
		}
	}
	t.Logf("%d creates resent after a 503 were answered with the original 201 (Idempotency-Replayed): their first try had committed", replays)
	return answered503
}

// verifyRows checks, on the primary n, that every create answered 201 is
// there as answered, and that each name (each Idempotency-Key) has one row.
func (l *foLoad) verifyRows(t *testing.T, n *pgNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := pmConnect(t, n.url("petstore"))
	rows, err := conn.Query(ctx, "SELECT id, name FROM categories")
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int64{}
	for rows.Next() {
		var id int64
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			t.Fatal(err)
		}
		if prev, dup := stored[name]; dup {
			t.Errorf("%q stored twice: ids %d and %d", name, prev, id)
		}
		stored[name] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lost := 0
	for name, id := range l.acked {
		if got, ok := stored[name]; !ok || got != id {
			lost++
			if lost <= 10 {
				t.Errorf("create %s answered 201 with id %d; the new primary has id %d (present: %v)", name, id, got, ok)
				for _, tr := range l.tries {
					if tr.name == name {
						t.Logf("  try %d on instance %d, sent %s, answered %s: %d %s replayed %v id %d %v", tr.attempt, tr.instIdx,
							tr.sent.Format("15:04:05.000"), tr.got.Format("15:04:05.000"), tr.status, tr.code, tr.replayed, tr.id, tr.err)
					}
				}
			}
		}
	}
	t.Logf("%d creates answered 201, %d rows on %s, %d lost", len(l.acked), len(stored), n.name, lost)
	if lost > 0 {
		t.Errorf("%d of %d acknowledged creates lost", lost, len(l.acked))
	}
}

// foNotRestarted checks that each instance is the run it was: one
// "listening" line, and no "stopped".
func foNotRestarted(t *testing.T, servers []*testServer) {
	t.Helper()
	for i, ts := range servers {
		log := ts.stderr.String()
		if n := strings.Count(log, "msg=listening"); n != 1 || strings.Contains(log, "msg=stopped") {
			t.Errorf("instance %d: %d listening lines, stopped %v: it restarted", i, n, strings.Contains(log, "msg=stopped"))
		}
	}
}

// foRound is what one failover of a test measured.
type foRound struct {
	name        string
	before      float64       // 201s a second before it
	first, full time.Duration // from the promotion to the first 201, to 80 % of before
	promotedAt  time.Time
	from        time.Time // when the primary was lost
	unavailable int       // 503s answered from the loss until full throughput
	// afterPromotion are those answered after the promotion.
	afterPromotion int
}

// report measures rounds on the load's requests and logs them.
func (l *foLoad) report(t *testing.T, rounds []foRound) {
	t.Helper()
	tries := l.snapshot()
	for i := range rounds {
		r := &rounds[i]
		r.full = foFullRate(tries, r.promotedAt, r.before)
		end := r.promotedAt.Add(max(r.full, r.first))
		for _, tr := range tries {
			if tr.status == 503 && !tr.got.Before(r.from) && !tr.got.After(end) {
				r.unavailable++
				if tr.got.After(r.promotedAt) {
					r.afterPromotion++
				}
			}
		}
		t.Logf("%s: %.0f creates/s before; no primary for %v; promotion to first 201 %v, to 80%% throughput %v; %d answered 503, %d of them after the promotion",
			r.name, r.before, r.promotedAt.Sub(r.from).Round(time.Millisecond), r.first.Round(time.Millisecond), r.full.Round(time.Millisecond), r.unavailable, r.afterPromotion)
	}
}

// TestPostgresFailoverUnderLoad: two instances on a primary and its
// synchronous standby, a steady stream of keyed creates, the primary
// SIGKILLed (the postmaster and all its processes) and the standby
// promoted, three times over (the old primary rejoins as a standby with
// pg_rewind between rounds, and is then the first host listed: a standby
// that must not be written to). Every 201's row is on the last primary;
// every other answer is a 503 with Retry-After; a create resent with its
// key made one row; each instance alone creates again a few seconds after
// each promotion; the first 201 comes within 2.5 s of the promotion; no
// instance restarted.
func TestPostgresFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	c := newPGCluster(t)
	a := c.addPrimary("a")
	b := c.addStandby("b", a, pgStandbyOptions{})
	a.syncOn(b)
	db := pgMultiHost(a.addr(), b.addr())
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 2)
	l := startFOLoad(t, ts, key, 4)

	primary, standby := a, b
	var rounds []foRound
	for round := 1; round <= 3; round++ {
		l.waitAcked(t, 600, 60*time.Second)
		r := foRound{name: fmt.Sprintf("round %d (SIGKILL %s, promote %s)", round, primary.name, standby.name)}
		now := time.Now()
		r.before = foRate(l.snapshot(), now.Add(-time.Second), now)
		r.from = time.Now()
		primary.kill()
		time.Sleep(300 * time.Millisecond) // no primary: an HA manager takes a moment too
		r.promotedAt = standby.promote()
		r.first = l.firstOKAfter(t, r.promotedAt)
		if r.first > 2500*time.Millisecond {
			t.Errorf("%s: the first 201 came %v after the promotion, want within 2.5s", r.name, r.first)
		}
		time.Sleep(time.Until(r.promotedAt.Add(2 * time.Second)))
		eachAlone(t, ts, key, fmt.Sprint(round), 10)
		rounds = append(rounds, r)
		primary.rejoin(standby)
		standby.syncOn(primary)
		primary, standby = standby, primary
	}
	l.waitAcked(t, 300, 60*time.Second)
	l.stopLoad()
	l.report(t, rounds)
	n503 := l.check(t)
	l.verifyRows(t, primary)
	foNotRestarted(t, ts)
	total := l.ackedCount()
	t.Logf("%d keyed creates answered 201 over %d requests; %d answered 503", total, len(l.snapshot()), n503)
	if total < 2000 {
		t.Errorf("%d creates, want at least 2000", total)
	}
}

// foNoneFailedAfter checks that every create sent after at was answered
// 201: the instances are writing again, with no stream of 503s.
func (l *foLoad) foNoneFailedAfter(t *testing.T, what string, at time.Time) {
	t.Helper()
	n, failed := 0, 0
	for _, tr := range l.snapshot() {
		if tr.sent.After(at) {
			n++
			if tr.status != 201 {
				failed++
			}
		}
	}
	if n == 0 || failed > 0 {
		t.Errorf("%s: %d of %d creates sent after %v failed, want none (and some sent)", what, failed, n, at.Format("15:04:05.000"))
	}
}

// TestPostgresFailoverVanishedPrimary: the primary is reached through a
// proxy that stops forwarding, leaving every connection open (a host that
// vanished: no reset, no answer), and the standby is promoted once the
// instances have given up on the connections they had (one busy timeout).
// The first 201 comes within 4 s of the promotion (each new connection
// first waits out one 2 s connect timeout on the vanished host); the rest
// as in TestPostgresFailoverUnderLoad.
func TestPostgresFailoverVanishedPrimary(t *testing.T) {
	t.Parallel()
	c := newPGCluster(t)
	a := c.addPrimary("a")
	b := c.addStandby("b", a, pgStandbyOptions{})
	a.syncOn(b)
	proxy := pmStartProxy(t, a.addr())
	db := pgMultiHost(proxy.addr(), b.addr())
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 2)
	l := startFOLoad(t, ts, key, 4)

	l.waitAcked(t, 500, 60*time.Second)
	r := foRound{name: "vanished primary (proxy stalls, promote b)"}
	now := time.Now()
	r.before = foRate(l.snapshot(), now.Add(-time.Second), now)
	r.from = time.Now()
	proxy.stall() // a runs on behind it, cut off, as a partitioned primary would
	// An HA manager promotes after its own timeout (Patroni's ttl: 30 s),
	// by when the instances have given up on the connections they had:
	// each waited one busy timeout at most.
	time.Sleep(defaultBusyTimeout + time.Second)
	r.promotedAt = b.promote()
	r.first = l.firstOKAfter(t, r.promotedAt)
	if r.first > 4*time.Second {
		t.Errorf("the first 201 came %v after the promotion, want within 4s", r.first)
	}
	time.Sleep(time.Until(r.promotedAt.Add(5 * time.Second)))
	eachAlone(t, ts, key, "vanished", 10)
	l.waitAcked(t, 300, 60*time.Second)
	l.stopLoad()
	l.report(t, []foRound{r})
	l.check(t)
	l.verifyRows(t, b)
	foNotRestarted(t, ts)
}

// TestPostgresFailoverSwitchover: a planned switchover on a URL of IPv6
// hosts ([::1]:P1,[::1]:P2): the primary stopped cleanly (its sessions
// end with 57P01, its standby gets every record), the standby promoted,
// the old primary rejoined as a standby. Nothing acknowledged is lost,
// only 503s meanwhile, writes within 2.5 s of the promotion.
func TestPostgresFailoverSwitchover(t *testing.T) {
	t.Parallel()
	c := newPGCluster(t)
	a := c.addPrimary("a")
	b := c.addStandby("b", a, pgStandbyOptions{})
	a.syncOn(b)
	db := pgMultiHost(fmt.Sprintf("[::1]:%d", a.port), fmt.Sprintf("[::1]:%d", b.port))
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 2)
	l := startFOLoad(t, ts, key, 4)

	l.waitAcked(t, 500, 60*time.Second)
	r := foRound{name: "switchover (stop a, promote b)"}
	now := time.Now()
	r.before = foRate(l.snapshot(), now.Add(-time.Second), now)
	r.from = time.Now()
	a.stop()
	r.promotedAt = b.promote()
	r.first = l.firstOKAfter(t, r.promotedAt)
	if r.first > 2500*time.Millisecond {
		t.Errorf("the first 201 came %v after the promotion, want within 2.5s", r.first)
	}
	time.Sleep(time.Until(r.promotedAt.Add(2 * time.Second)))
	eachAlone(t, ts, key, "switchover", 10)
	a.rejoin(b)
	b.syncOn(a)
	l.waitAcked(t, 300, 60*time.Second)
	l.stopLoad()
	l.report(t, []foRound{r})
	l.check(t)
	l.verifyRows(t, b)
	foNotRestarted(t, ts)
}

// TestPostgresFailoverOldPrimaryBack: the old primary, first in the URL,
// must never be written to again, and must not hold the instances back.
// First it is fenced, not stopped: made read-only
// (default_transaction_read_only, reloaded) under the instances' open
// connections, and its standby promoted: their connections that answer
// read-only (25006) are dropped, pooled and lock ones alike, and writes go
// on at the new primary within 2.5 s. Then it comes back as a standby of
// the new primary, and later as a read-only primary; each time the
// instances' connections are cut, and writes go on at once, with no stream
// of 503s. Alone, as a single host, it is refused at start: "the database
// is read-only".
func TestPostgresFailoverOldPrimaryBack(t *testing.T) {
	t.Parallel()
	c := newPGCluster(t)
	a := c.addPrimary("a")
	b := c.addStandby("b", a, pgStandbyOptions{})
	a.syncOn(b)
	db := pgMultiHost(a.addr(), b.addr())
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 2)
	l := startFOLoad(t, ts, key, 4)
	l.waitAcked(t, 500, 60*time.Second)

	// Fenced: read-only, with the instances' connections still on it.
	a.exec("ALTER SYSTEM SET default_transaction_read_only = on")
	a.exec("SELECT pg_reload_conf()")
	// As an HA manager does before it promotes: the transactions a had
	// begun before it turned read-only end, their commits on b
	// (synchronous replication). A commit begun after the promotion would
	// wait for b forever, holding its instance's creates for a busy
	// timeout. Every later transaction is read-only: a session reads the
	// reloaded settings before its next command. A session of the test's
	// own reads them when it starts: its pg_conf_load_time() is after the
	// reload.
	var reloaded time.Time
	if err := a.queryRow("SELECT pg_conf_load_time()").Scan(&reloaded); err != nil {
		t.Fatal(err)
	}
	a.waitFor("no transaction left from before the reload", fmt.Sprintf(
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name LIKE 'petstore%%' AND (wait_event = 'SyncRep' OR xact_start < '%s')",
		reloaded.Format(time.RFC3339Nano)))
	promotedAt := b.promote()
	first := l.firstOKAfter(t, promotedAt)
	t.Logf("fenced old primary: first 201 %v after the promotion", first.Round(time.Millisecond))
	if first > 2500*time.Millisecond {
		t.Errorf("fenced old primary: the first 201 came %v after the promotion, want within 2.5s", first)
	}
	settled := promotedAt.Add(2500 * time.Millisecond)
	time.Sleep(time.Until(settled.Add(2 * time.Second)))
	l.foNoneFailedAfter(t, "fenced old primary", settled)
	eachAlone(t, ts, key, "fenced", 10)
	var locks int
	if err := a.queryRow("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'petstore%lock%'").Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks > 0 {
		t.Errorf("fenced old primary: %d lock connections still on it", locks)
	}

	// Back as a standby, listed first.
	a.kill()
	a.rejoin(b)
	b.syncOn(a)
	wantReadOnly(t, pgMultiHost(a.addr()))
	cutAt := time.Now()
	b.cutPetstore()
	first = l.firstOKAfter(t, cutAt)
	t.Logf("old primary back as a standby: first 201 %v after the cut", first.Round(time.Millisecond))
	settled = cutAt.Add(2500 * time.Millisecond)
	time.Sleep(time.Until(settled.Add(2 * time.Second)))
	l.foNoneFailedAfter(t, "old primary back as a standby", settled)

	// Back as a read-only primary, listed first.
	b.syncOff()
	a.stop()
	if err := os.Remove(filepath.Join(a.dir, "standby.signal")); err != nil {
		t.Fatal(err)
	}
	a.start("-c default_transaction_read_only=on")
	wantReadOnly(t, pgMultiHost(a.addr()))
	cutAt = time.Now()
	b.cutPetstore()
	first = l.firstOKAfter(t, cutAt)
	t.Logf("old primary back read-only: first 201 %v after the cut", first.Round(time.Millisecond))
	settled = cutAt.Add(2500 * time.Millisecond)
	time.Sleep(time.Until(settled.Add(2 * time.Second)))
	l.foNoneFailedAfter(t, "old primary back read-only", settled)

	l.stopLoad()
	l.check(t)
	l.verifyRows(t, b)
	foNotRestarted(t, ts)
}

// wantReadOnly checks that serve refuses the read-only database db at
// start: exit 1, "the database is read-only".
func wantReadOnly(t *testing.T, db string) {
	t.Helper()
	_, _, err := runCLI(t, nil, "serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--db", db)
	var msg strings.Builder
	if code := exitCode(err, &msg); code != 1 || !strings.Contains(msg.String(), "the database is read-only") {
		t.Errorf("serve on the read-only %s: exit %d, %q; want 1, the database is read-only", db, code, msg.String())
	}
}

// TestPostgresDurabilityShown: what a failover would keep is shown, not
// assumed. With several hosts and no synchronous standby, serve warns at
// start ("a failover may lose acknowledged writes"), and the admin /readyz
// and petstore_db_synchronous_standbys say 0; for a role that may not read
// pg_stat_replication's sync_state (no pg_monitor), null and -1, and
// a warning that says to grant it; with a synchronous standby, 1 and no
// warning. The store reads them again each minute (here, at once).
func TestPostgresDurabilityShown(t *testing.T) {
	t.Parallel()
	c := newPGCluster(t)
	a := c.addPrimary("a")
	a.exec("CREATE ROLE app LOGIN")
	a.exec("CREATE DATABASE appdb OWNER app")
	b := c.addStandby("b", a, pgStandbyOptions{})
	db := pgMultiHost(a.addr(), b.addr())
	key := pmBigKey(t, db)
	appDB := strings.Replace(strings.Replace(db, "postgres@", "app@", 1), "/petstore?", "/appdb?", 1)
	appKey := pmBigKey(t, appDB)

	st, err := openStore(context.Background(), db, storeOptions{busy: defaultBusyTimeout, now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	for _, tt := range []struct {
		name, db, key, want, metric, warn string
	}{
		{"asynchronous standby", db, key, "0", "0", "a failover may lose acknowledged writes"},
		{"no pg_monitor", appDB, appKey, "null", "-1", "pg_monitor"},
	} {
		ts := startServerOn(t, tt.db, tt.key)
		foDurability(t, tt.name, ts, tt.want, tt.metric, tt.warn)
	}
	if got := st.Replication().SyncStandbys; got != 0 {
		t.Errorf("the store read %d synchronous standbys at start, want 0", got)
	}

	a.syncOn(b)
	ts := startServerOn(t, db, key)
	foDurability(t, "synchronous standby", ts, "1", "1", "")
	st.(*pgStore).readReplication(context.Background())
	if r := st.Replication(); r.SyncStandbys != 1 || r.SyncCommit != "on" || !strings.Contains(r.SyncNames, "b") {
		t.Errorf("the store read %+v again, want 1 synchronous standby, synchronous_commit on, b named", r)
	}
}

// foDurability checks what serve ts says of its database's synchronous
// standbys: want in the admin /readyz (JSON), metric in the metrics, and a start-up WARN
// that holds warn (none when warn is "").
func foDurability(t *testing.T, name string, ts *testServer, want, metric, warn string) {
	t.Helper()
	// The API listener's says ready, no more; the admin listener's the
	// detail, its count a JSON number or null.
	if r := ts.do(t, "GET", "/readyz", "", ""); r.status != 200 || string(r.body) != `{"status":"ready"}`+"\n" {
		t.Errorf("%s: the API listener's /readyz %d %q, want 200 and the status alone", name, r.status, r.body)
	}
	raw := ts.get(t, ts.admin+"/readyz")
	var body map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &body); err != nil || string(body["synchronous_standbys"]) != want {
		t.Errorf("%s: the admin /readyz %s, want synchronous_standbys %s", name, raw, want)
	}
	if string(body["synchronous_commit"]) != `"on"` || string(body["lost_writes"]) != "[]" {
		t.Errorf("%s: the admin /readyz %s, want synchronous_commit on and no lost writes", name, raw)
	}
	metrics := ts.get(t, ts.admin+"/metrics")
	if line := "petstore_db_synchronous_standbys " + metric; !strings.Contains(metrics, "\n"+line+"\n") {
		t.Errorf("%s: the metrics have no line %q", name, line)
	}
	warned := ""
	for line := range strings.SplitSeq(ts.stderr.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "synchronous") {
			warned = line
		}
	}
	switch {
	case warn == "" && warned != "":
		t.Errorf("%s: a warning at start: %s", name, warned)
	case warn != "" && !strings.Contains(warned, warn):
		t.Errorf("%s: start-up warning %q, want one that says %q", name, warned, warn)
	}
}

// foCommitCut is a TCP proxy to a primary that, once armed, cuts the next
// flight of creates (the one whose write holds the batch's COMMIT):
// holding the server's answers from then on (the commit happens, its
// answer is lost), or holding that write (it never happens).
type foCommitCut struct {
	ln     net.Listener
	target string
	mode   atomic.Int32 // foForward, foLoseAnswer or foLoseCommit
	once   sync.Once
	held   chan struct{} // closed when a COMMIT was cut
	wg     sync.WaitGroup
}

const (
	foForward = iota
	foLoseAnswer
	foLoseCommit
)

func startFOCommitCut(t *testing.T, target string) *foCommitCut {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &foCommitCut{ln: ln, target: target, held: make(chan struct{})}
	var conns sync.Map
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			p.wg.Go(func() { p.forward(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		p.wg.Wait()
	})
	return p
}

func (p *foCommitCut) addr() string { return p.ln.Addr().String() }

func (p *foCommitCut) forward(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	var mute atomic.Bool // this connection's answers are held
	done := make(chan struct{}, 2)
	go func() { // the server's answers
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 && !mute.Load() {
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	go func() { // the client's messages
		buf := make([]byte, 32<<10)
		// The batch's COMMIT: the Bind of its prepared statement (and its
		// Parse, the first time), in the flight of a batch (sendBatch).
		commit := []byte(pgStmtCommit.name + "\x00")
		for {
			n, err := c.Read(buf)
			if n > 0 {
				mode := p.mode.Load()
				if mode != foForward && bytes.Contains(buf[:n], commit) && p.mode.CompareAndSwap(mode, foForward) {
					mute.Store(true)
					p.once.Do(func() { close(p.held) })
					if mode == foLoseCommit {
						n = 0
					}
				}
				if _, werr := up.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
}

// TestPostgresFailoverKeyedCreateCut: a keyed create cut by the failover
// at its COMMIT answers 503; resent with its Idempotency-Key after the
// promotion, it gets the original answer when the commit reached the
// standby (the primary committed, and died before its answer came back),
// and runs, once, when it did not (the COMMIT never reached the primary).
func TestPostgresFailoverKeyedCreateCut(t *testing.T) {
	for _, tt := range []struct {
		name     string
		mode     int32
		replayed bool
	}{
		{"the answer lost", foLoseAnswer, true},
		{"the commit lost", foLoseCommit, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newPGCluster(t)
			a := c.addPrimary("a")
			b := c.addStandby("b", a, pgStandbyOptions{})
			a.syncOn(b)
			cut := startFOCommitCut(t, a.addr())
			db := pgMultiHost(cut.addr(), b.addr())
			key := pmBigKey(t, db)
			ts := startServerOn(t, db, key)
			if r := ts.do(t, "POST", "/v1/categories", key, `{"name":"warm"}`, "Idempotency-Key", "warm"); r.status != 201 {
				t.Fatalf("a create before the cut: %d %s", r.status, r.body)
			}

			cut.mode.Store(tt.mode)
			const name = "cut-create"
			first := make(chan response, 1)
			go func() {
				r, _, err := pmSend(ts, foAnswerWithin+10*time.Second, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":%q}`, name), "Idempotency-Key", name)
				if err != nil {
					r.status = -1
				}
				first <- r
			}()
			select {
			case <-cut.held:
			case <-time.After(10 * time.Second):
				t.Fatal("no COMMIT went through the proxy within 10s")
			}
			if tt.replayed { // the primary committed: the standby has it (synchronous replication)
				b.waitForIn("petstore", "the row on the standby", "SELECT count(*) = 1 FROM categories WHERE name = '"+name+"'")
			}
			a.kill()
			promotedAt := b.promote()
			r := <-first
			if r.status != 503 || pmErrorCode(r.body) != "unavailable" || r.header.Get("Retry-After") == "" {
				t.Fatalf("the create cut at its commit: %d %s Retry-After %q, want 503 unavailable with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
			}
			var again response
			for {
				again, _, _ = pmSend(ts, foAnswerWithin+10*time.Second, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":%q}`, name), "Idempotency-Key", name)
				if again.status == 201 || time.Since(promotedAt) > 10*time.Second {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			var cat Category
			if again.status != 201 || json.Unmarshal(again.body, &cat) != nil {
				t.Fatalf("resent after the promotion: %d %s, want 201", again.status, again.body)
			}
			if replayed := again.header.Get("Idempotency-Replayed") == "true"; replayed != tt.replayed {
				t.Errorf("resent: Idempotency-Replayed %v, want %v", replayed, tt.replayed)
			}
			var n int
			var id int64
			if err := b.queryRowIn("petstore", "SELECT count(*), max(id) FROM categories WHERE name = $1", name).Scan(&n, &id); err != nil {
				t.Fatal(err)
			}
			if n != 1 || id != cat.ID {
				t.Errorf("the new primary has %d rows named %s (id %d), want 1 with the id answered, %d", n, name, id, cat.ID)
			}
		})
	}
}
