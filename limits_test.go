package main

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// limT0 is a Tuesday noon, a quarter second past, so rounding shows.
var limT0 = time.Date(2026, 3, 10, 12, 0, 0, 250_000_000, time.UTC)

func newLimTest(t testing.TB, cfg limiterConfig) (*limiter, *testClock) {
	t.Helper()
	c := &testClock{}
	c.set(limT0)
	if cfg.Now == nil {
		cfg.Now = c.now
	}
	return newLimiter(cfg), c
}

// limDrain sends requests until one is refused and returns how many were
// allowed and the refusal.
func limDrain(t *testing.T, l *limiter, id, rpm, rpd int64) (int64, decision) {
	t.Helper()
	for n := int64(0); n <= rpm+rpd+1; n++ {
		if d := l.allowKey(id, rpm, rpd); !d.Allowed {
			return n, d
		}
	}
	t.Fatalf("key %d: never refused", id)
	return 0, decision{}
}

func TestLimiterFreshKeyAllowsExactlyRPM(t *testing.T) {
	for _, tc := range []struct {
		rpm, rpd, retry int64
	}{
		{60, 1000, 1}, {300, 10000, 1}, {1000, 100000, 1}, {7, 100, 9}, {1, 100, 60},
	} {
		t.Run(fmt.Sprint(tc.rpm), func(t *testing.T) {
			l, _ := newLimTest(t, limiterConfig{})
			n, d := limDrain(t, l, 1, tc.rpm, tc.rpd)
			if n != tc.rpm {
				t.Fatalf("allowed %d, want %d", n, tc.rpm)
			}
			if d.Code != "rate_limited" || d.RetryAfter != tc.retry || d.Window != 60 || d.Remaining != 0 || d.Limit != tc.rpm {
				t.Fatalf("refusal = %+v, want rate_limited retry %d", d, tc.retry)
			}
		})
	}
}

func TestLimiterRefillsContinuously(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{BanThreshold: 1 << 20})
	limDrain(t, l, 1, 60, 1000)
	c.add(999 * time.Millisecond)
	if d := l.allowKey(1, 60, 1000); d.Allowed {
		t.Fatal("allowed after 999ms at 60/min")
	}
	c.add(time.Millisecond)
	if n, _ := limDrain(t, l, 1, 60, 1000); n != 1 {
		t.Fatalf("after 1s at 60/min: %d allowed, want 1", n)
	}
	c.add(2500 * time.Millisecond)
	if n, _ := limDrain(t, l, 1, 60, 1000); n != 2 {
		t.Fatalf("after 2.5s at 60/min: %d allowed, want 2", n)
	}
	c.add(500 * time.Millisecond) // the half token left over completes
	if n, _ := limDrain(t, l, 1, 60, 1000); n != 1 {
		t.Fatalf("after 0.5s more: %d allowed, want 1", n)
	}
}

func TestLimiterBurstAfterIdleIsCapped(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{})
	for _, idle := range []time.Duration{61 * time.Second, time.Hour, 30 * 24 * time.Hour} {
		c.add(idle)
		if n, _ := limDrain(t, l, 1, 300, 1_000_000); n != 300 {
			t.Fatalf("after %v idle: burst of %d, want 300", idle, n)
		}
	}
}

func TestLimiterRemainingAndReset(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{})
	unix := func(s string) int64 {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.Unix()
	}
	check := func(step string, d decision, remaining, reset, resetIn int64) {
		t.Helper()
		if !d.Allowed || d.Window != 60 || d.Limit != 60 || d.Remaining != remaining || d.Reset != reset || d.ResetIn != resetIn {
			t.Fatalf("%s: got %+v, want remaining %d reset %d (in %d)", step, d, remaining, reset, resetIn)
		}
	}
	// 59 tokens at 12:00:00.25: full again 1s later, at 12:00:01.25, so 12:00:02.
	check("first", l.allowKey(1, 60, 1000), 59, unix("2026-03-10T12:00:02Z"), 1)
	var d decision
	for range 9 {
		d = l.allowKey(1, 60, 1000)
	}
	// 50 tokens: full 10s later, at 12:00:10.25.
	check("tenth", d, 50, unix("2026-03-10T12:00:11Z"), 10)
	c.add(2500 * time.Millisecond)
	// 52.5 tokens, 51.5 after this one: full 8.5s later, at 12:00:11.25.
	check("after 2.5s", l.allowKey(1, 60, 1000), 51, unix("2026-03-10T12:00:12Z"), 9)

	// 7/min: one token takes 60/7 s, so 6 tokens are full again at
	// 12:00:02.75 + 8.571428572s = 12:00:11.321428572.
	check7 := l.allowKey(2, 7, 1000)
	if check7.Remaining != 6 || check7.Reset != unix("2026-03-10T12:00:12Z") || check7.ResetIn != 9 || check7.Limit != 7 {
		t.Fatalf("7/min: %+v", check7)
	}
}

func TestLimiterBindingWindow(t *testing.T) {
	midnight := time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC).Unix()
	for _, tc := range []struct {
		loaded     int64
		window     int64
		limit      int64
		remaining  int64
		reset      int64
		resetIn    int64
		policyRPD  int64
		policyName string
	}{
		{loaded: 900, window: 60, limit: 60, remaining: 59, reset: limT0.Unix() + 2, resetIn: 1},
		{loaded: 940, window: 86400, limit: 1000, remaining: 59, reset: midnight, resetIn: 43200}, // a tie goes to the day
		{loaded: 990, window: 86400, limit: 1000, remaining: 9, reset: midnight, resetIn: 43200},
	} {
		l, _ := newLimTest(t, limiterConfig{})
		l.loadDayCount(1, "2026-03-10", tc.loaded)
		d := l.allowKey(1, 60, 1000)
		if !d.Allowed || d.Window != tc.window || d.Limit != tc.limit || d.Remaining != tc.remaining || d.Reset != tc.reset || d.ResetIn != tc.resetIn || d.MinuteRPM != 60 || d.DayRPD != 1000 {
			t.Errorf("loaded %d: got %+v", tc.loaded, d)
		}
	}
}

func TestLimiterDayQuota(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{})
	n, d := limDrain(t, l, 1, 60, 5)
	midnight := time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)
	want := decision{Code: "quota_exceeded", Limit: 5, Remaining: 0, Reset: midnight.Unix(), RetryAfter: 43200,
		Window: 86400, ResetIn: 43200, MinuteRPM: 60, DayRPD: 5}
	if n != 5 || d != want {
		t.Fatalf("allowed %d, refusal %+v\nwant 5, %+v", n, d, want)
	}
	// Both exhausted: the longer wait is reported, here the day's.
	if n, d := limDrain(t, l, 2, 5, 5); n != 5 || d.Code != "quota_exceeded" || d.RetryAfter != 43200 {
		t.Fatalf("both exhausted at noon: %d, %+v", n, d)
	}
	// Two seconds before midnight the minute bucket at 7/min waits longer.
	c.set(time.Date(2026, 3, 10, 23, 59, 58, 500_000_000, time.UTC))
	if n, d := limDrain(t, l, 3, 7, 7); n != 7 || d.Code != "rate_limited" || d.RetryAfter != 9 || d.Window != 60 {
		t.Fatalf("both exhausted before midnight: %d, %+v", n, d)
	}
}

func TestLimiterUTCMidnight(t *testing.T) {
	// A clock in another zone must not move the day boundary.
	c := &testClock{}
	zone := time.FixedZone("UTC-5", -5*3600)
	l := newLimiter(limiterConfig{Now: func() time.Time { return c.now().In(zone) }})
	c.set(time.Date(2026, 3, 10, 23, 59, 59, 0, time.UTC))
	if n, d := limDrain(t, l, 1, 60, 3); n != 3 || d.Code != "quota_exceeded" || d.RetryAfter != 1 {
		t.Fatalf("before midnight: %d, %+v", n, d)
	}
	c.add(time.Second)
	d := l.allowKey(1, 60, 3)
	if !d.Allowed || d.Window != 86400 || d.Remaining != 2 || d.Reset != time.Date(2026, 3, 12, 0, 0, 0, 0, time.UTC).Unix() || d.ResetIn != 86400 {
		t.Fatalf("at midnight: %+v", d)
	}

	// Yesterday's stored count does not apply today; today's does.
	l.loadDayCount(2, "2026-03-10", 1000)
	if d := l.allowKey(2, 60, 1000); !d.Allowed || d.Remaining != 59 {
		t.Fatalf("after loading yesterday: %+v", d)
	}
	l.loadDayCount(3, "2026-03-11", 1000)
	if d := l.allowKey(3, 60, 1000); d.Code != "quota_exceeded" {
		t.Fatalf("after loading today: %+v", d)
	}
	// A count loaded just before midnight is dropped at midnight.
	c.set(time.Date(2026, 3, 11, 23, 59, 59, 0, time.UTC))
	l.loadDayCount(4, "2026-03-11", 1000)
	c.add(time.Second)
	if d := l.allowKey(4, 60, 1000); !d.Allowed {
		t.Fatalf("loaded count survived midnight: %+v", d)
	}
}

func TestLimiterRefusalsConsumeNothing(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{BanThreshold: 1 << 20})
	limDrain(t, l, 1, 60, 1000)
	for range 500 {
		if l.allowKey(1, 60, 1000).Allowed {
			t.Fatal("allowed with an empty bucket")
		}
	}
	c.add(time.Second)
	if n, _ := limDrain(t, l, 1, 60, 1000); n != 1 {
		t.Fatalf("refusals consumed tokens: %d allowed after 1s, want 1", n)
	}
	if got := limSum(l.takeDayDeltas(nil)); got != 61 {
		t.Fatalf("day count %d, want 61", got)
	}

	// Refused by the day quota, the minute bucket keeps its last token.
	limDrain(t, l, 2, 3, 2)
	for range 10 {
		l.allowKey(2, 3, 2)
	}
	if n, d := limDrain(t, l, 2, 3, 100); n != 1 || d.Code != "rate_limited" {
		t.Fatalf("after day refusals: %d allowed (%+v), want 1", n, d)
	}
}

func limSum(ds []dayDelta) (n int64) {
	for _, d := range ds {
		n += d.N
	}
	return n
}

func TestLimiterRetryAfterIsHonest(t *testing.T) {
	for _, rpm := range []int64{7, 13, 59, 60, 61, 1000, 99_991} {
		t.Run(fmt.Sprintf("rate_limited/%d", rpm), func(t *testing.T) {
			l, c := newLimTest(t, limiterConfig{BanThreshold: 1 << 20})
			for i := range 40 {
				_, d := limDrain(t, l, 1, rpm, 1<<40)
				if d.Code != "rate_limited" || d.RetryAfter < 1 {
					t.Fatalf("refusal %+v", d)
				}
				// Retry-After is the least whole number of seconds that works.
				c.addSeconds(d.RetryAfter - 1)
				if d.RetryAfter > 1 && l.allowKey(1, rpm, 1<<40).Allowed {
					t.Fatalf("round %d: allowed a second before Retry-After %d", i, d.RetryAfter)
				}
				c.add(time.Second)
				if d := l.allowKey(1, rpm, 1<<40); !d.Allowed {
					t.Fatalf("round %d: refused after waiting Retry-After: %+v", i, d)
				}
				c.add(time.Duration(i) * 37 * time.Millisecond) // vary the phase
			}
		})
	}
	t.Run("rate_limited/nanosecond", func(t *testing.T) {
		// At 7/min, 7000000003 units are a second and 3/7 ns away: rounding
		// the nanoseconds down would promise 1s and refuse the retry.
		l, c := newLimTest(t, limiterConfig{})
		limDrain(t, l, 1, 7, 1000)
		c.add(7571428571)
		if d := l.allowKey(1, 7, 1000); d.RetryAfter != 2 {
			t.Fatalf("refusal %+v, want Retry-After 2", d)
		}
		c.addSeconds(2)
		if d := l.allowKey(1, 7, 1000); !d.Allowed {
			t.Fatalf("refused after waiting Retry-After: %+v", d)
		}
	})
	for _, start := range []time.Time{
		limT0,
		time.Date(2026, 3, 10, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 10, 23, 59, 0, 1, time.UTC),
	} {
		t.Run("quota_exceeded/"+start.Format(time.TimeOnly), func(t *testing.T) {
			l, c := newLimTest(t, limiterConfig{})
			c.set(start)
			_, d := limDrain(t, l, 1, 1000, 5)
			midnight := start.Truncate(24 * time.Hour).Add(24 * time.Hour)
			if want := int64((midnight.Sub(start) + time.Second - 1) / time.Second); d.Code != "quota_exceeded" || d.RetryAfter != want {
				t.Fatalf("refusal %+v, want quota_exceeded after %d", d, want)
			}
			c.addSeconds(d.RetryAfter)
			if d := l.allowKey(1, 1000, 5); !d.Allowed {
				t.Fatalf("refused after waiting Retry-After: %+v", d)
			}
		})
	}
}

func TestLimiterBan(t *testing.T) {
	var bans []time.Time
	l, c := newLimTest(t, limiterConfig{OnBan: func(id int64, until time.Time) {
		if id != 1 {
			t.Errorf("OnBan(%d)", id)
		}
		bans = append(bans, until)
	}})
	limDrain(t, l, 1, 60, 1) // one allowed, then quota_exceeded for the rest of the day; that refusal is the first
	for i := range 59 {
		c.add(time.Second / 2)
		if d := l.allowKey(1, 60, 1); d.Code != "quota_exceeded" {
			t.Fatalf("refusal %d: %+v", i+2, d)
		}
	}
	// 60 refusals within 29.5s: at the threshold, not over it.
	c.add(30 * time.Second)
	d := l.allowKey(1, 60, 1) // the 61st, 59.5s after the first
	banStart := c.now()
	if d.Code != "key_banned" || d.RetryAfter != 900 || len(bans) != 1 || !bans[0].Equal(banStart.Add(15*time.Minute)) {
		t.Fatalf("61st refusal: %+v, bans %v", d, bans)
	}
	c.add(15*time.Minute - time.Second)
	for range 100 {
		if d := l.allowKey(1, 60, 1); d.Code != "key_banned" || d.RetryAfter != 1 || d.Reset != banStart.Add(15*time.Minute).Unix()+1 {
			t.Fatalf("banned: %+v", d)
		}
	}
	if len(bans) != 1 {
		t.Fatalf("OnBan called %d times", len(bans))
	}
	c.add(time.Second)
	// The ban is over and the 100 banned requests counted no refusal: 60 more
	// refusals do not ban again.
	for range 60 {
		if d := l.allowKey(1, 60, 1); d.Code != "quota_exceeded" {
			t.Fatalf("after the ban: %+v", d)
		}
	}
	if len(bans) != 1 {
		t.Fatal("banned again at the threshold")
	}
}

// TestLimiterBanWindowSlides checks that the refusals are counted over
// the minute before each refusal, not in fixed windows that a burst could
// straddle.
func TestLimiterBanWindowSlides(t *testing.T) {
	newBanTest := func() (*limiter, *testClock, *int) {
		bans := new(int)
		l, c := newLimTest(t, limiterConfig{BanThreshold: 10, BanDuration: time.Minute, OnBan: func(int64, time.Time) { *bans++ }})
		return l, c, bans
	}
	refuse := func(l *limiter, n int) {
		for range n {
			l.allowKey(1, 60, 1)
		}
	}

	// A burst across the boundary of two fixed minutes: 1 refusal, 9 at
	// 59.5 s (10 within a minute: no ban yet), 1 at 60 s: 11 within a
	// minute, a ban.
	l, c, bans := newBanTest()
	limDrain(t, l, 1, 60, 1)
	c.add(59500 * time.Millisecond)
	if refuse(l, 9); *bans != 0 {
		t.Fatal("banned at 10 refusals within a minute, want more than 10")
	}
	c.add(500 * time.Millisecond)
	if d := l.allowKey(1, 60, 1); d.Code != "key_banned" || *bans != 1 {
		t.Fatalf("the 11th refusal within a minute, across a minute's boundary: %+v, %d bans", d, *bans)
	}

	// 10 refusals, then 2 minutes later 10 more: never more than 10 within a
	// minute.
	l, c, bans = newBanTest()
	limDrain(t, l, 1, 60, 1)
	refuse(l, 9)
	c.add(2 * time.Minute)
	if refuse(l, 10); *bans != 0 {
		t.Fatal("refusals two minutes apart were added up")
	}
	if d := l.allowKey(1, 60, 1); d.Code != "key_banned" || d.RetryAfter != 60 || *bans != 1 {
		t.Fatalf("the 11th refusal within a minute: %+v, %d bans", d, *bans)
	}

	// 10 refusals, then 90 s later the last minute still holds about half of
	// them (the estimate takes them as spread over their minute): 5 more are
	// allowed, the 6th bans.
	l, c, bans = newBanTest()
	limDrain(t, l, 1, 60, 1)
	refuse(l, 9)
	c.add(90 * time.Second)
	if refuse(l, 5); *bans != 0 {
		t.Fatal("banned at an estimated 10 refusals within a minute")
	}
	if refuse(l, 1); *bans != 1 {
		t.Fatal("not banned at an estimated 11 refusals within a minute")
	}
}

func TestLimiterSetBan(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{BanThreshold: 3})
	l.setBan(7, c.now().Add(time.Hour).Add(time.Millisecond)) // loaded at start, before any request
	if d := l.allowKey(7, 60, 1000); d.Code != "key_banned" || d.RetryAfter != 3601 {
		t.Fatalf("banned by setBan: %+v", d)
	}
	l.setBan(7, time.Time{})
	if d := l.allowKey(7, 60, 1000); !d.Allowed {
		t.Fatalf("after lifting: %+v", d)
	}
	l.setBan(8, time.Time{}) // lifting an unknown key creates nothing
	if st := l.stats(); st.keys != 1 {
		t.Fatalf("stats %+v", st)
	}

	// Lifting forgets refusals: 3 + 1 refusals around a lift do not ban.
	limDrain(t, l, 7, 60, 1)
	l.allowKey(7, 60, 1)
	l.allowKey(7, 60, 1)
	l.setBan(7, time.Time{})
	if d := l.allowKey(7, 60, 1); d.Code != "quota_exceeded" {
		t.Fatalf("after lift: %+v", d)
	}
	l.setBan(7, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)) // beyond int64 nanoseconds
	if d := l.allowKey(7, 60, 1); d.Code != "key_banned" || d.RetryAfter < 1 {
		t.Fatalf("far ban: %+v", d)
	}
}

func limSorted(ds []dayDelta) []dayDelta {
	slices.SortFunc(ds, func(a, b dayDelta) int {
		if a.KeyID != b.KeyID {
			return int(a.KeyID - b.KeyID)
		}
		return strings.Compare(a.Day, b.Day)
	})
	return ds
}

func TestLimiterDayDeltas(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{})
	for range 3 {
		l.allowKey(1, 60, 1000)
	}
	l.allowKey(2, 60, 1000)
	l.allowKey(2, 60, 1000)
	l.loadDayCount(3, "2026-03-10", 10) // loading is not an increment
	want := []dayDelta{{1, "2026-03-10", 3}, {2, "2026-03-10", 2}}
	got := limSorted(l.takeDayDeltas(nil))
	if !slices.Equal(got, want) {
		t.Fatalf("take = %v, want %v", got, want)
	}
	if got := l.takeDayDeltas(nil); len(got) != 0 {
		t.Fatalf("second take = %v", got)
	}
	l.returnDayDeltas(want)
	l.allowKey(1, 60, 1000)
	if got := limSorted(l.takeDayDeltas(nil)); !slices.Equal(got, []dayDelta{{1, "2026-03-10", 4}, {2, "2026-03-10", 2}}) {
		t.Fatalf("take after return = %v", got)
	}

	// Across midnight: yesterday's increments are still handed out.
	c.set(time.Date(2026, 3, 10, 23, 59, 59, 0, time.UTC))
	l.allowKey(1, 60, 1000)
	l.allowKey(1, 60, 1000)
	c.add(2 * time.Second)
	l.allowKey(1, 60, 1000)
	got = limSorted(l.takeDayDeltas(nil))
	if want := []dayDelta{{1, "2026-03-10", 2}, {1, "2026-03-11", 1}}; !slices.Equal(got, want) {
		t.Fatalf("take across midnight = %v, want %v", got, want)
	}
	// A failed write is returned after midnight passed again: nothing is lost,
	// and today's count is unchanged by it.
	c.set(time.Date(2026, 3, 12, 0, 0, 1, 0, time.UTC))
	l.returnDayDeltas(got)
	l.allowKey(1, 60, 1000)
	got = limSorted(l.takeDayDeltas(nil))
	if want := []dayDelta{{1, "2026-03-10", 2}, {1, "2026-03-11", 1}, {1, "2026-03-12", 1}}; !slices.Equal(got, want) {
		t.Fatalf("take after late return = %v, want %v", got, want)
	}
	if d := l.allowKey(1, 60, 1000); d.Window != 60 || d.Remaining != 58 {
		t.Fatalf("today's count disturbed: %+v", d)
	}
}

func TestLimiterSweep(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{})
	c.set(time.Date(2026, 3, 10, 23, 59, 0, 0, time.UTC))
	l.allowKey(1, 60, 1000) // flushed below
	l.allowKey(2, 60, 1000) // never flushed
	l.setBan(3, c.now().Add(3*time.Minute))
	l.allowAddr(netip.MustParseAddr("192.0.2.1"))
	l.takeDayDeltas(nil)
	l.allowKey(2, 60, 1000)
	l.sweep()
	if st := l.stats(); st.keys != 3 || st.addrs != 1 {
		t.Fatalf("nothing is idle yet: %+v", st)
	}
	c.add(2 * time.Minute) // 00:01, the next day: every bucket is full
	l.allowKey(4, 60, 1000)
	l.sweep()
	if st := l.stats(); st.keys != 3 || st.addrs != 0 {
		t.Fatalf("next day: %+v, want keys 2 (unflushed), 3 (banned) and 4 (today's count)", st)
	}
	if ds := l.takeDayDeltas(nil); limSum(ds) != 2 {
		t.Fatalf("deltas %v", ds)
	}
	c.add(2 * time.Minute)
	l.sweep()
	if st := l.stats(); st.keys != 1 {
		t.Fatalf("after flush and ban expiry: %+v, want key 4 only", st)
	}
	// A refilling bucket keeps its key, though its count is yesterday's.
	c.set(time.Date(2026, 3, 11, 23, 59, 55, 0, time.UTC))
	limDrain(t, l, 5, 60, 1000)
	l.takeDayDeltas(nil)
	c.add(10 * time.Second)
	l.sweep()
	if st := l.stats(); st.keys != 1 {
		t.Fatalf("refilling bucket: %+v, want key 5 only", st)
	}
	c.add(2 * time.Minute) // and its refusal older than the ban's window
	l.sweep()
	if st := l.stats(); st.keys != 0 {
		t.Fatalf("full again: %+v", st)
	}
}

func TestLimiterPlanChange(t *testing.T) {
	l, _ := newLimTest(t, limiterConfig{})
	for range 10 {
		l.allowKey(1, 60, 1000)
	}
	if d := l.allowKey(1, 300, 10000); d.Remaining != 289 || d.Limit != 300 {
		t.Fatalf("upgrade keeps the 11 spent tokens spent: %+v", d)
	}
	if d := l.allowKey(1, 5, 1000); d.Code != "rate_limited" || d.Limit != 5 {
		t.Fatalf("downgrade below the spent tokens: %+v", d)
	}
	for _, lim := range [][2]int64{{0, 0}, {-1, -1}, {0, 1000}, {1 << 62, 1 << 62}, {60, 0}} {
		_ = l.allowKey(1, lim[0], lim[1]) // no panic, no overflow
	}
	if d := l.allowKey(2, 0, 0); !d.Allowed || d.Window != 0 {
		t.Fatalf("unlimited key: %+v", d)
	}
}

func TestLimiterAddrCap(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{})
	for i := range uint32(300_000) {
		c.add(time.Millisecond)
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if !l.allowAddr(a).Allowed {
			t.Fatalf("new address %v refused", a)
		}
	}
	if st := l.stats(); st.addrs > 100_000 || st.addrs < 99_000 {
		t.Fatalf("stats %+v, want at most 100000 and nearly as many", st)
	}
}

func TestLimiterAddrEvictionKeepsActive(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{MaxAddrs: 1000, AnonRPM: 10})
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }
	for i := range 1000 {
		l.allowAddr(addr(i))
	}
	c.add(time.Minute) // all full again
	for range 10 {
		l.allowAddr(addr(0)) // the oldest is active again
	}
	for i := 1000; i < 1500; i++ {
		l.allowAddr(addr(i))
	}
	if st := l.stats(); st.addrs != 1000 {
		t.Fatalf("stats %+v", st)
	}
	if d := l.allowAddr(addr(0)); d.Allowed {
		t.Fatal("an active address was evicted before idle ones")
	}
}

func TestLimiterAddrGrouping(t *testing.T) {
	l, _ := newLimTest(t, limiterConfig{AnonRPM: 2})
	same := func(a, b string) bool {
		l.allowAddr(netip.MustParseAddr(a))
		l.allowAddr(netip.MustParseAddr(a))
		return !l.allowAddr(netip.MustParseAddr(b)).Allowed
	}
	if !same("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:9") {
		t.Error("one /64 got two buckets")
	}
	if same("2001:db8:1:3::1", "2001:db8:1:4::1") {
		t.Error("two /64s share a bucket")
	}
	if !same("192.0.2.1", "::ffff:192.0.2.1") {
		t.Error("an IPv4-mapped address got its own bucket")
	}
	if same("192.0.2.2", "192.0.2.3") {
		t.Error("two IPv4 addresses share a bucket")
	}
	if same("0.0.0.5", "::5") {
		t.Error("an IPv4 address shares a bucket with ::/64")
	}
	d := l.allowAddr(netip.MustParseAddr("198.51.100.1"))
	if !d.Allowed || d.Window != 60 || d.Limit != 2 || d.Remaining != 1 || d.MinuteRPM != 2 || d.DayRPD != 0 || d.ResetIn != 30 {
		t.Fatalf("anonymous decision: %+v", d)
	}
}

func TestLimiterConcurrentOneKey(t *testing.T) {
	l, _ := newLimTest(t, limiterConfig{BanThreshold: 1 << 30})
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 200 {
		wg.Go(func() {
			for i := range 50 {
				if l.allowKey(1, 1000, 1_000_000).Allowed {
					allowed.Add(1)
				}
				switch i % 10 {
				case 0:
					l.allowAddr(netip.AddrFrom4([4]byte{10, 0, byte(g), byte(i)}))
				case 1:
					l.allowKey(int64(1000+g), 60, 1000)
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			l.returnDayDeltas(l.takeDayDeltas(nil))
			l.sweep()
			_ = l.stats()
		}
	})
	wg.Wait()
	if n := allowed.Load(); n != 1000 {
		t.Fatalf("%d allowed with a frozen clock, want exactly the capacity 1000", n)
	}
	var total int64
	for _, d := range l.takeDayDeltas(nil) {
		if d.KeyID == 1 {
			total += d.N
		}
	}
	if total != 1000 {
		t.Fatalf("day deltas of key 1 sum to %d, want 1000", total)
	}
}

func TestLimiterAllowDoesNotAllocate(t *testing.T) {
	l, c := newLimTest(t, limiterConfig{})
	addr := netip.MustParseAddr("2001:db8::1")
	if n := testing.AllocsPerRun(1000, func() {
		c.add(time.Millisecond)
		l.allowKey(1, 1000, 1<<40)
		l.allowAddr(addr)
	}); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

func TestDecisionSetHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    decision
		want http.Header
	}{
		{"allowed", decision{Allowed: true, Limit: 60, Remaining: 5, Reset: 1773144030, Window: 60, ResetIn: 30, MinuteRPM: 60, DayRPD: 1000},
			http.Header{
				"X-Ratelimit-Limit":     {"60"},
				"X-Ratelimit-Remaining": {"5"},
				"X-Ratelimit-Reset":     {"1773144030"},
				"Ratelimit-Policy":      {`"minute";q=60;w=60, "day";q=1000;w=86400`},
				"Ratelimit":             {`"minute";r=5;t=30`},
			}},
		{"rate limited", decision{Code: "rate_limited", Limit: 300, Remaining: 0, Reset: 1773144030, RetryAfter: 1, Window: 60, ResetIn: 12, MinuteRPM: 300, DayRPD: 10000},
			http.Header{
				"Retry-After":           {"1"},
				"X-Ratelimit-Limit":     {"300"},
				"X-Ratelimit-Remaining": {"0"},
				"X-Ratelimit-Reset":     {"1773144030"},
				"Ratelimit-Policy":      {`"minute";q=300;w=60, "day";q=10000;w=86400`},
				"Ratelimit":             {`"minute";r=0;t=1`},
			}},
		{"quota", decision{Code: "quota_exceeded", Limit: 100000, Remaining: 0, Reset: 1773187200, RetryAfter: 43200, Window: 86400, ResetIn: 43200, MinuteRPM: 1000, DayRPD: 100000},
			http.Header{
				"Retry-After":           {"43200"},
				"X-Ratelimit-Limit":     {"100000"},
				"X-Ratelimit-Remaining": {"0"},
				"X-Ratelimit-Reset":     {"1773187200"},
				"Ratelimit-Policy":      {`"minute";q=1000;w=60, "day";q=100000;w=86400`},
				"Ratelimit":             {`"day";r=0;t=43200`},
			}},
		{"anonymous", decision{Allowed: true, Limit: 60, Remaining: 59, Reset: 1773144002, Window: 60, ResetIn: 1, MinuteRPM: 60},
			http.Header{
				"X-Ratelimit-Limit":     {"60"},
				"X-Ratelimit-Remaining": {"59"},
				"X-Ratelimit-Reset":     {"1773144002"},
				"Ratelimit-Policy":      {`"minute";q=60;w=60`},
				"Ratelimit":             {`"minute";r=59;t=1`},
			}},
		{"unlimited", decision{Allowed: true}, http.Header{}},
	} {
		h := http.Header{}
		tc.d.setHeaders(h)
		if fmt.Sprint(h) != fmt.Sprint(tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, h, tc.want)
		}
	}

	// From a live decision: the free plan at limT0.
	l, _ := newLimTest(t, limiterConfig{})
	h := http.Header{}
	l.allowKey(1, 60, 1000).setHeaders(h)
	if h.Get("X-RateLimit-Reset") != fmt.Sprint(limT0.Unix()+2) || h.Get("RateLimit") != `"minute";r=59;t=1` {
		t.Fatalf("live headers %v", h)
	}
}

func TestLimiterBanDurationSaturates(t *testing.T) {
	l, _ := newLimTest(t, limiterConfig{BanThreshold: 1, BanDuration: math.MaxInt64})
	limDrain(t, l, 1, 60, 1000)
	if d := l.allowKey(1, 60, 1000); d.Code != "key_banned" {
		t.Fatalf("the 2nd refusal: %+v, want the ban", d)
	}
	if d := l.allowKey(1, 60, 1000); d.Code != "key_banned" {
		t.Fatalf("a ban of the longest duration wrapped around: %+v", d)
	}
}

// TestClientAddr is the rule of DECISIONS.md section 17 for the address a
// request is counted by: only a listed proxy's X-Forwarded-For is read, all
// its lines as one list; the client is the last entry that is not a listed
// proxy (all listed: the first; one that does not parse: the sender).
// --trust-proxy believes any sender's last entry.
func TestClientAddr(t *testing.T) {
	list, err := parseTrustedProxies("10.0.0.1, 192.0.2.0/24,2001:db8:1::/48")
	if err != nil {
		t.Fatal(err)
	}
	listed, anyone := proxyTrust{list: list}, proxyTrust{any: true}
	for _, tc := range []struct {
		name  string
		trust proxyTrust
		peer  string
		xff   []string
		want  string
	}{
		{"nothing trusted", proxyTrust{}, "10.0.0.1:555", []string{"203.0.113.5"}, "10.0.0.1"},
		{"listed, no header", listed, "10.0.0.1:555", nil, "10.0.0.1"},
		{"not listed", listed, "10.9.9.9:555", []string{"203.0.113.5"}, "10.9.9.9"},
		{"a listed range", listed, "192.0.2.200:555", []string{"203.0.113.5"}, "203.0.113.5"},
		{"an IPv4-mapped sender", listed, "[::ffff:10.0.0.1]:555", []string{"203.0.113.5"}, "203.0.113.5"},
		{"one entry", listed, "10.0.0.1:555", []string{"203.0.113.5"}, "203.0.113.5"},
		{"the client's own word comes first", listed, "10.0.0.1:555", []string{"198.51.100.9, 203.0.113.5"}, "203.0.113.5"},
		{"a listed proxy skipped", listed, "10.0.0.1:555", []string{"198.51.100.9, 203.0.113.5, 192.0.2.7"}, "203.0.113.5"},
		{"lines in order", listed, "10.0.0.1:555", []string{"198.51.100.9, 203.0.113.5", "192.0.2.7,192.0.2.8"}, "203.0.113.5"},
		{"the last line's client", listed, "10.0.0.1:555", []string{"198.51.100.9", "203.0.113.5, 192.0.2.7"}, "203.0.113.5"},
		{"every entry listed", listed, "10.0.0.1:555", []string{"192.0.2.7", "192.0.2.8, 10.0.0.1"}, "192.0.2.7"},
		{"a mapped listed entry", listed, "10.0.0.1:555", []string{"203.0.113.5, ::ffff:192.0.2.7"}, "203.0.113.5"},
		{"an IPv6 proxy", listed, "[2001:db8:1::1]:555", []string{"2001:db8::9, 2001:db8:1::5"}, "2001:db8::9"},
		{"an entry that does not parse", listed, "10.0.0.1:555", []string{"203.0.113.5, junk, 192.0.2.7"}, "10.0.0.1"},
		{"junk before the client is never read", listed, "10.0.0.1:555", []string{"junk, 203.0.113.5"}, "203.0.113.5"},
		{"an empty last entry", listed, "10.0.0.1:555", []string{"203.0.113.5,"}, "10.0.0.1"},
		{"an empty line", listed, "10.0.0.1:555", []string{"203.0.113.5", ""}, "10.0.0.1"},
		{"a port", listed, "10.0.0.1:555", []string{"203.0.113.5:4711"}, "203.0.113.5"},
		{"an IPv6 port", listed, "10.0.0.1:555", []string{"[2001:db8::1]:4711"}, "2001:db8::1"},
		{"spaces", listed, "10.0.0.1:555", []string{" 2001:db8::1 ,  192.0.2.7 "}, "2001:db8::1"},
		{"any: the last entry", anyone, "10.9.9.9:555", []string{"198.51.100.9, 203.0.113.5"}, "203.0.113.5"},
		{"any: the last line", anyone, "10.9.9.9:555", []string{"198.51.100.9", "203.0.113.5"}, "203.0.113.5"},
		{"any: even a proxy's", anyone, "10.9.9.9:555", []string{"203.0.113.5, 192.0.2.7"}, "192.0.2.7"},
		{"any: a port", anyone, "10.9.9.9:555", []string{"[2001:db8::1]:4711"}, "2001:db8::1"},
		{"any: junk", anyone, "10.9.9.9:555", []string{"not an address"}, "10.9.9.9"},
		{"any: no header", anyone, "10.9.9.9:555", nil, "10.9.9.9"},
	} {
		r := httptest.NewRequest("GET", "/v1/categories", nil)
		r.RemoteAddr = tc.peer
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := tc.trust.clientAddr(r); got.Unmap().String() != tc.want {
			t.Errorf("%s: %s with X-Forwarded-For %q: %v, want %s", tc.name, tc.peer, tc.xff, got, tc.want)
		}
	}
}

func TestParseTrustedProxies(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"127.0.0.1", "127.0.0.1/32"},
		{" 10.0.0.0/8 , ::1,2001:db8::/32 ", "10.0.0.0/8 ::1/128 2001:db8::/32"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"::ffff:10.0.0.1", "10.0.0.1/32"},
	} {
		got, err := parseTrustedProxies(tc.in)
		var s []string
		for _, p := range got {
			s = append(s, p.String())
		}
		if err != nil || strings.Join(s, " ") != tc.want {
			t.Errorf("%q: %v %v, want %s", tc.in, s, err, tc.want)
		}
	}
	for _, in := range []string{",", "10.0.0.1,,10.0.0.2", "proxy.example.com", "10.0.0.0/33", "fe80::1%eth0", "10.0.0.1:80"} {
		if got, err := parseTrustedProxies(in); err == nil {
			t.Errorf("%q: %v, want an error", in, got)
		}
	}
}
