package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// plan is a named pair of limits; enterprise keys carry their own.
type plan struct {
	Name string
	RPM  int64 // requests per minute: the token bucket's capacity
	RPD  int64 // requests per UTC day
}

// plans is the plan table; enterprise has no fixed limits.
var plans = []plan{
	{Name: "free", RPM: 60, RPD: 1000},
	{Name: "pro", RPM: 300, RPD: 10000},
	{Name: "business", RPM: 1000, RPD: 100000},
	{Name: "enterprise"},
}

// planByName returns the plan called name.
func planByName(name string) (plan, bool) {
	for _, p := range plans {
		if p.Name == name {
			return p, true
		}
	}
	return plan{}, false
}

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
}

// dayDelta is an increment of a key's count for a UTC day ("2006-01-02").
type dayDelta struct {
	KeyID int64
	Day   string
	N     int64
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

// limKeyShard holds the states of the keys that hash to it, one heap
// object each. States kept inline in chunks of consecutive ids were twice
// as fast among a million keys in random order (one load from memory a
// check instead of two or three), but a tracked key then costs its whole
// chunk when few of its neighbours are active: 1,243 bytes a key with 5%
// of 100,000 keys active, against 104 here (BENCHMARKS.md).
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

// limAddrKey is an IPv4 address, or the /64 prefix of an IPv6 address.
type limAddrKey struct{ hi, lo uint64 }

type limAddrShard struct {
	mu  sync.Mutex
	t   map[limAddrKey]limBucket
	max int // addresses tracked at most
	_   [64]byte
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
	if day := limDay(now); day > st.day {
		if st.pending > 0 {
			s.stale = append(s.stale, dayDelta{id, s.dayString(st.day), st.pending})
		}
		st.day, st.count, st.pending = day, 0, 0
	}
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

// allowAddr counts an anonymous request from addr against its minute bucket.
// IPv6 clients are grouped by /64, the prefix one subscriber usually gets, so
// that rotating the interface identifier does not buy a fresh bucket. IPv4-
// mapped IPv6 addresses count as their IPv4 address.
func (l *limiter) allowAddr(addr netip.Addr) decision {
	now := l.now().UnixNano()
	k := limAddrKeyOf(addr)
	h := k.hash()
	s := &l.addrs[(h>>32)%uint64(len(l.addrs))]
	s.mu.Lock()
	bk, ok := s.t[k]
	if !ok {
		if len(s.t) >= s.max {
			s.evict(now, l.anonRPM)
		}
		bk = limBucket{tokens: l.anonRPM * limTokenUnit, last: now}
	}
	bk.refill(now, l.anonRPM)
	d := decision{Allowed: bk.tokens >= limTokenUnit, MinuteRPM: l.anonRPM}
	if d.Allowed {
		bk.tokens -= limTokenUnit
	}
	s.t[k] = bk
	s.mu.Unlock()
	if !d.Allowed {
		d.Code, d.RetryAfter = "rate_limited", limSeconds(bk.last+limCeilDiv(limTokenUnit-bk.tokens, l.anonRPM)-now)
	}
	d.setWindow(60, l.anonRPM, bk.tokens/limTokenUnit, bk.last+bk.untilFull(l.anonRPM), now)
	return d
}

// evict forgets one address: of a few taken at random (map iteration starts
// at a random place), the first whose bucket is full again (it carries no
// information), else the idlest, the one with the most tokens.
func (s *limAddrShard) evict(now, rpm int64) {
	var victim limAddrKey
	most, seen := int64(-1), 0
	for k, b := range s.t {
		b.refill(now, rpm)
		if b.tokens > most {
			victim, most = k, b.tokens
		}
		if seen++; seen == limEvictScan || b.tokens == rpm*limTokenUnit {
			break
		}
	}
	delete(s.t, victim)
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

// loadDayCount sets key id's count for day to the stored n (plus increments
// not yet taken). Counts of any day but today (UTC, by the injected clock) are
// ignored: the quota of another day does not matter any more.
func (l *limiter) loadDayCount(id int64, day string, n int64) {
	now := l.now().UnixNano()
	today := limDay(now)
	s := l.keyShard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if day != s.dayString(today) {
		return
	}
	st := s.state(id)
	if st.day < today {
		if st.pending > 0 {
			s.stale = append(s.stale, dayDelta{id, s.dayString(st.day), st.pending})
		}
		st.day, st.pending = today, 0
	}
	st.count = n + st.pending
}

// takeDayDeltas appends to dst the day increments counted since the last call,
// past days' included, and forgets them.
func (l *limiter) takeDayDeltas(dst []dayDelta) []dayDelta {
	for i := range l.keys {
		s := &l.keys[i]
		s.mu.Lock()
		dst = append(dst, s.stale...)
		clear(s.stale)
		s.stale = s.stale[:0]
		for _, id := range s.dirty {
			if st := s.t[id]; st != nil && st.pending > 0 {
				dst = append(dst, dayDelta{id, s.dayString(st.day), st.pending})
				st.pending = 0
			}
		}
		s.dirty = s.dirty[:0]
		s.mu.Unlock()
	}
	return dst
}

// returnDayDeltas puts back deltas taken by takeDayDeltas that could not be
// written, so that the next takeDayDeltas hands them out again.
func (l *limiter) returnDayDeltas(ds []dayDelta) {
	for _, d := range ds {
		s := l.keyShard(d.KeyID)
		s.mu.Lock()
		if st := s.t[d.KeyID]; st != nil && d.Day == s.dayString(st.day) {
			if st.pending == 0 {
				s.dirty = append(s.dirty, d.KeyID)
			}
			st.pending += d.N
		} else {
			s.stale = append(s.stale, d)
		}
		s.mu.Unlock()
	}
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
	for i := range l.addrs {
		s := &l.addrs[i]
		s.mu.Lock()
		for k, b := range s.t {
			if b.untilFull(l.anonRPM) <= now-b.last {
				delete(s.t, k)
			}
		}
		s.mu.Unlock()
	}
}

func (l *limiter) stats() limiterStats {
	var st limiterStats
	for i := range l.keys {
		l.keys[i].mu.Lock()
		st.keys += len(l.keys[i].t)
		l.keys[i].mu.Unlock()
	}
	for i := range l.addrs {
		l.addrs[i].mu.Lock()
		st.addrs += len(l.addrs[i].t)
		l.addrs[i].mu.Unlock()
	}
	return st
}

// setHeaders writes d as X-RateLimit-*, the RateLimit-Policy and RateLimit
// fields of draft-ietf-httpapi-ratelimit-headers-09, and Retry-After.
func (d decision) setHeaders(h http.Header) {
	// All values go into one buffer and then one string, and all header
	// slices share one backing array: two allocations instead of a dozen
	// on a path every request takes.
	var buf [192]byte
	var names [6]string
	var ends [6]int
	b, n := buf[:0], 0
	add := func(name string) {
		names[n], ends[n] = name, len(b)
		n++
	}
	if !d.Allowed {
		b = strconv.AppendInt(b, d.RetryAfter, 10)
		add("Retry-After")
	}
	if d.Window != 0 {
		b = strconv.AppendInt(b, d.Limit, 10)
		add("X-Ratelimit-Limit")
		b = strconv.AppendInt(b, d.Remaining, 10)
		add("X-Ratelimit-Remaining")
		b = strconv.AppendInt(b, d.Reset, 10)
		add("X-Ratelimit-Reset")
		if d.MinuteRPM > 0 {
			b = limPolicyItem(b, "minute", d.MinuteRPM, 60)
		}
		if d.DayRPD > 0 {
			if d.MinuteRPM > 0 {
				b = append(b, ", "...)
			}
			b = limPolicyItem(b, "day", d.DayRPD, 86400)
		}
		add("Ratelimit-Policy")
		name := "minute"
		if d.Window == 86400 {
			name = "day"
		}
		// The draft wants t to name the same instant as Retry-After when both are sent.
		t := d.ResetIn
		if !d.Allowed {
			t = d.RetryAfter
		}
		b = append(append(append(b, '"'), name...), `";r=`...)
		b = append(strconv.AppendInt(b, d.Remaining, 10), ";t="...)
		b = strconv.AppendInt(b, t, 10)
		add("Ratelimit")
	}
	if n == 0 {
		return
	}
	all := string(b)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = all[start:ends[i]]
		h[names[i]] = vals[i : i+1 : i+1]
		start = ends[i]
	}
}

func limPolicyItem(b []byte, name string, q, w int64) []byte {
	b = append(append(append(b, '"'), name...), `";q=`...)
	b = append(strconv.AppendInt(b, q, 10), ";w="...)
	return strconv.AppendInt(b, w, 10)
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

func (s *limKeyShard) dayString(day int32) string {
	c := &s.days[day&1]
	if c.s == "" || c.day != day {
		c.day, c.s = day, time.Unix(int64(day)*86400, 0).UTC().Format(time.DateOnly)
	}
	return c.s
}

func limAddrKeyOf(a netip.Addr) limAddrKey {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return limAddrKey{lo: 1<<32 | uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16() // zeros for the invalid Addr, which then shares one bucket
	return limAddrKey{hi: binary.BigEndian.Uint64(b[:8])}
}

func (k limAddrKey) hash() uint64 { return limMix(k.hi ^ limMix(k.lo)) }

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

// limitRequests applies the rate limits to every request under /v1/, before
// routing: a request with a usable key counts against that key (and its id,
// noted on the request log's recorder, lets it past requireKey), any other
// against its client address. Every response under /v1/ gets the binding
// window's headers; a refused request gets 429 and goes no further.
func limitRequests(lim *limiter, keys *keyring, trustProxy bool, m *serverMetrics, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		var d decision
		k := keys.authenticate(r)
		if k != nil {
			if rec := recorderOf(w); rec != nil {
				rec.keyID = k.ID
			}
			d = lim.allowKey(k.ID, k.RPM, k.RPD)
		} else {
			d = lim.allowAddr(clientAddr(r, trustProxy))
		}
		d.setHeaders(w.Header())
		if !d.Allowed {
			m.refused(d.Code)
			writeError(w, r, refusal(d))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusal is the Error of a refused request.
func refusal(d decision) *apiError {
	switch d.Code {
	case "quota_exceeded":
		return errorf(d.Code,
			"the daily quota of %d requests is used up; it resets at 00:00 UTC, in %d s", d.Limit, d.RetryAfter)
	case "key_banned":
		return errorf(d.Code,
			"this key is banned for %d s for sending too many requests while rate limited", d.RetryAfter)
	}
	return errorf("rate_limited",
		"rate limit of %d requests per minute exceeded; retry after %d s", d.Limit, d.RetryAfter)
}

// clientAddr is the address a request's rate limit is kept by: the
// connection's peer, or with trustProxy the last address in
// X-Forwarded-For, the one the proxy in front of us appended (earlier ones
// are the client's word and can be forged).
func clientAddr(r *http.Request, trustProxy bool) netip.Addr {
	if trustProxy {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			last := xff[len(xff)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			last = strings.TrimSpace(last)
			if a, err := netip.ParseAddr(last); err == nil {
				return a
			}
			// Some proxies append the client's port too: "1.2.3.4:5678",
			// "[2001:db8::1]:5678".
			if ap, err := netip.ParseAddrPort(last); err == nil {
				return ap.Addr()
			}
		}
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}

// upkeep keeps the limiter's state in the database until ctx ends: it
// writes the day counts once a second and the bans as they come, and sweeps
// idle state every sweepEvery. On the way out it writes what is left.
func upkeep(ctx context.Context, lim *limiter, store *Store, bans *banQueue, m *serverMetrics, logger *slog.Logger) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var buf []dayDelta
	flush := func(ctx context.Context) {
		buf = lim.takeDayDeltas(buf[:0])
		if len(buf) == 0 {
			return
		}
		if err := store.AddDayCounts(ctx, buf); err != nil {
			m.dbErrors.Inc()
			lim.returnDayDeltas(buf)
			logger.Error("write day counts; will retry", "err", err)
		}
	}
	var unwritten []keyBan
	writeBan := func(ctx context.Context, b keyBan) bool {
		if err := store.SetKeyBan(context.WithoutCancel(ctx), b.id, b.until); err != nil {
			m.dbErrors.Inc()
			unwritten = append(unwritten, b)
			logger.Error("store ban; will retry", "key", b.id, "err", err)
			return false
		}
		return true
	}
	// A ban that could not be written is retried every tick and on the way
	// out, while the limiter still holds it as it was: not once it has
	// ended, or "keys unban" lifted it meanwhile (a retry must not undo that).
	retryBans := func(ctx context.Context) {
		bs := unwritten
		unwritten = nil
		for i, b := range bs {
			if lim.banOf(b.id).Equal(b.until) && b.until.After(time.Now()) && !writeBan(ctx, b) {
				// The database still fails: keep the rest for the next
				// tick rather than wait out a busy timeout for each.
				unwritten = append(unwritten, bs[i+1:]...)
				return
			}
		}
	}
	// newBans writes the bans imposed since the last call, in order, until
	// one fails; the rest wait for the next tick's retryBans, as do all of
	// them while earlier ones wait there.
	var fresh []keyBan
	newBans := func(ctx context.Context) {
		fresh = bans.take(fresh[:0])
		for _, b := range fresh {
			m.bans.Inc()
			logger.Warn("key banned", "key", b.id, "until", b.until.Format(time.RFC3339))
		}
		if len(unwritten) > 0 {
			unwritten = append(unwritten, fresh...)
			return
		}
		for i, b := range fresh {
			if !writeBan(ctx, b) {
				unwritten = append(unwritten, fresh[i+1:]...)
				return
			}
		}
	}
	for ticks := 1; ; {
		select {
		case <-ctx.Done():
			final := context.WithoutCancel(ctx)
			newBans(final)
			retryBans(final)
			flush(final)
			return
		case <-bans.wake:
			newBans(ctx)
		case <-tick.C:
			retryBans(ctx)
			flush(ctx)
			if ticks++; ticks%sweepEvery == 0 {
				lim.sweep()
			}
		}
	}
}

// sweepEvery is how many upkeep ticks (seconds) pass between sweeps.
const sweepEvery = 10

// keyBan is a ban the limiter imposed, on its way to the database.
type keyBan struct {
	id    int64
	until time.Time
}

// banQueue carries the bans the limiter imposes to upkeep. It keeps every
// one, however many come while upkeep waits for the database (a channel
// would have to drop them once full, and a dropped ban would not survive a
// restart). It holds at most one ban per key and ban duration.
type banQueue struct {
	mu   sync.Mutex
	bans []keyBan
	wake chan struct{} // signalled when bans is no longer empty
}

func newBanQueue() *banQueue {
	return &banQueue{wake: make(chan struct{}, 1)}
}

func (q *banQueue) push(b keyBan) {
	q.mu.Lock()
	q.bans = append(q.bans, b)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take appends the queued bans to dst, oldest first, and empties the queue.
func (q *banQueue) take(dst []keyBan) []keyBan {
	q.mu.Lock()
	defer q.mu.Unlock()
	dst = append(dst, q.bans...)
	clear(q.bans)
	q.bans = q.bans[:0]
	return dst
}
