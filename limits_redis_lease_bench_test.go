package main

// The figures of BENCHMARKS.md ("Limits on a far Redis"): lists of a key
// at half its limit through one instance whose Redis is 20 ms away, with
// leases, against the same instance without --redis and, when
// PETSTORE_BENCH_BASELINE names it, the build before leases
// (/work/baseline/petstore-02f62bc) on the same far Redis.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// lbLatencies sends GET /v1/categories with key to base, one every every,
// n of them, and returns each answer's time, sorted. Every answer must be
// 200: the key is at half its limit.
func lbLatencies(t *testing.T, client *http.Client, base, key string, n int, every time.Duration) []time.Duration {
	t.Helper()
	var d []time.Duration
	next := time.Now()
	for range n {
		time.Sleep(time.Until(next))
		next = next.Add(every)
		req, _ := http.NewRequest("GET", base+"/v1/categories", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		d = append(d, time.Since(start))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d, want 200 at half the key's limit", base, resp.StatusCode)
		}
	}
	slices.Sort(d)
	return d
}

// lbBaseline starts the binary bin (the build before leases) on a SQLite
// file of its own with --redis redisURL, and returns its URL and a key of
// rpm a minute.
func lbBaseline(t *testing.T, bin, redisURL, timeout string, rpm int) (string, string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "baseline.db")
	out, err := exec.Command(bin, "keys", "create", "--db", db, "--plan", "enterprise", "--rpm", fmt.Sprint(rpm), "--rpd", "100000000", "--json").Output()
	if err != nil {
		t.Fatalf("%s keys create: %v", bin, err)
	}
	var k keyView
	if err := json.Unmarshal(out, &k); err != nil {
		t.Fatalf("%s keys create: %s: %v", bin, out, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--db", db, "--addr", addr, "--admin-addr", "off", "--redis", redisURL, "--redis-prefix", "lease-bench-baseline:", "--redis-timeout", timeout)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s does not listen on %s", bin, addr)
		}
	}
	return "http://" + addr, k.Key
}

// TestRedisLeaseLatencyFigures: a key at half its limit (6000 a minute,
// asked 50 a second) through one instance whose Redis is 20 ms away is
// decided from its lease: fewer than one request in ten waits for Redis.
// It logs the lists' p50 and p99 against the same instance without
// --redis (and the build before leases, given PETSTORE_BENCH_BASELINE),
// alternated, for BENCHMARKS.md.
func TestRedisLeaseLatencyFigures(t *testing.T) {
	u := needRedis(t)
	t.Parallel()
	proxy := startDelayProxy(t, rmRedisTarget(t, u), 20*time.Millisecond)
	const rpm, every, n = 6000, 20 * time.Millisecond, 250
	db := testDB(t)
	key := createKeyJSON(t, db, "--plan", "enterprise", "--rpm", fmt.Sprint(rpm), "--rpd", "100000000", "--name", "half").Key
	far := pmStart(t, db, key, 1, "--redis", pmViaProxy(t, u, proxy.addr()), "--redis-prefix", redisTestPrefix(t, u), "--redis-timeout", "50ms")[0]
	plainDB := testDB(t)
	plainKey := createKeyJSON(t, plainDB, "--plan", "enterprise", "--rpm", fmt.Sprint(rpm), "--rpd", "100000000", "--name", "half").Key
	plain := pmStart(t, plainDB, plainKey, 1, "--redis", "")[0]
	type target struct{ name, base, key string }
	targets := []target{{"--redis 20 ms away, leases", far.base, key}, {"no --redis", plain.base, plainKey}}
	if bin := os.Getenv("PETSTORE_BENCH_BASELINE"); bin != "" {
		// With the default --redis-timeout (50 ms), and with 1 s: a
		// call of 40 ms and more may time out, and the build before
		// then limits on its own.
		for _, timeout := range []string{"50ms", "1s"} {
			b, k := lbBaseline(t, bin, "redis://"+proxy.addr(), timeout, rpm)
			targets = append(targets, target{"--redis 20 ms away, --redis-timeout " + timeout + ", " + filepath.Base(bin), b, k})
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 10 * time.Second}
	figures := map[string][]time.Duration{}
	before := rmMetricsOf(t, far)
	for range 2 { // alternated, so that the machine's load falls on each alike
		for _, tg := range targets {
			figures[tg.name] = append(figures[tg.name], lbLatencies(t, client, tg.base, tg.key, n, every)...)
		}
	}
	after := rmMetricsOf(t, far)
	for _, tg := range targets {
		d := figures[tg.name]
		slices.Sort(d)
		t.Logf("%s: p50 %v, p99 %v (%d lists, one every %v)", tg.name, rpQuantile(d, 0.5), rpQuantile(d, 0.99), len(d), every)
	}
	local := after["petstore_ratelimit_lease_local_total"] - before["petstore_ratelimit_lease_local_total"]
	waited := after["petstore_ratelimit_lease_waits_total"] - before["petstore_ratelimit_lease_waits_total"]
	timedOut := after["petstore_ratelimit_lease_wait_timeouts_total"] - before["petstore_ratelimit_lease_wait_timeouts_total"]
	t.Logf("with leases: %v decided from a lease, %v waited (%.1f%%), of which %v timed out; %v Redis calls; load %s",
		local, waited, 100*waited/(local+waited), timedOut, after["petstore_redis_calls_total"]-before["petstore_redis_calls_total"], lbLoad())
	if waited*10 >= local+waited {
		t.Errorf("%v of %v requests waited for Redis, want fewer than one in ten", waited, local+waited)
	}
}

// lbLoad is the machine's load average, as uptime says it.
func lbLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
