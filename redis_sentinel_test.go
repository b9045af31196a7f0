package main

// Server-level tests of serve --redis through Redis Sentinel (DECISIONS.md
// section 19): a master, its replica and a Sentinel of the test's own
// (rmStartRedis, rmStartSentinels), never the machine's Redis. They need
// PETSTORE_TEST_REDIS, and the failover PETSTORE_TEST_POSTGRES too (two
// instances on one database), and skip without them.

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rsSentinelURL is the --redis of a Sentinel setup: the master set name
// and the Sentinels, the first as the URL's host and the others as addr=,
// with the master's password.
func rsSentinelURL(password, name string, sentinels ...string) string {
	u := "redis://"
	if password != "" {
		u += ":" + password + "@"
	}
	u += sentinels[0] + "/0?master_set=" + name
	for _, s := range sentinels[1:] {
		u += "&addr=" + s
	}
	return u
}

// rsServedUntilRefused sends GET /v1/categories with key to the instances
// in turn until one refuses it, and returns how many each served. Behind
// one bucket for all, that is the key's minute limit in all (and what the
// bucket earned meanwhile); instances counting alone serve it each.
func rsServedUntilRefused(t *testing.T, ts []*testServer, key string) (served []int, refusal rmHit) {
	t.Helper()
	served = make([]int, len(ts))
	for i := range 200 {
		n := i % len(ts)
		h := rmRequest(ts[n], n, key)
		switch {
		case h.err == nil && h.status == 200:
			served[n]++
		case h.err == nil && h.status == 429 && h.code == "rate_limited":
			return served, h
		default:
			t.Fatalf("request %d: %v, want 200 or 429 rate_limited", i, h)
		}
	}
	t.Fatalf("200 requests and no refusal: %v served", served)
	return nil, rmHit{}
}

// rsWantExact checks that the two instances served the key's rpm between
// them and no more, both some: one bucket in Redis.
func rsWantExact(t *testing.T, when string, served []int, rpm int, took time.Duration) {
	t.Helper()
	total := served[0] + served[1]
	// The bucket earns a token each 60/rpm s while the requests go on.
	if most := rpm + int(took/(time.Minute/time.Duration(rpm))); total < rpm || total > most || served[0] == 0 || served[1] == 0 {
		t.Errorf("%s: %v served by the two instances in %v, want %d to %d in all, by both: one bucket, in Redis",
			when, served, took.Round(time.Millisecond), rpm, most)
	}
}

// TestRedisSentinelFailover runs two instances whose --redis names the
// Sentinels, kills the master (SIGKILL, as a crash does) under load, and
// lets the Sentinels promote the replica. It proves that the instances
// fail open meanwhile (every request 200, none slower than a second, no
// 5xx), and that limits are exact again, shared in the new master, within
// 2 s of the promotion (section 19), with no restart; the password is the
// master's (the Sentinels have none) and never shows in the log.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	base := needPostgres(t)
	needRedis(t)
	for _, tc := range []struct {
		name      string
		sentinels int
		killFirst bool
	}{
		// The instances hear of the new master from their Sentinel
		// (+switch-master).
		{"one Sentinel", 1, false},
		// The Sentinel the instances listen to (the URL's first) dies with
		// the master, as on one machine: they ask the others in turn until
		// one names a master that answers.
		{"three Sentinels, the first dies with the master", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rsFailover(t, base, tc.sentinels, tc.killFirst)
		})
	}
}

// rsFailover is TestRedisSentinelFailover with n Sentinels, the first
// killed with the master when killFirst.
func rsFailover(t *testing.T, base string, n int, killFirst bool) {
	const pw, name = "Sentinel-pw-5qT", "petstore-test"
	master := rmStartRedis(t, "--requirepass", pw, "--masterauth", pw)
	replica := rmStartRedis(t, "--requirepass", pw, "--masterauth", pw, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	sentinels := rmStartSentinels(t, n, name, master, pw, replica)
	var addrs []string
	for _, s := range sentinels {
		addrs = append(addrs, s.addr())
	}

	db := postgresSchema(t, base)
	const rpm = 20
	limited := func(name string) keyView {
		return createKeyJSON(t, db, "--plan", "enterprise", "--rpm", strconv.Itoa(rpm), "--rpd", "100000", "--name", name)
	}
	before, after := limited("before"), limited("after")
	big := pmBigKey(t, db)
	const prefix = "sentinel:"
	// 500 ms rather than the default 50 (as TestRedisOutageFallsBackAndReturns):
	// a killed master fails at once; a call that timed out on a loaded
	// machine would fall back when nothing failed.
	ts := pmStart(t, db, big, 2, "--redis", rsSentinelURL(pw, name, addrs...), "--redis-prefix", prefix, "--redis-timeout", "500ms")
	for i, s := range ts {
		if status, body, err := rmReady(s); err != nil || !rmReadyIs(status, body, "redis") {
			t.Fatalf("instance %d's /readyz at the start: %d %v %v", i, status, body, err)
		}
	}
	start := time.Now()
	served, _ := rsServedUntilRefused(t, ts, before.Key)
	rsWantExact(t, "before the failover", served, rpm, time.Since(start))

	var loads []func() []rmHit
	for _, s := range ts {
		stop := rmLoad(s, big, 2, 2000, 10*time.Millisecond)
		defer stop()
		loads = append(loads, stop)
	}
	time.Sleep(300 * time.Millisecond)
	killedAt := time.Now()
	master.kill()
	asked := sentinels[0]
	if killFirst {
		sentinels[0].kill()
		asked = sentinels[1]
	}
	// The promotion: when a Sentinel names the replica as the master.
	took, ok := rmWaitFor(15*time.Second, func() bool { return asked.master() == replica.port })
	if !ok {
		t.Fatalf("the Sentinel names port %d as the master %v after the kill, not the replica's %d:\n%s",
			asked.master(), took.Round(time.Millisecond), replica.port, asked.out.String())
	}
	promotedAt := time.Now()
	bothUp := func() bool {
		for _, s := range ts {
			if m, err := rmMetrics(s); err != nil || m["petstore_ratelimit_backend_up"] != 1 {
				return false
			}
		}
		return true
	}
	back, ok := rmWaitFor(2*time.Second-time.Since(promotedAt), bothUp)
	back = time.Since(promotedAt)
	if !ok {
		for i, s := range ts {
			status, body, err := rmReady(s)
			t.Logf("instance %d: /readyz %d %v %v", i, status, body, err)
		}
		t.Fatalf("limits not in Redis on both instances %v after the promotion (section 19: 2 s)", back.Round(time.Millisecond))
	}
	start = time.Now()
	served, _ = rsServedUntilRefused(t, ts, after.Key)
	rsWantExact(t, "after the failover", served, rpm, time.Since(start))
	exactAt := time.Since(promotedAt)
	time.Sleep(200 * time.Millisecond) // requests on the new master
	var hits []rmHit
	for _, stop := range loads {
		hits = append(hits, stop()...)
	}

	during := 0
	var slowest time.Duration
	for _, h := range hits {
		if h.err != nil || h.status != 200 {
			t.Errorf("%v, sent %v after the kill: want 200 throughout", h, h.sent.Sub(killedAt).Round(time.Millisecond))
			continue
		}
		slowest = max(slowest, h.got.Sub(h.sent))
		if h.sent.After(killedAt) && h.got.Before(promotedAt) {
			during++
		}
		if h.got.Sub(h.sent) > time.Second {
			t.Errorf("%v, sent %v after the kill: longer than a second", h, h.sent.Sub(killedAt).Round(time.Millisecond))
		}
	}
	if during < 10 {
		t.Errorf("only %d requests between the kill and the promotion", during)
	}
	// The new master holds the key's state: the limits live there now.
	c := redisTestClient(t, fmt.Sprintf("redis://:%s@%s/0", pw, replica.addr()))
	ctx := t.Context()
	if n, err := c.Do(ctx, c.B().Exists().Key(fmt.Sprintf("%sk:%d", prefix, after.ID)).Build()).AsInt64(); err != nil || n != 1 {
		t.Errorf("the promoted replica holds %d keys of the key's state (%v), want 1", n, err)
	}
	for i, s := range ts {
		if m := rmMetricsOf(t, s); m["petstore_redis_failures_total"] == 0 {
			t.Errorf("instance %d: no Redis failure counted: it never fell back", i)
		}
		rmLoggedOnceEach(t, s)
		if log := s.stderr.String(); strings.Contains(log, pw) {
			t.Errorf("instance %d's log shows the password:\n%s", i, log)
		}
	}
	t.Logf("%d requests, %d between the kill and the promotion, the slowest %v; promoted %v after the kill; both instances on the new master %v after the promotion, limits shown exact %v after it",
		len(hits), during, slowest.Round(time.Millisecond), promotedAt.Sub(killedAt).Round(time.Millisecond),
		back.Round(time.Millisecond), exactAt.Round(time.Millisecond))
}

// rsSilentListener returns the address of a loopback port that never
// completes a connection: a listener with a backlog of 0, never accepting,
// whose queue one connection fills. Later connects get no answer, as from
// a host that is gone (its SYNs dropped), until the test ends.
func rsSilentListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	fill, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fill.Close() })
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatalf("a connect to the full listener %s succeeded: it would not stand for a host that is gone", addr)
	}
	return addr
}

// TestRedisSentinelThatDoesNotAnswer lists first a Sentinel whose host
// does not answer (no reset: its connects hang), then a working one. The
// instance must give up on the first after its dial timeout (a second)
// and start with its limits in Redis through the second, not wait for the
// operating system's connect timeout of two minutes.
func TestRedisSentinelThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	needRedis(t)
	const name = "petstore-test"
	master := rmStartRedis(t)
	sentinel := rmStartSentinels(t, 1, name, master, "")[0]
	silent := rsSilentListener(t)
	db := testDB(t)
	key := pmBigKey(t, db)
	// --redis-timeout 500ms: a dial timeout of 1 s (the larger of a second
	// and --redis-timeout; the harness's 5 s would make it 5).
	startWith := func(sentinels ...string) (*testServer, time.Duration) {
		start := time.Now()
		ts := pmStart(t, db, key, 1, "--redis", rsSentinelURL("", name, sentinels...), "--redis-prefix", "silent:", "--redis-timeout", "500ms")[0]
		return ts, time.Since(start)
	}
	// The same start without the silent Sentinel, for what a start takes
	// on this machine now (the race detector and parallel tests slow it),
	// twice: the process's first start does work once for all.
	var ts *testServer
	var alone time.Duration
	for range 2 {
		ts, alone = startWith(sentinel.addr())
		ts.stop()
	}
	ts, started := startWith(silent, sentinel.addr())
	if started > alone+3*time.Second {
		t.Errorf("the start took %v, %v without the silent Sentinel: its dial should have given up after a second",
			started.Round(time.Millisecond), alone.Round(time.Millisecond))
	}
	if status, body, err := rmReady(ts); err != nil || !rmReadyIs(status, body, "redis") {
		t.Fatalf("/readyz after the start: %d %v %v, want limits in Redis", status, body, err)
	}
	for i := range 5 {
		if h := rmRequest(ts, 0, key); h.err != nil || h.status != 200 {
			t.Fatalf("request %d: %v", i, h)
		}
	}
	if m := rmMetricsOf(t, ts); m["petstore_ratelimit_backend_up"] != 1 || m["petstore_redis_calls_total"] < 5 || m["petstore_redis_failures_total"] != 0 {
		t.Errorf("backend_up %v, %v calls, %v failures; want every request through Redis",
			m["petstore_ratelimit_backend_up"], m["petstore_redis_calls_total"], m["petstore_redis_failures_total"])
	}
	t.Logf("started in %v with the first Sentinel silent, %v without it", started.Round(time.Millisecond), alone.Round(time.Millisecond))
}
