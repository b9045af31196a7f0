// limits.go owns the token bucket: each key's minute bucket, day count and
// temporary ban, worked out in exact integer arithmetic with the standard
// library only. The per-address buckets are in limits_addrs.go, the day
// counts' way to the database in limits_days.go; the HTTP side is
// limits_http.go.

package main

import (
	"cmp"
	"math"
	"sync"
	"time"
)

type limiterConfig struct {
	Now          func() time.Time // injected clock; required
	AnonRPM      int64            // default 60 when 0
	MaxAddrs     int              // default 100_000 when 0
	BanThreshold int64            // default 60 when 0
	BanDuration  time.Duration    // default 15*time.Minute when 0
	OnBan        func(id int64, until time.Time)
}

// decision is the limiter's answer for one request. Limit, Remaining, Reset
// and Window describe the binding window: the one with fewer requests left.
type decision struct {
	Allowed    bool
	Code       string // "", "rate_limited", "quota_exceeded", "key_banned"
	Limit      int64
	Remaining  int64
	Reset      int64 // Unix seconds
	RetryAfter int64 // whole seconds, >= 1 when !Allowed
	Window     int64 // seconds: 60 or 86400 (the binding window); 0 when unlimited
	ResetIn    int64 // seconds from now until Reset
	MinuteRPM  int64 // the policy, for RateLimit-Policy; 0 when that window is unlimited
	DayRPD     int64
	ViaRedis   bool // decided by a call to Redis made for this request (limits_redis*.go), for its trace span
}

type limiterStats struct {
	keys  int
	addrs int
}

const (
	limKeyShardBits = 6
	// limTokenUnit is one token in the units buckets count in: a bucket of
	// rpm per minute gains exactly rpm units per nanosecond, so refill,
	// Reset and RetryAfter are exact integer arithmetic.
	limTokenUnit = int64(time.Minute)
	limMaxRPM    = 100_000_000 // keeps rpm*limTokenUnit within int64
	limDayNanos  = int64(24 * time.Hour)
	limEvictScan = 8
)

// limiter enforces the per-key minute bucket, day quota and temporary ban,
// and the per-address minute bucket of anonymous requests.
//
// It uses its own token bucket rather than golang.org/x/time/rate: rate
// keeps float64 tokens, so floor(tokens) and "wait RetryAfter, then you are
// allowed" can be off by one at exact boundaries, and a rate.Limiter is a
// ~80-byte heap object with its own mutex and time.Time pointers, while the
// bucket here is two int64 kept inside the key's state.
type limiter struct {
	now          func() time.Time
	anonRPM      int64
	banThreshold int64
	banDuration  int64
	onBan        func(id int64, until time.Time)
	keys         [1 << limKeyShardBits]limKeyShard
	addrs        []limAddrShard
}

// limiter must stay a rateLimiter: serve uses it alone, or inside the
// Redis one.
var _ rateLimiter = (*limiter)(nil)

// limKeyShard holds the states of the keys that hash to it, one heap
// object each. States kept inline in chunks of consecutive ids were faster
// among a million keys in random order (one load from memory a check
// instead of two or three), but a tracked key then costs its whole chunk
// when few of its neighbours are active, many times the memory of a state
// here (BENCHMARKS.md has both figures).
type limKeyShard struct {
	mu sync.Mutex
	t  map[int64]*limKeyState
	// dirty lists the ids whose pending went from 0 to positive since the
	// last takeDayDeltas, so that it need not scan the whole table.
	dirty []int64
	// stale holds increments that no longer belong to a key's current day:
	// yesterday's at midnight, and returned ones of a day the key left.
	stale []dayDelta
	days  [2]struct {
		day int32
		s   string
	}
	_ [64]byte // keeps neighbouring shards' mutexes off one cache line
}

type limBucket struct {
	tokens int64 // in limTokenUnit per token
	last   int64 // Unix ns of the last refill
}

type limKeyState struct {
	limBucket
	count    int64 // requests counted on day, loaded ones included
	pending  int64 // increments of day not yet taken by takeDayDeltas
	banUntil int64 // Unix ns
	// The refusals counted for the ban, in windows of a minute: refusals in
	// the one that started at refStart (Unix ns), prevRefusals in the one
	// before it. The count "within one minute" is estimated as a sliding
	// window: prevRefusals weighted by how much of it the last minute still
	// covers, plus refusals.
	refStart     int64
	refusals     int32
	prevRefusals int32
	day          int32 // Unix day of count and pending
	rpm          int32 // capacity the bucket holds (<= limMaxRPM); 0 until the first allowKey
}

func newLimiter(cfg limiterConfig) *limiter {
	if cfg.Now == nil {
		panic("newLimiter: limiterConfig.Now is required")
	}
	l := &limiter{
		now:          cfg.Now,
		anonRPM:      max(1, min(cmp.Or(cfg.AnonRPM, 60), limMaxRPM)),
		banThreshold: min(cmp.Or(cfg.BanThreshold, 60), math.MaxInt32-1),
		banDuration:  int64(cmp.Or(cfg.BanDuration, 15*time.Minute)),
		onBan:        cfg.OnBan,
	}
	for i := range l.keys {
		l.keys[i].t = map[int64]*limKeyState{}
	}
	maxAddrs := max(1, cmp.Or(cfg.MaxAddrs, 100_000))
	// At least 1024 addresses a shard, so that a small cap is not cut into
	// shards so small that one of them evicts long before the cap is reached.
	n := max(1, min(64, maxAddrs/1024))
	l.addrs = make([]limAddrShard, n)
	for i := range l.addrs {
		l.addrs[i] = limAddrShard{t: map[limAddrKey]limBucket{}, max: maxAddrs / n}
	}
	return l
}

// allowKey counts a request of key id against its minute bucket of rpm and its
// day quota of rpd; rpm or rpd <= 0 means that window is unlimited. A refused
// request consumes neither.
func (l *limiter) allowKey(id int64, rpm, rpd int64) decision {
	now := l.now().UnixNano()
	rpm = max(0, min(rpm, limMaxRPM))
	rpd = max(0, rpd)
	s := l.keyShard(id)
	s.mu.Lock()
	st := s.state(id)
	if st.banUntil > now {
		until := st.banUntil
		s.mu.Unlock()
		return limBanned(until, now, rpm, rpd)
	}
	st.setRPM(now, rpm)
	s.toDay(id, st, limDay(now))
	minuteOK := rpm == 0 || st.tokens >= limTokenUnit
	dayOK := rpd == 0 || st.count < rpd
	banned := false
	if minuteOK && dayOK {
		if rpm > 0 {
			st.tokens -= limTokenUnit
		}
		st.count++
		if st.pending == 0 {
			s.dirty = append(s.dirty, id)
		}
		st.pending++
	} else {
		st.countRefusal(now)
		if st.recentRefusals(now) > float64(l.banThreshold) {
			until := int64(math.MaxInt64) // saturating: --ban-duration has no upper bound
			if now < math.MaxInt64-l.banDuration {
				until = now + l.banDuration
			}
			st.banUntil, st.refStart, st.refusals, st.prevRefusals = until, 0, 0, 0
			banned = true
		}
	}
	// What the answer needs, taken under the lock: the rest is worked out
	// after it.
	b, count, day, banUntil := st.limBucket, st.count, st.day, st.banUntil
	s.mu.Unlock()

	if banned {
		if l.onBan != nil {
			l.onBan(id, time.Unix(0, banUntil).UTC())
		}
		return limBanned(banUntil, now, rpm, rpd)
	}
	return keyDecision(now, rpm, rpd, b, count, day, minuteOK, dayOK)
}

// keyDecision is the answer for a key's request at now, given its bucket
// and day count after the request (which consumed from them only if it was
// allowed: minuteOK and dayOK).
func keyDecision(now, rpm, rpd int64, b limBucket, count int64, day int32, minuteOK, dayOK bool) decision {
	d := decision{Allowed: minuteOK && dayOK, MinuteRPM: rpm, DayRPD: rpd}
	midnight := (int64(day) + 1) * limDayNanos
	dayLeft := max(0, rpd-count)
	switch {
	case d.Allowed:
		// Ties go to the day: it stays binding for longer.
		if rpd > 0 && (rpm == 0 || dayLeft <= b.tokens/limTokenUnit) {
			d.setWindow(86400, rpd, dayLeft, midnight, now)
		} else if rpm > 0 {
			d.setWindow(60, rpm, b.tokens/limTokenUnit, b.last+b.untilFull(rpm), now)
		}
	default:
		var minuteWait, dayWait int64
		if !minuteOK {
			minuteWait = limSeconds(b.last + limCeilDiv(limTokenUnit-b.tokens, rpm) - now)
		}
		if !dayOK {
			dayWait = limSeconds(midnight - now)
		}
		if dayWait >= minuteWait {
			d.Code, d.RetryAfter = "quota_exceeded", dayWait
			d.setWindow(86400, rpd, dayLeft, midnight, now)
		} else {
			d.Code, d.RetryAfter = "rate_limited", minuteWait
			d.setWindow(60, rpm, b.tokens/limTokenUnit, b.last+b.untilFull(rpm), now)
		}
	}
	return d
}

// setBan bans key id until the given time; the zero time lifts the ban and
// forgets the key's recent refusals.
func (l *limiter) setBan(id int64, until time.Time) {
	s := l.keyShard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if until.IsZero() {
		if st := s.t[id]; st != nil {
			st.banUntil, st.refStart, st.refusals, st.prevRefusals = 0, 0, 0, 0
		}
		return
	}
	st := s.state(id)
	st.banUntil = math.MaxInt64
	if until.Before(time.Unix(0, math.MaxInt64)) {
		st.banUntil = until.UnixNano()
	}
}

// banOf returns the end of key id's ban, the zero time when it has none.
func (l *limiter) banOf(id int64) time.Time {
	s := l.keyShard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.t[id]; st != nil && st.banUntil > 0 {
		return time.Unix(0, st.banUntil).UTC()
	}
	return time.Time{}
}

// sweep forgets state that carries no information: keys whose bucket is full
// and that have no ban, no recent refusal and no count for today or pending
// increment, and addresses whose bucket is full.
func (l *limiter) sweep() {
	now := l.now().UnixNano()
	today := limDay(now)
	for i := range l.keys {
		s := &l.keys[i]
		s.mu.Lock()
		for id, st := range s.t {
			if st.pending == 0 && st.banUntil <= now && (st.day < today || st.count == 0) &&
				(st.refusals == 0 || now-st.refStart >= 2*int64(time.Minute)) &&
				(st.rpm == 0 || st.untilFull(int64(st.rpm)) <= now-st.last) {
				delete(s.t, id)
			}
		}
		s.mu.Unlock()
	}
	l.sweepAddrs(now)
}

// backend says the in-process limiter shares nothing.
func (l *limiter) backend() limiterBackend { return limiterBackend{} }

// stats counts the keys and addresses the limiter tracks.
func (l *limiter) stats() limiterStats {
	var st limiterStats
	for i := range l.keys {
		l.keys[i].mu.Lock()
		st.keys += len(l.keys[i].t)
		l.keys[i].mu.Unlock()
	}
	st.addrs = l.trackedAddrs()
	return st
}

func (d *decision) setWindow(window, limit, remaining, resetNanos, now int64) {
	d.Window, d.Limit, d.Remaining = window, limit, remaining
	d.Reset = limCeilDiv(resetNanos, int64(time.Second))
	d.ResetIn = limCeilDiv(resetNanos-now, int64(time.Second))
}

// limBanned is the decision for a key banned until the given Unix ns.
func limBanned(until, now, rpm, rpd int64) decision {
	d := decision{Code: "key_banned", RetryAfter: limSeconds(until - now), MinuteRPM: rpm, DayRPD: rpd}
	if rpm > 0 {
		d.setWindow(60, rpm, 0, until, now)
	} else {
		d.setWindow(86400, rpd, 0, until, now)
	}
	return d
}

// countRefusal counts a refusal at now in the current minute window, moving
// on to a new window when that one is over.
func (st *limKeyState) countRefusal(now int64) {
	switch elapsed := now - st.refStart; {
	case st.refusals == 0 && st.prevRefusals == 0 || elapsed >= 2*int64(time.Minute) || elapsed < 0:
		st.refStart, st.refusals, st.prevRefusals = now, 0, 0
	case elapsed >= int64(time.Minute):
		st.refStart, st.prevRefusals, st.refusals = st.refStart+int64(time.Minute), st.refusals, 0
	}
	if st.refusals < math.MaxInt32 {
		st.refusals++
	}
}

// recentRefusals estimates the refusals of the minute before now (see
// refStart).
func (st *limKeyState) recentRefusals(now int64) float64 {
	covered := 1 - float64(now-st.refStart)/float64(time.Minute)
	return float64(st.prevRefusals)*max(0, covered) + float64(st.refusals)
}

// setRPM brings the bucket up to now and to capacity rpm. A fresh bucket
// starts full; on a plan change the tokens already spent stay spent.
func (st *limKeyState) setRPM(now, rpm int64) {
	switch {
	case rpm == int64(st.rpm):
	case st.rpm == 0:
		st.tokens, st.last = rpm*limTokenUnit, now
	default:
		st.refill(now, int64(st.rpm))
		st.tokens = max(0, min(rpm*limTokenUnit, st.tokens+(rpm-int64(st.rpm))*limTokenUnit))
	}
	st.rpm = int32(rpm)
	if rpm > 0 {
		st.refill(now, rpm)
	}
}

// refill adds what a bucket of rpm per minute earned since b.last, up to rpm.
func (b *limBucket) refill(now, rpm int64) {
	if now <= b.last {
		return // a clock that steps back earns nothing
	}
	if gap := now - b.last; gap >= int64(time.Minute) || gap*rpm >= rpm*limTokenUnit-b.tokens {
		b.tokens = rpm * limTokenUnit
	} else {
		b.tokens += gap * rpm
	}
	b.last = now
}

// untilFull returns the nanoseconds after b.last at which a bucket of rpm is full.
func (b *limBucket) untilFull(rpm int64) int64 {
	return limCeilDiv(rpm*limTokenUnit-b.tokens, rpm)
}

// keyShard returns the shard that holds key id.
func (l *limiter) keyShard(id int64) *limKeyShard {
	return &l.keys[limKeyHash(id)>>(64-limKeyShardBits)]
}

// state returns key id's state, adding a fresh one if there is none.
func (s *limKeyShard) state(id int64) *limKeyState {
	st := s.t[id]
	if st == nil {
		st = &limKeyState{}
		s.t[id] = st
	}
	return st
}

func limKeyHash(id int64) uint64 { return limMix(uint64(id)) }

// limMix is MurmurHash3's 64-bit finalizer: shards take bits of its result,
// so consecutive ids spread over all shards.
func limMix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	return x ^ x>>33
}

func limDay(ns int64) int32 {
	return int32(ns / limDayNanos)
}

// limSeconds is a positive wait in ns as whole seconds, rounded up, at least 1.
func limSeconds(ns int64) int64 {
	return max(1, limCeilDiv(ns, int64(time.Second)))
}

// limCeilDiv returns a/b rounded up, for b > 0.
func limCeilDiv(a, b int64) int64 {
	q := a / b
	if a%b > 0 {
		q++
	}
	return q
}
