package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// newRedisLimTest returns a Redis limiter and, beside it, an in-process
// limiter of the same configuration, both on one injected clock.
func newRedisLimTest(t *testing.T, cfg limiterConfig) (*redisLimiter, *limiter, *testClock) {
	t.Helper()
	u := needRedis(t)
	ref, c := newLimTest(t, cfg)
	cfg.Now = c.now
	r, err := newRedisLimiter(context.Background(), redisOptions{url: u, prefix: redisTestPrefix(t, u), timeout: 5 * time.Second, now: c.now, noLease: true},
		newLimiter(cfg), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !r.up.Load() {
		t.Fatal("the Redis limiter did not connect")
	}
	t.Cleanup(func() {
		if c := r.client.Load(); c != nil {
			(*c).Close()
		}
	})
	return r, ref, c
}

// TestRedisLimiterDecidesAsTheLocalOne runs the same random requests
// through the Redis limiter and the in-process one on one clock: every
// decision (allowed or not, code, every header's value) must be the same,
// across plan changes, bans, their end and midnight.
func TestRedisLimiterDecidesAsTheLocalOne(t *testing.T) {
	var refBans, redisBans []string
	cfg := limiterConfig{BanThreshold: 5, BanDuration: 90 * time.Second, AnonRPM: 7}
	cfg.OnBan = func(id int64, until time.Time) { refBans = append(refBans, fmt.Sprint(id, until)) }
	r, ref, clock := newRedisLimTest(t, cfg)
	r.onBan = func(id int64, until time.Time) { redisBans = append(redisBans, fmt.Sprint(id, until)) }
	clock.set(time.Date(2026, 3, 10, 23, 50, 0, 0, time.UTC)) // midnight comes within the run

	rng := rand.New(rand.NewPCG(1, 2))
	plans := [][2]int64{{5, 40}, {12, 30}, {0, 25}, {9, 0}, {3, 1000}}
	addrs := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")}
	allowed, refused, banned := 0, 0, 0
	for i := range 3000 {
		// Whole milliseconds: the script counts in µs, the local one in ns.
		clock.add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		if i%500 == 499 {
			clock.add(40 * time.Second)
		}
		var got, want decision
		what := ""
		if rng.IntN(5) == 0 {
			a := addrs[rng.IntN(len(addrs))]
			got, want, what = r.allowAddr(a), ref.allowAddr(a), a.String()
		} else {
			id := int64(1 + rng.IntN(3))
			p := plans[rng.IntN(2)]
			if id == 3 {
				p = plans[2+(i/700)%3] // a plan that changes now and then
			}
			got, want, what = r.allowKey(id, p[0], p[1]), ref.allowKey(id, p[0], p[1]), fmt.Sprintf("key %d rpm %d rpd %d", id, p[0], p[1])
		}
		if !got.ViaRedis {
			t.Fatalf("request %d (%s): not decided in Redis", i, what)
		}
		if got.ViaRedis = false; got != want {
			t.Fatalf("request %d (%s at %s):\nredis %+v\nlocal %+v", i, what, clock.now().Format(time.RFC3339Nano), got, want)
		}
		switch {
		case got.Allowed:
			allowed++
		case got.Code == "key_banned":
			banned++
		default:
			refused++
		}
	}
	t.Logf("%d allowed, %d refused, %d refused while banned; %d bans", allowed, refused, banned, len(redisBans))
	if allowed == 0 || refused == 0 || banned == 0 || len(refBans) == 0 {
		t.Fatalf("the run did not reach every case: %d allowed, %d refused, %d banned, %d bans", allowed, refused, banned, len(refBans))
	}
	if strings.Join(redisBans, ",") != strings.Join(refBans, ",") {
		t.Errorf("bans differ:\nredis %v\nlocal %v", redisBans, refBans)
	}
	// The requests Redis allowed are counted in the local limiter, for the
	// database: the same counts as the reference limiter's.
	got := r.limiter.takeDayDeltas(nil)
	want := ref.takeDayDeltas(nil)
	if fmt.Sprint(sumDeltas(got)) != fmt.Sprint(sumDeltas(want)) {
		t.Errorf("day counts for the database: redis limiter %v, local %v", sumDeltas(got), sumDeltas(want))
	}
}

func sumDeltas(ds []dayDelta) map[string]int64 {
	m := map[string]int64{}
	for _, d := range ds {
		m[fmt.Sprintf("%d@%s", d.KeyID, d.Day)] += d.N
	}
	return m
}

// TestRedisLimiterRefillsFromWhatItKnows: a Redis that lost a key's state
// takes back the day count and the ban this instance knows of (from the
// database), so that a Redis restart neither resets a quota nor lifts a
// ban.
func TestRedisLimiterRefillsFromWhatItKnows(t *testing.T) {
	r, _, clock := newRedisLimTest(t, limiterConfig{})
	c := redisTestClient(t, os.Getenv(redisEnv))
	forget := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, k := range redisTestKeys(t, c, r.prefix) {
			if err := c.Do(ctx, c.B().Del().Key(k).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	today := clock.now().Format(time.DateOnly)
	r.loadDayCount(1, today, 97) // as serve does from the database
	if d := r.allowKey(1, 1000, 100); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after 97 stored, want 98 of 100 counted: %+v", d)
	}
	forget()
	// The local limiter counted the allowed request: 98 now.
	d := r.allowKey(1, 1000, 100)
	if !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after Redis lost the key, want 99 of 100 counted: %+v", d)
	}
	r.allowKey(1, 1000, 100)
	forget()
	if d := r.allowKey(1, 1000, 100); d.Allowed || d.Code != "quota_exceeded" {
		t.Fatalf("the 101st request of the day after Redis lost the key: %+v", d)
	}

	until := clock.now().Add(10 * time.Minute)
	r.setBan(2, until) // as the keyring does with a ban in the database
	forget()
	if d := r.allowKey(2, 1000, 100); d.Allowed || d.Code != "key_banned" || d.RetryAfter != 600 {
		t.Fatalf("a banned key after Redis lost its state: %+v", d)
	}
	r.setBan(2, time.Time{}) // "keys unban", seen by the keyring
	if d := r.allowKey(2, 1000, 100); !d.Allowed {
		t.Fatalf("an unbanned key: %+v", d)
	}
	if d := r.allowKey(2, 1000, 100); !d.Allowed {
		t.Fatalf("an unbanned key, again: %+v", d)
	}
}

// TestRedisBanHoldsWhileTheDatabaseKnowsIt: a ban the script imposed
// holds for every instance for 2 s (the database's way to the others), and
// after that while the calling instance knows it; a ban it does not know
// (lifted with "keys unban" while no instance held it, or written back by
// a late request) is dropped.
func TestRedisBanHoldsWhileTheDatabaseKnowsIt(t *testing.T) {
	r, _, clock := newRedisLimTest(t, limiterConfig{BanThreshold: 1, BanDuration: time.Hour})
	r.allowKey(1, 1, 0)
	r.allowKey(1, 1, 0)
	if d := r.allowKey(1, 1, 0); d.Code != "key_banned" {
		t.Fatalf("want a ban: %+v", d)
	}
	until := r.limiter.banOf(1)
	if until.IsZero() {
		t.Fatal("the ban the script imposed is not in the local limiter")
	}
	// Another instance, which has not heard of the ban yet.
	other := &redisLimiter{limiter: newLimiter(limiterConfig{Now: clock.now, BanThreshold: 1, BanDuration: time.Hour}),
		prefix: r.prefix, timeout: r.timeout, banThreshold: r.banThreshold, banDuration: r.banDuration, now: r.now}
	other.client.Store(r.client.Load())
	other.up.Store(true)
	clock.add(1500 * time.Millisecond)
	if d := other.allowKey(1, 1, 0); d.Code != "key_banned" {
		t.Fatalf("another instance within 2 s of the ban: %+v", d)
	}
	clock.add(time.Second)
	if d := r.allowKey(1, 1, 0); d.Code != "key_banned" {
		t.Fatalf("the instance that knows the ban: %+v", d)
	}
	other.limiter.setBan(1, until) // the database reached it
	if d := other.allowKey(1, 1, 0); d.Code != "key_banned" {
		t.Fatalf("another instance that knows the ban: %+v", d)
	}
	// keys unban: every instance's keyring lifts it, and Redis follows.
	r.limiter.setBan(1, time.Time{})
	other.limiter.setBan(1, time.Time{})
	clock.add(time.Minute) // the bucket refills
	if d := other.allowKey(1, 1, 0); !d.Allowed {
		t.Fatalf("after the unban: %+v", d)
	}
}

// TestRedisLimiterKeysExpire: every key the limiter writes has an expiry,
// no longer than what it must remember: a minute bucket until it is full,
// a day's count until midnight, a ban until it ends.
func TestRedisLimiterKeysExpire(t *testing.T) {
	r, _, clock := newRedisLimTest(t, limiterConfig{BanThreshold: 1, BanDuration: 3 * time.Hour})
	clock.set(time.Date(2026, 3, 10, 18, 0, 0, 0, time.UTC))
	c := redisTestClient(t, os.Getenv(redisEnv))
	r.allowAddr(netip.MustParseAddr("192.0.2.7"))
	r.allowKey(1, 60, 0) // a minute bucket only: full again in 1 s
	r.allowKey(2, 0, 10) // a day count: until midnight, 6 h away
	for range 3 {        // a ban of 3 h
		r.allowKey(3, 1, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The start's probe (a call of the script with no limits) leaves a key
	// that lives a second; it may be gone already.
	probe := r.keyName('p', "probe")
	keys := slices.DeleteFunc(redisTestKeys(t, c, r.prefix), func(k string) bool { return k == probe })
	if len(keys) != 4 {
		t.Fatalf("keys %v, want 4 besides the probe", keys)
	}
	if ttl, err := c.Do(ctx, c.B().Pttl().Key(probe).Build()).AsInt64(); err != nil || ttl > 1100 {
		t.Errorf("the probe's key expires in %d ms (%v), want at most a second (or gone: -2)", ttl, err)
	}
	want := map[string][2]time.Duration{
		r.keyName('k', "1"): {time.Second, 3 * time.Second},
		r.keyName('k', "2"): {6 * time.Hour, 6*time.Hour + 2*time.Second},
		r.keyName('k', "3"): {3 * time.Hour, 3*time.Hour + 2*time.Second},
	}
	for _, k := range keys {
		ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		got := time.Duration(ttl) * time.Millisecond
		w, ok := want[k]
		if !ok {
			w = [2]time.Duration{time.Second, 3 * time.Second} // the address: 1 of 60 spent
		}
		if got < w[0] || got > w[1] {
			t.Errorf("%s expires in %v, want %v to %v", k, got, w[0], w[1])
		}
	}
}

// BenchmarkRedisAllowKey is the Redis limiter's step on the request path,
// from many goroutines at once (as concurrent requests call it), over
// 1,000 keys. It needs PETSTORE_TEST_REDIS.
func BenchmarkRedisAllowKey(b *testing.B) {
	u := needRedis(b)
	local := newLimiter(limiterConfig{Now: time.Now})
	r, err := newRedisLimiter(context.Background(), redisOptions{url: u, prefix: redisTestPrefix(b, u), timeout: time.Second},
		local, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { (*r.client.Load()).Close() })
	var next atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d := r.allowKey(1+next.Add(1)%1000, 100_000_000, 1_000_000_000); !d.Allowed {
				b.Fatalf("refused: %+v", d)
			}
		}
	})
	b.StopTimer()
	if f := r.fails.Load(); f > 0 {
		b.Errorf("%d calls failed", f)
	}
}

// TestRedisUnreachableAtStartAndPasswordNeverShown needs no Redis: an
// instance whose Redis does not answer starts anyway with local limits,
// says so on /readyz and in the metrics, and never shows the URL's
// password; a bad --redis is a usage error that does not quote it either.
func TestRedisUnreachableAtStartAndPasswordNeverShown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now
	const secret = "s3cret-Redis-pw"
	ts := startServer(t, "--redis", "redis://petstore:"+secret+"@"+closed+"/2", "--redis-timeout", "20ms")
	if r := ts.do(t, "GET", "/v1/categories", ts.key, ""); r.status != 200 || r.header.Get("X-Ratelimit-Limit") != "1000" {
		t.Fatalf("GET with Redis unreachable: %d, limit %q", r.status, r.header.Get("X-Ratelimit-Limit"))
	}
	if body := ts.get(t, ts.admin+"/readyz"); !strings.Contains(body, `"limits":"local"`) || !strings.Contains(body, `"redis":"not answering"`) {
		t.Errorf("/readyz = %s, want limits local and redis not answering", body)
	}
	if m := ts.get(t, ts.admin+"/metrics"); !strings.Contains(m, "petstore_ratelimit_backend_up 0") {
		t.Errorf("/metrics lacks petstore_ratelimit_backend_up 0")
	}
	ts.stop()
	log := ts.stderr.String()
	if strings.Contains(log, secret) {
		t.Errorf("the log shows the Redis password:\n%s", log)
	}
	if !strings.Contains(log, "redis://petstore:xxxxx@"+closed+"/2") || strings.Count(log, "redis does not answer") != 1 {
		t.Errorf("want the masked URL in the log and one line saying Redis does not answer:\n%s", log)
	}

	for _, bad := range []string{"http://u:" + secret + "@h:6379", "redis://u:" + secret + "@h:6379/x/y", "redis://u:" + secret + "@h:6379/notanumber", "redis://u:" + secret + "@%zz", "redis:///0"} {
		_, errOut, err := runCLI(t, nil, "serve", "--db", filepath.Join(t.TempDir(), "x.db"), "--redis", bad)
		var msg strings.Builder
		if code := exitCode(err, &msg); code != 2 || strings.Contains(errOut+msg.String(), secret) {
			t.Errorf("--redis %q: exit %d, %q; want 2 without the password", strings.ReplaceAll(bad, secret, "PW"), code, strings.ReplaceAll(msg.String(), secret, "PW"))
		}
	}
}

// deploymentIDOf reads the deployment id of the database db (SQL of its
// own, not the Store's method: the test of a store without it must fail,
// not fail to build).
func deploymentIDOf(t *testing.T, db string) string {
	t.Helper()
	var id string
	var err error
	switch s := openTestStore(t, db).(type) {
	case *sqliteStore:
		err = s.r.QueryRow("SELECT id FROM deployment").Scan(&id)
	case *pgStore:
		err = s.pool.QueryRow(context.Background(), "SELECT id FROM deployment").Scan(&id)
	}
	if err != nil {
		t.Errorf("read the deployment id of %s: %v", redactDB(db), err)
	}
	return id
}

// TestRedisDefaultPrefixKeepsDeploymentsApart runs two deployments, each
// on a SQLite file of its own (so both have a free key 1), on one Redis
// database with the default --redis-prefix: each key has its own bucket,
// under petstore:<deployment id>:, and one deployment's requests take
// nothing from the other's.
func TestRedisDefaultPrefixKeepsDeploymentsApart(t *testing.T) {
	needRedis(t)
	rs := rmStartRedis(t)
	u := rs.url() + "/3"
	var dbs, keys [2]string
	var servers [2]*testServer
	for i := range servers {
		dbs[i] = filepath.Join(t.TempDir(), "petstore.db")
		keys[i] = createKey(t, dbs[i], "--plan", "free") // id 1 in both: 60 a minute
		// --redis-prefix "": the default, over the one startServerOn adds.
		servers[i] = startServerOn(t, dbs[i], keys[i], "--redis", u, "--redis-prefix", "", "--redis-timeout", rmWideTimeout)
	}
	for i, ts := range servers {
		for n := range 40 {
			r := ts.do(t, "GET", "/v1/categories", keys[i], "")
			if r.status != 200 {
				t.Fatalf("deployment %d, request %d of 40 of a free key (60 a minute): %d %s; the other deployment's key 1 took from its bucket", i, n+1, r.status, r.body)
			}
			if n == 39 {
				if rem, _ := strconv.Atoi(r.header.Get("X-Ratelimit-Remaining")); rem < 20 {
					t.Errorf("deployment %d: %d remaining after 40 of 60, want at least 20", i, rem)
				}
			}
		}
	}
	ids := [2]string{deploymentIDOf(t, dbs[0]), deploymentIDOf(t, dbs[1])}
	hexID := regexp.MustCompile(`^[0-9a-f]{16}$`)
	if !hexID.MatchString(ids[0]) || !hexID.MatchString(ids[1]) || ids[0] == ids[1] {
		t.Fatalf("deployment ids %q, want two different ones of 16 hex digits", ids)
	}
	c := redisTestClient(t, u)
	for i, id := range ids {
		prefix := "petstore:" + id + ":"
		if got := redisTestKeys(t, c, prefix+"k:"); !slices.Equal(got, []string{prefix + "k:1"}) {
			t.Errorf("deployment %d's key names in Redis: %q, want [%sk:1]", i, got, prefix)
		}
		if !strings.Contains(servers[i].stderr.String(), "redis_prefix="+prefix) {
			t.Errorf("deployment %d's listening line does not name its prefix %s:\n%s", i, prefix, servers[i].stderr.String())
		}
	}
}

// TestRedisRefusalStopsTheStart starts serve on a Redis of its own that
// refuses it for good: without the password, with a wrong one, as a user
// that may not run the script, on a database number Redis does not have.
// Through a Sentinel, a master set name it does not know and a wrong
// password do the same. Each exits 1 at once with one line naming the
// URL, its password masked; the same Redis with the right password and
// database (and name) serves shared limits, and a Redis that never
// answers falls back to local ones.
func TestRedisRefusalStopsTheStart(t *testing.T) {
	needRedis(t)
	const pw, userPW, wrongPW = "s3cret-Redis-pw", "0ther-Redis-pw", "wr0ng-Redis-pw"
	rs := rmStartRedis(t, "--requirepass", pw, "--databases", "16")
	admin := redisTestClient(t, "redis://:"+pw+"@"+rs.addr()+"/0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A user who may connect (HELLO, PING, CLIENT) but run nothing else.
	if err := admin.Do(ctx, admin.B().Arbitrary("ACL", "SETUSER").Args("limited", "on", ">"+userPW, "~*", "+@connection").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	// A Sentinel that names rs as the master "petstore-test": through it,
	// the URL's password and database are the master's.
	sentinel := rmStartSentinels(t, 1, "petstore-test", rs, pw)[0]
	viaSentinel := func(password, name string) string {
		return "redis://:" + password + "@" + sentinel.addr() + "/1?master_set=" + name
	}
	// And one that wants a password of its own, which petstore does not
	// send (the URL's is the master's): out of scope, and said at once.
	// Another name for rs, so that the two do not learn of each other:
	// petstore would ask the other too.
	const sentinelPW = "S3ntinel-own-pw"
	locked := rmStartSentinels(t, 1, "petstore-locked", rs, pw)[0]
	if err := locked.client.Do(ctx, locked.client.B().Arbitrary("ACL", "SETUSER").Args("default", "resetpass", ">"+sentinelPW).Build()).Error(); err != nil {
		t.Fatalf("ACL SETUSER on the Sentinel: %v", err)
	}
	secrets := []string{pw, userPW, wrongPW, sentinelPW}
	for _, tc := range []struct {
		name, url string
		want      string // in the one line; "" starts and serves
		limits    string // /readyz's limits, when it serves
	}{
		{"no password", "redis://" + rs.addr() + "/1", "NOAUTH", ""},
		{"wrong password", "redis://:" + wrongPW + "@" + rs.addr() + "/1", "WRONGPASS", ""},
		{"no permission", "redis://limited:" + userPW + "@" + rs.addr() + "/1", "NOPERM", ""},
		{"no such database", "redis://:" + pw + "@" + rs.addr() + "/99", "DB index is out of range", ""},
		{"the right ones", "redis://:" + pw + "@" + rs.addr() + "/1", "", "redis"},
		{"silent", "redis://:" + pw + "@" + silent.Addr().String() + "/1", "", "local"},
		{"sentinel, no such master set", viaSentinel(pw, "nosuch"), `the Sentinels know no master named "nosuch"`, ""},
		{"sentinel, wrong password", viaSentinel(wrongPW, "petstore-test"), "WRONGPASS", ""},
		{"sentinel, the right ones", viaSentinel(pw, "petstore-test"), "", "redis"},
		{"sentinel with a password", "redis://:" + pw + "@" + locked.addr() + "/1?master_set=petstore-locked", "NOAUTH", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "petstore.db")
			createKey(t, db, "--plan", "free")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stderr := &syncBuffer{}
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--redis", tc.url}, envFrom(nil), io.Discard, stderr)
			}()
			var err error
			served := false
			deadline := time.After(10 * time.Second)
		wait:
			for {
				select {
				case err = <-done:
					break wait
				case <-deadline:
					cancel()
					t.Fatalf("serve neither served nor stopped within 10s:\n%s", stderr.String())
				case <-time.After(10 * time.Millisecond):
				}
				if admin := logAddr(adminRE, stderr.String()); admin != "" && !served {
					served = true
					resp, gerr := http.Get("http://" + admin + "/readyz")
					if gerr != nil {
						t.Errorf("/readyz: %v", gerr)
					} else {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if tc.limits != "" && !strings.Contains(string(body), `"limits":"`+tc.limits+`"`) {
							t.Errorf("/readyz = %s, want limits %s", body, tc.limits)
						}
					}
					cancel()
				}
			}
			var line strings.Builder
			code := exitCode(err, &line)
			all := stderr.String() + line.String()
			for _, s := range secrets {
				if strings.Contains(all, s) {
					t.Errorf("a password is shown:\n%s", strings.ReplaceAll(all, s, "PW"))
				}
			}
			if tc.want == "" {
				if !served || code != 0 {
					t.Errorf("served %v, exit %d (%q), want it to serve and stop cleanly:\n%s", served, code, line.String(), stderr.String())
				}
				return
			}
			if served || code != 1 || strings.Count(line.String(), "\n") != 1 || !strings.Contains(line.String(), tc.want) ||
				!strings.Contains(line.String(), redactDB(tc.url)) {
				t.Errorf("served %v, exit %d, %q; want exit 1 with one line naming %s and %s, masked",
					served, code, line.String(), tc.want, redactDB(tc.url))
			}
			if log := stderr.String(); strings.Contains(log, "listening") || strings.Contains(log, "redis does not answer") {
				t.Errorf("a refused start logged a fall back or a listener:\n%s", log)
			}
		})
	}
}
