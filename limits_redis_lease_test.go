package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// newLeaseLimTest returns n Redis limiters on one prefix and one injected
// clock, as n instances of one deployment, each with leases of want tokens
// for a key in use, their calls made inline; and an in-process limiter of
// the same configuration, one token bucket, the reference.
func newLeaseLimTest(t *testing.T, n int, want int64, cfg limiterConfig) ([]*redisLimiter, *limiter, *testClock) {
	t.Helper()
	u := needRedis(t)
	ref, c := newLimTest(t, cfg)
	cfg.Now = c.now
	prefix := redisTestPrefix(t, u)
	var out []*redisLimiter
	for range n {
		r, err := newRedisLimiter(context.Background(), redisOptions{url: u, prefix: prefix, timeout: 5 * time.Second, now: c.now},
			newLimiter(cfg), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if !r.up.Load() {
			t.Fatal("the Redis limiter did not connect")
		}
		r.fixedWant, r.async = want, func(f func()) { f() }
		t.Cleanup(r.close)
		out = append(out, r)
	}
	return out, ref, c
}

// leaseRecords reads a key's hash in Redis: the bucket's tokens (in
// tokens, rounded down), and the tokens of each live lease by instance.
func leaseRecords(t *testing.T, c rueidis.Client, key string, now int64) (tokens int64, leases map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	units, _ := strconv.ParseInt(h["t"], 10, 64)
	leases = map[string]int64{}
	for k, v := range h {
		inst, ok := strings.CutPrefix(k, "L:")
		if !ok {
			continue
		}
		parts := strings.Split(v, ":")
		n, _ := strconv.ParseInt(parts[0], 10, 64)
		exp, _ := strconv.ParseInt(parts[1], 10, 64)
		if exp > now/1000 {
			leases[inst] = n
		}
	}
	return units / 60_000_000, leases
}

// TestRedisLeasesNeverAdmitMoreThanOneBucket is the model test of the
// leases: the same random requests of one key through three instances
// that lease ahead (3, then 5 tokens) and through one in-process token
// bucket, on one clock. The greedy bucket admits the most any schedule
// within the limits can, so at every step the instances together must
// have admitted no more than it; in Redis the bucket plus the leases never
// exceed the capacity, and no instance holds more than Redis records for
// it; and the leases cost little: at least 85% of the reference. Keys
// gone quiet give their leases back.
func TestRedisLeasesNeverAdmitMoreThanOneBucket(t *testing.T) {
	// The last case sends below the refill (600 a minute, asked about 8 a
	// second): the bucket stays near full while leases are out, where a
	// refill that forgot them would overfill it.
	for _, tc := range []struct {
		want, rpm, rpd int64
		steady         bool
	}{{3, 40, 100000, false}, {5, 40, 100000, false}, {4, 40, 80, false}, {5, 600, 100000, true}} {
		t.Run(fmt.Sprintf("want%d_rpm%d_rpd%d", tc.want, tc.rpm, tc.rpd), func(t *testing.T) {
			want, rpm, rpd := tc.want, tc.rpm, tc.rpd
			cfg := limiterConfig{BanThreshold: 1 << 30}
			insts, ref, clock := newLeaseLimTest(t, 3, want, cfg)
			c := redisTestClient(t, os.Getenv(redisEnv))
			key := insts[0].keyName('k', "1")
			rng := rand.New(rand.NewPCG(uint64(want), 7))
			var got, wantN, local int64
			for i := range 4000 {
				// Twice the rate of 40 a minute on average, in bursts of
				// ten 5 ms apart and gaps of up to 14 s: whole
				// milliseconds, which the script (µs) and the reference
				// (ns) count alike.
				if i%10 == 0 || tc.steady {
					// The gap, with each instance's tendLeases every 100 ms.
					gap := time.Duration(rng.IntN(14000)) * time.Millisecond
					if tc.steady {
						gap = time.Duration(rng.IntN(250)) * time.Millisecond
					}
					for ; gap > redisLeaseTick; gap -= redisLeaseTick {
						clock.add(redisLeaseTick)
						for _, r := range insts {
							r.tendOnce(clock.now().UnixNano())
						}
					}
					clock.add(gap)
				} else {
					clock.add(5 * time.Millisecond)
				}
				r := insts[rng.IntN(len(insts))]
				before := r.leases.local.Load()
				d := r.allowKey(1, rpm, rpd)
				local += r.leases.local.Load() - before
				if d.Allowed {
					got++
				}
				if ref.allowKey(1, rpm, rpd).Allowed {
					wantN++
				}
				if got > wantN {
					t.Fatalf("request %d: the instances admitted %d, one token bucket %d", i, got, wantN)
				}
				if d.Allowed && (d.Remaining < 0 || d.Limit != rpm && d.Limit != rpd) || !d.Allowed && d.Code == "" {
					t.Fatalf("request %d: %+v", i, d)
				}
				if i%7 != 0 {
					continue
				}
				now := clock.now().UnixNano()
				tokens, leases := leaseRecords(t, c, key, now)
				var sum int64
				for _, n := range leases {
					sum += n
				}
				if tokens+sum > rpm {
					t.Fatalf("request %d: the bucket holds %d and the leases %v: more than the capacity %d", i, tokens, leases, rpm)
				}
				for k, in := range insts {
					l := in.leases.of(1)
					l.mu.Lock()
					held, live := l.held, now < l.deadline
					l.mu.Unlock()
					if live && held > leases[in.instance] {
						t.Fatalf("request %d: instance %d holds %d tokens, Redis records %d for it", i, k, held, leases[in.instance])
					}
				}
			}
			t.Logf("want %d: %d admitted (%d from a lease), one bucket %d", want, got, local, wantN)
			if local == 0 || got*100 < wantN*85 {
				t.Errorf("%d admitted, %d from a lease, against %d: want leases used and at least 85%%", got, local, wantN)
			}
			// The bucket refills; each instance takes a lease with a
			// request, then goes quiet and gives it back.
			clock.add(time.Minute)
			for _, r := range insts {
				r.allowKey(1, rpm, rpd)
			}
			clock.add(redisLeaseIdle)
			var returned int64
			for _, r := range insts {
				r.tendOnce(clock.now().UnixNano())
				returned += r.leases.returned.Load()
			}
			if _, leases := leaseRecords(t, c, key, clock.now().UnixNano()); len(leases) != 0 {
				t.Errorf("leases %v recorded after every instance gave its lease back", leases)
			}
			if returned == 0 && got < rpd {
				t.Error("no token was given back")
			}
		})
	}
}

// TestRedisLeaseFromSeen: a request whose wait for Redis timed out is
// decided from the key's state as last seen, refilled since and less what
// this instance admitted beyond it, never more; a request its lease paid
// for is allowed, with the lease counted in the headers. No Redis needed.
func TestRedisLeaseFromSeen(t *testing.T) {
	t0 := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC).UnixNano()
	const rpm, rpd = 60, 1000
	l := &redisLease{rpm: rpm, rpd: rpd, hasSeen: true, seenAt: t0}
	// 2.5 tokens in the bucket, 3 more in leases (room: 57), 997 counted.
	l.seen = redisStep{bucket: limBucket{tokens: 5 * limTokenUnit / 2, last: t0}, count: 997, day: limDay(t0), now: t0, leased: 3}
	admit := func(at int64) decision {
		d := l.fromSeen(at, rpm, rpd, false)
		if d.Allowed {
			l.extra++ // as decideInRedis does
		}
		return d
	}
	for i := range 2 {
		if d := admit(t0); !d.Allowed || d.Remaining != int64(1-i) {
			t.Fatalf("request %d: %+v, want allowed with %d left", i, d, 1-i)
		}
	}
	if d := admit(t0); d.Allowed || d.Code != "rate_limited" || d.RetryAfter != 1 {
		t.Fatalf("a third request with half a token seen: %+v", d)
	}
	// Half a second later the refill of 1 a second made it 1 token.
	if d := admit(t0 + int64(500*time.Millisecond)); !d.Allowed {
		t.Fatalf("after the refill: %+v", d)
	}
	// The day: 997 + 3 admitted beyond the state = 1000.
	l.seen.bucket.tokens = 50 * limTokenUnit
	if d := admit(t0 + int64(time.Second)); d.Allowed || d.Code != "quota_exceeded" {
		t.Fatalf("the day's quota reached beyond the state seen: %+v", d)
	}
	// A lease of 2 held: a request it paid for is allowed, and the
	// headers count what it still holds.
	l.held = 1 // after the spend
	if d := l.fromSeen(t0+int64(time.Second), rpm, rpd, true); !d.Allowed || d.Window != 86400 || d.Remaining != 1 {
		t.Fatalf("a request paid by the lease: %+v, want allowed, the day's 1 left (the lease's)", d)
	}
}

// TestRedisSpanOnlyWhenAsked: a request decided from its key's lease in
// memory has no Redis span, though the lease's top-ups call Redis meanwhile;
// one decided in Redis has one (trace_clients.go).
func TestRedisSpanOnlyWhenAsked(t *testing.T) {
	lims, _, _ := newLeaseLimTest(t, 1, 5, limiterConfig{BanThreshold: 1 << 30})
	r := lims[0]
	c := traceConfig{endpoint: "http://127.0.0.1:1/v1/traces"}
	if err := c.resolve(func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	tr := newTracer(c, slog.New(slog.DiscardHandler))
	var local, asked int
	for i := range 6 {
		req := httptest.NewRequest("GET", "/v1/pets", nil)
		req = withState(req, &reqState{trace: tr.startServer(req)})
		before := r.leases.local.Load()
		rs := startRedis(req, r)
		rs.end(r, r.allowKey(42, 600, 0))
		spans := len(tr.exp.queue)
		for range spans {
			<-tr.exp.queue
		}
		want := 1
		if r.leases.local.Load() > before {
			want = 0
			local++
		} else {
			asked++
		}
		if spans != want {
			t.Errorf("request %d: %d Redis spans, want %d", i, spans, want)
		}
	}
	if local == 0 || asked == 0 {
		t.Fatalf("%d requests decided from the lease, %d in Redis: want some of each", local, asked)
	}
}

// TestRedisLeaseExtraSettles: a request admitted from the state last seen
// (its wait timed out) stops counting against that state when its call
// ends, whether the call counted it in Redis or failed; a plan that
// changes forgets it too. Else a failed call left phantom spends that
// lowered the key's headers and refused timed-out waits for good.
func TestRedisLeaseExtraSettles(t *testing.T) {
	lims, _, _ := newLeaseLimTest(t, 1, 5, limiterConfig{BanThreshold: 1 << 30})
	r := lims[0]
	l := &redisLease{rpm: 60, rpd: 1000, extra: 2}
	for i, err := range []error{nil, errors.New("connection reset")} {
		r.settle(7, l, 60, 1000, nil, &redisCall{admitted: true}, redisStep{}, err, time.Millisecond)
		if l.extra != int64(1-i) {
			t.Fatalf("after call %d (err %v): extra = %d, want %d", i, err, l.extra, 1-i)
		}
	}
	r.settle(7, l, 60, 1000, nil, &redisCall{admitted: true}, redisStep{}, nil, time.Millisecond)
	if l.extra != 0 {
		t.Fatalf("extra = %d after more settles than spends, want 0", l.extra)
	}
	l.extra = 3
	l.note(time.Now().UnixNano(), 120, 1000)
	if l.extra != 0 {
		t.Fatalf("extra = %d after a plan change, want 0", l.extra)
	}
}
