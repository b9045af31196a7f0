package main

// Server-level tests of the leases (DECISIONS.md section 23): three
// instances on one Redis behind a proxy in the test that delays everything
// 20 ms each way (a far Redis), and 0 ms (a near one). They need
// PETSTORE_TEST_REDIS and PETSTORE_TEST_POSTGRES (three instances share
// one database), and skip without them.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

// lmEmptyBucket empties key id's minute bucket of rpm in Redis, as if a
// burst had just drained it, so that the refill binds from the first
// second of a test (a bucket starts full: draining it through the test
// would take a minute of its refill). It returns a time no later than the
// moment the bucket was empty.
func lmEmptyBucket(t *testing.T, u, prefix string, id, rpm int64) time.Time {
	t.Helper()
	c := redisTestClient(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := time.Now()
	tm, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	key := fmt.Sprintf("%sk:%d", prefix, id)
	if err := c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue("t", "0").FieldValue("l", strconv.FormatInt(sec*1e6+us, 10)).
		FieldValue("r", strconv.FormatInt(rpm, 10)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Pexpire().Key(key).Milliseconds(120_000).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	return before
}

// lmDemand sends GET /v1/categories with key through every instance of ts,
// workers goroutines each, each on a schedule of one request every every
// (a request that waits does not delay the next beyond its slot), for
// dur. It returns what each request saw.
func lmDemand(ts []*testServer, key string, workers int, every, dur time.Duration) []rmHit {
	var mu sync.Mutex
	var hits []rmHit
	var wg sync.WaitGroup
	start := time.Now()
	for n := range ts {
		for w := range workers {
			wg.Go(func() {
				// Spread the workers over the interval.
				next := start.Add(every * time.Duration(n*workers+w) / time.Duration(len(ts)*workers))
				for next.Before(start.Add(dur)) {
					time.Sleep(time.Until(next))
					h := rmRequest(ts[n], n, key)
					mu.Lock()
					hits = append(hits, h)
					mu.Unlock()
					next = next.Add(every)
				}
			})
		}
	}
	wg.Wait()
	return hits
}

// lmLeaseMetrics sums the lease metrics over the instances.
func lmLeaseMetrics(t *testing.T, ts []*testServer) map[string]float64 {
	t.Helper()
	sum := map[string]float64{}
	for _, s := range ts {
		for k, v := range rmMetricsOf(t, s) {
			sum[k] += v
		}
	}
	return sum
}

// TestRedisLeasesAdmitOneBucketAcrossInstances: a key asks for twice its
// limit through three instances, with Redis 20 ms each way and near. Its
// minute bucket (60 a second, emptied at the start) is admitted no more
// than one token bucket would (the refill over the time, plus two) and at
// least 90% of it; its day quota (a small one) no more than the quota
// and at least 90% of it. Far away, the instances decide from their
// leases most of the time. A ban reached through two instances is
// enforced by the third at its first request, as fast as without leases.
func TestRedisLeasesAdmitOneBucketAcrossInstances(t *testing.T) {
	base := needPostgres(t)
	u := needRedis(t)
	t.Parallel()
	clearOfMidnight(t, 2*time.Minute)
	db := postgresSchema(t, base)
	for _, delay := range []time.Duration{20 * time.Millisecond, 0} {
		t.Run(fmt.Sprintf("%v_each_way", delay), func(t *testing.T) {
			proxy := startDelayProxy(t, rmRedisTarget(t, u), delay)
			prefix := redisTestPrefix(t, u)
			via := pmViaProxy(t, u, proxy.addr())
			warm := pmBigKey(t, db)
			// The keys first: each instance knows them from its start.
			const rate, rpd = 60, 300
			k := createKeyJSON(t, db, "--plan", "enterprise", "--rpm", strconv.Itoa(rate*60), "--rpd", "100000000", "--name", "minute")
			kd := createKeyJSON(t, db, "--plan", "enterprise", "--rpm", "1000000", "--rpd", strconv.Itoa(rpd), "--name", "day")
			kb := createKeyJSON(t, db, "--plan", "enterprise", "--rpm", "60", "--rpd", "1000", "--name", "banned")
			ts := pmStart(t, db, warm, 3, "--redis", via, "--redis-prefix", prefix, "--redis-timeout", rmWideTimeout, "--ban-threshold", "1000000000")
			for i, s := range ts {
				for range 5 {
					if r := s.do(t, "GET", "/v1/categories", warm, ""); r.status != 200 {
						t.Fatalf("instance %d: warm-up: %d %s", i, r.status, r.body)
					}
				}
			}

			// The minute bucket: 3600 a minute, 60 a second; asked 120 a
			// second (40 on each instance) for 6 s.
			before := lmLeaseMetrics(t, ts)
			start := lmEmptyBucket(t, u, prefix, k.ID, rate*60)
			hits := lmDemand(ts, k.Key, 4, 100*time.Millisecond, 6*time.Second)
			ok, lastGot, lastSent := 0, start, start
			for _, h := range hits {
				switch {
				case h.err == nil && h.status == 200:
					ok++
				case h.err == nil && h.status == 429 && h.code == "rate_limited":
				default:
					t.Fatalf("%v: want 200 or 429 rate_limited", h)
				}
				if h.got.After(lastGot) {
					lastGot = h.got
				}
				if h.sent.After(lastSent) {
					lastSent = h.sent
				}
			}
			most := int(rate*lastGot.Sub(start).Seconds()) + 2
			least := 0.9 * rate * lastSent.Sub(start).Seconds()
			after := lmLeaseMetrics(t, ts)
			local := after["petstore_ratelimit_lease_local_total"] - before["petstore_ratelimit_lease_local_total"]
			waited := after["petstore_ratelimit_lease_waits_total"] - before["petstore_ratelimit_lease_waits_total"]
			t.Logf("minute: %d of %d requests admitted in %v; one bucket admits at most %d; %v decided from a lease, %v waited; tokens leased %v, returned %v",
				ok, len(hits), lastGot.Sub(start).Round(time.Millisecond), most, local, waited,
				after["petstore_ratelimit_lease_granted_tokens_total"], after["petstore_ratelimit_lease_returned_tokens_total"])
			if ok > most || float64(ok) < least {
				t.Errorf("%d admitted, want %.0f to %d", ok, least, most)
			}
			// An exhausted bucket has no token to lease: nearly every
			// request waits, and is decided in Redis.

			// The day quota: 300, asked 600 times in 5 s.
			before = lmLeaseMetrics(t, ts)
			hits = lmDemand(ts, kd.Key, 4, 100*time.Millisecond, 5*time.Second)
			ok = 0
			for _, h := range hits {
				switch {
				case h.err == nil && h.status == 200:
					ok++
				case h.err == nil && h.status == 429 && h.code == "quota_exceeded":
				default:
					t.Fatalf("%v: want 200 or 429 quota_exceeded", h)
				}
			}
			after = lmLeaseMetrics(t, ts)
			local = after["petstore_ratelimit_lease_local_total"] - before["petstore_ratelimit_lease_local_total"]
			t.Logf("day: %d of %d requests admitted, quota %d; %v decided from a lease", ok, len(hits), rpd, local)
			// Until the quota ran out (half the time) the bucket had
			// tokens to lease: far away, the instances used them.
			if delay > 0 && local < float64(rpd)/4 {
				t.Errorf("%v requests decided from a lease with Redis %v away, want at least %d", local, delay, rpd/4)
			}
			if ok > rpd || ok < rpd*9/10 {
				t.Errorf("%d admitted of a day quota of %d, want %d to %d", ok, rpd, rpd*9/10, rpd)
			}
			for i, s := range ts {
				if m := rmMetricsOf(t, s); m["petstore_redis_failures_total"] != 0 || m["petstore_ratelimit_backend_up"] != 1 {
					t.Errorf("instance %d: %v failures, backend_up %v: it decided alone for a while", i, m["petstore_redis_failures_total"], m["petstore_ratelimit_backend_up"])
				}
			}
			if delay == 0 {
				return
			}

			// The ban: instances of --ban-threshold 3; the key's bucket
			// empty. Its 4th refusal, on either of two instances, bans it;
			// the third refuses it at its first request.
			bs := pmStart(t, db, warm, 3, "--redis", via, "--redis-prefix", prefix, "--redis-timeout", rmWideTimeout, "--ban-threshold", "3", "--ban-duration", "15m")
			k = kb
			lmEmptyBucket(t, u, prefix, k.ID, 60)
			limited := 0
			var ban rmHit
			for i := 0; ban.status == 0; i++ {
				if i > 50 {
					t.Fatalf("no ban after %d requests, %d rate_limited", i, limited)
				}
				h := rmRequest(bs[i%2], i%2, k.Key)
				switch {
				case h.err == nil && h.status == 429 && h.code == "key_banned":
					ban = h
				case h.err == nil && h.status == 429 && h.code == "rate_limited":
					limited++
				case h.err == nil && h.status == 200:
				default:
					t.Fatalf("request %d: %v", i, h)
				}
			}
			third := rmRequest(bs[2], 2, k.Key)
			t.Logf("banned after %d refusals; the third instance refused it in %v", limited, third.got.Sub(third.sent).Round(time.Millisecond))
			if limited != 3 {
				t.Errorf("%d rate_limited before the ban, want 3 (--ban-threshold 3: the 4th bans)", limited)
			}
			if third.err != nil || third.status != 429 || third.code != "key_banned" {
				t.Errorf("the third instance, right after the ban: %v, want key_banned", third)
			}
		})
	}
}

// TestRedisLeasesThroughAnOutage kills the instance's Redis (a private
// redis-server, 20 ms away) under load and starts it again, empty: the
// instance fails open as without leases (every request 200, none 5xx),
// goes back to Redis, and decides from leases again.
func TestRedisLeasesThroughAnOutage(t *testing.T) {
	t.Parallel()
	needRedis(t)
	rs := rmStartRedis(t)
	proxy := startDelayProxy(t, rs.addr(), 20*time.Millisecond)
	db := testDB(t)
	key := createKeyJSON(t, db, "--plan", "enterprise", "--rpm", "1000000", "--rpd", "100000000", "--name", "outage").Key
	ts := pmStart(t, db, key, 1, "--redis", "redis://"+proxy.addr(), "--redis-prefix", "lease-outage:", "--redis-timeout", "500ms")[0]
	stopLoad := rmLoad(ts, key, 4, 5000, 5*time.Millisecond)
	defer stopLoad()
	leased := func() float64 { return rmMetricsOf(t, ts)["petstore_ratelimit_lease_local_total"] }
	if took, ok := rmWaitFor(3*time.Second, func() bool { return leased() > 0 }); !ok {
		t.Fatalf("no request decided from a lease %v into the load", took)
	}
	killedAt := time.Now()
	rs.kill()
	if took, ok := rmWaitFor(3*time.Second, func() bool { return rmMetricsOf(t, ts)["petstore_ratelimit_backend_up"] == 0 }); !ok {
		t.Fatalf("backend_up still 1 %v after the kill", took)
	}
	time.Sleep(time.Second)
	rs.start()
	restartedAt := time.Now()
	if took, ok := rmWaitFor(5*time.Second, func() bool { return rmMetricsOf(t, ts)["petstore_ratelimit_backend_up"] == 1 }); !ok {
		t.Fatalf("backend_up not 1 %v after the restart", took)
	}
	resumed := leased()
	if took, ok := rmWaitFor(3*time.Second, func() bool { return leased() > resumed }); !ok {
		t.Errorf("no request decided from a lease %v after Redis came back", took)
	}
	hits := stopLoad()
	during := 0
	for _, h := range hits {
		if h.err != nil || h.status != 200 {
			t.Errorf("%v, sent %v after the kill: want 200 throughout", h, h.sent.Sub(killedAt).Round(time.Millisecond))
		}
		if h.sent.After(killedAt) && h.got.Before(restartedAt) {
			during++
		}
	}
	if during < 10 {
		t.Errorf("only %d requests during the outage", during)
	}
	m := rmMetricsOf(t, ts)
	t.Logf("%d requests, %d during the outage; %v from a lease, %v waited", len(hits), during,
		m["petstore_ratelimit_lease_local_total"], m["petstore_ratelimit_lease_waits_total"])
	rmLoggedOnceEach(t, ts)
}
