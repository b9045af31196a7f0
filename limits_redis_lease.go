// limits_redis_lease.go owns the leases of --redis (DECISIONS.md section
// 23): per key, tokens of the shared minute bucket and day quota that this
// instance took ahead from Redis and spends in memory, topped up in the
// background before they run out and given back when the key goes quiet;
// the key's shared state as last seen, which the headers and a request
// whose wait for Redis timed out are decided from; and the request path
// that uses them. A lease is topped up whenever a request spent from it
// and no call for it is on its way: a call takes a round trip, in which
// the key spends half its lease, so the lease runs out only when the
// key's rate jumps.

package main

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// redisLeaseLife is a lease's expiry in Redis (the script allows at
	// most a second): a dead instance's tokens come back within it.
	redisLeaseLife = time.Second
	// redisLeaseMargin: an instance stops spending a lease this long
	// before the life it counts from when its call was sent (Redis counts
	// it from when the call ran, later).
	redisLeaseMargin = 50 * time.Millisecond
	// redisLeaseIdle: a key that sent nothing for this long gives its
	// lease back; one idle for redisLeaseForget is forgotten.
	redisLeaseIdle   = 300 * time.Millisecond
	redisLeaseForget = 10 * time.Second
	redisLeaseTick   = 100 * time.Millisecond
	// redisLateCall is how long a call may take after its request stopped
	// waiting (--redis-timeout) before Redis counts as not answering.
	redisLateCall = time.Second
	// redisNearRTT: a Redis whose quickest round trips take less is near,
	// and leases nothing: every request is decided there, as before
	// leases (a lease would only refuse other instances early).
	redisNearRTT = 2 * time.Millisecond
	// redisRateWindow is the window a key's recent rate is measured over.
	redisRateWindow = 250 * time.Millisecond
)

// redisLease is what this instance holds of one key's lease and knows of
// the key's shared state. Its fields are guarded by mu.
type redisLease struct {
	mu       sync.Mutex
	rpm, rpd int64 // the plan of held and seen
	held     int64 // tokens this instance may spend before deadline
	deadline int64 // local Unix ns
	inflight bool  // a call that carries the lease is on its way
	// The key's recent rate here, requests a second, measured over windows
	// of redisRateWindow (or 8 requests) from winStart; lastReq is its last
	// request.
	rate                        float64
	winStart, winCount, lastReq int64
	// seen is the shared state after the last call that answered, at the
	// local time seenAt; extra counts the requests this instance admitted
	// beyond it (timed-out waits decided from it) whose calls had not yet
	// answered.
	seen    redisStep
	seenAt  int64
	hasSeen bool
	extra   int64
}

// redisLeases holds the leases by key, and their metrics.
type redisLeases struct {
	shards [64]struct {
		mu sync.Mutex
		m  map[int64]*redisLease
		_  [48]byte
	}
	local, waited, timedOut, granted, returned atomic.Int64
}

// of returns key id's lease, adding an empty one if there is none.
func (ls *redisLeases) of(id int64) *redisLease {
	s := &ls.shards[limKeyHash(id)>>58]
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.m[id]
	if l == nil {
		if s.m == nil {
			s.m = map[int64]*redisLease{}
		}
		l = &redisLease{}
		s.m[id] = l
	}
	return l
}

// allowKey decides a request of key id: from its lease, in memory, when
// the lease covers it; otherwise in Redis at once; and with the local
// limiter while Redis does not answer.
func (r *redisLimiter) allowKey(id int64, rpm, rpd int64) decision {
	if !r.up.Load() {
		return r.limiter.allowKey(id, rpm, rpd)
	}
	rpm = max(0, min(rpm, limMaxRPM))
	rpd = max(0, rpd)
	l := r.leases.of(id)
	now := r.limiter.now().UnixNano()
	l.mu.Lock()
	l.note(now, rpm, rpd)
	if !r.noLease && l.held > 0 && now < l.deadline {
		l.held--
		d := l.fromSeen(now, rpm, rpd, true)
		var la *redisLeaseArgs
		if !l.inflight && (l.held < r.wantOf(l, rpm) || l.deadline-now < r.renewBefore()) {
			la = r.leaseArgs(l, now, false, false)
		}
		l.mu.Unlock()
		r.limiter.countAllowed(id)
		r.leases.local.Add(1)
		if la != nil {
			r.background(id, l, rpm, rpd, la)
		}
		return d
	}
	var la *redisLeaseArgs
	if !r.noLease && !l.inflight {
		la = r.leaseArgs(l, now, true, false)
	}
	l.mu.Unlock()
	d := r.decideInRedis(id, l, rpm, rpd, la)
	d.ViaRedis = true
	return d
}

// note counts a request at now in the key's rate; a plan that changed
// voids what the lease held and saw.
func (l *redisLease) note(now, rpm, rpd int64) {
	if rpm != l.rpm || rpd != l.rpd {
		l.rpm, l.rpd, l.held, l.hasSeen, l.extra = rpm, rpd, 0, false, 0
	}
	if now-l.lastReq >= int64(redisLeaseIdle) {
		l.rate, l.winStart, l.winCount = 0, now, 0 // quiet until now: measured afresh
	}
	l.lastReq = now
	l.winCount++
	// A window ends after redisRateWindow, or sooner once it holds 8
	// requests: a key that starts sending gets its lease within a few.
	if el := now - l.winStart; el >= int64(redisRateWindow) || l.winCount >= 8 && el > 0 {
		rate := float64(l.winCount) * 1e9 / float64(el)
		if el < 4*int64(redisRateWindow) && l.rate > rate {
			rate = (rate + l.rate) / 2 // down slowly, up at once
		}
		l.rate, l.winStart, l.winCount = rate, now, 0
	}
}

// wantOf is the lease key l wants: none on a near Redis (redisNearRTT),
// where every request is decided there as before leases; else what it
// spends here in two round trips to Redis at its recent rate, rounded
// down, and then one more
// (the lease is topped up to it when a call is sent, and spends about
// half of it while the call travels); at most an eighth of the bucket's
// capacity (the script also caps it by the day left).
func (r *redisLimiter) wantOf(l *redisLease, rpm int64) int64 {
	if rpm == 0 && l.rpd == 0 || r.rttMin.Load() < int64(redisNearRTT) && r.fixedWant == 0 {
		return 0
	}
	w := int64(l.rate * 2 * float64(r.rtt.Load()) / 1e9)
	if w > 0 {
		w++ // a token of slack: the round trips vary
	}
	if r.fixedWant > 0 {
		w = r.fixedWant
	}
	if rpm > 0 {
		w = min(w, rpm/8)
	}
	return max(0, w)
}

// renewBefore is how long before its deadline a lease in use is renewed.
func (r *redisLimiter) renewBefore() int64 {
	return max(int64(200*time.Millisecond), 4*r.rtt.Load())
}

// leaseArgs marks l's lease as on its way in a call sent at now and
// returns what the call says of it; nil when there is nothing to say (no
// lease held or wanted). A lease that is not wanted any more is given
// back: what it held is spent no more from here.
func (r *redisLimiter) leaseArgs(l *redisLease, now int64, take, release bool) *redisLeaseArgs {
	want := r.wantOf(l, l.rpm)
	if release {
		want = 0
	}
	if now >= l.deadline {
		l.held = 0 // expired here; Redis drops it within the margin
	}
	if want == 0 && l.held == 0 {
		return nil
	}
	la := &redisLeaseArgs{take: take, held: l.held, want: want, sentAt: now}
	if want == 0 {
		l.held = 0
	}
	l.inflight = true
	return la
}

// redisCall is one call of the script for a request, which the request
// may stop waiting for.
type redisCall struct {
	res      redisStep
	err      error
	done     chan struct{}
	answered bool // under the lease's mu: res and err are set
	admitted bool // under the lease's mu: the request timed out and was admitted from the state last seen
}

// decideInRedis decides a request that its lease could not cover in Redis,
// waiting at most --redis-timeout; la, when not nil, carries the lease.
func (r *redisLimiter) decideInRedis(id int64, l *redisLease, rpm, rpd int64, la *redisLeaseArgs) decision {
	r.leases.waited.Add(1)
	count, day, ban := r.limiter.known(id)
	c := &redisCall{done: make(chan struct{})}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), max(redisLateCall, r.timeout))
		defer cancel()
		start := time.Now()
		res, err := r.stepIn(ctx, r.keyName('k', strconv.FormatInt(id, 10)), rpm, rpd, count, day, ban, r.banThreshold, la)
		r.settle(id, l, rpm, rpd, la, c, res, err, time.Since(start))
		close(c.done)
	}()
	t := time.NewTimer(r.timeout)
	select {
	case <-c.done:
		t.Stop()
	case <-t.C:
	}
	l.mu.Lock()
	if !c.answered {
		// The wait timed out: decided from the state last seen, never
		// beyond it. The call goes on, and counts the request in Redis.
		if l.hasSeen && l.rpm == rpm && l.rpd == rpd {
			d := l.fromSeen(r.limiter.now().UnixNano(), rpm, rpd, false)
			if d.Allowed {
				c.admitted = true
				l.extra++
			}
			l.mu.Unlock()
			r.leases.timedOut.Add(1)
			if d.Allowed {
				r.limiter.countAllowed(id)
			}
			return d
		}
		l.mu.Unlock()
		r.leases.timedOut.Add(1)
		return r.limiter.allowKey(id, rpm, rpd) // nothing seen yet: as section 8
	}
	res, err := c.res, c.err
	var d decision
	if err == nil && !res.bannedNow && res.ban == 0 {
		d = l.fromStep(res, rpm, rpd)
	}
	l.mu.Unlock()
	if err != nil {
		return r.limiter.allowKey(id, rpm, rpd)
	}
	switch {
	case res.bannedNow:
		until := time.Unix(0, res.ban).UTC()
		r.limiter.setBan(id, until)
		if r.onBan != nil {
			r.onBan(id, until)
		}
		return limBanned(res.ban, res.now, rpm, rpd)
	case res.ban > 0:
		return limBanned(res.ban, res.now, rpm, rpd)
	case res.allowed:
		r.limiter.countAllowed(id)
	}
	return d
}

// settle takes in the answer of a call for key id (err: none came): the
// state seen, the lease, the round trip's time; a call that failed marks
// Redis down.
func (r *redisLimiter) settle(id int64, l *redisLease, rpm, rpd int64, la *redisLeaseArgs, c *redisCall, res redisStep, err error, took time.Duration) {
	if err != nil {
		r.down(err)
	} else {
		r.observe(took)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c != nil {
		c.res, c.err, c.answered = res, err, true
		if c.admitted {
			// The call is over: it counted the request in Redis (in this
			// state and any later one), or failed and never will.
			l.extra = max(0, l.extra-1)
		}
	}
	if la != nil {
		l.inflight = false
	}
	if err != nil || l.rpm != rpm || l.rpd != rpd {
		return
	}
	if !l.hasSeen || res.now >= l.seen.now {
		l.seen, l.seenAt, l.hasSeen = res, r.limiter.now().UnixNano(), true
	}
	if la == nil {
		return
	}
	if res.code == 3 {
		l.held = 0 // a banned key's lease is void
		return
	}
	if la.want == 0 && res.alive {
		r.leases.returned.Add(la.held)
	}
	if res.alive {
		l.held += res.granted
	} else {
		l.held = res.granted
	}
	r.leases.granted.Add(res.granted)
	l.deadline = la.sentAt + int64(redisLeaseLife-redisLeaseMargin)
}

// background sends a call for key id's lease alone, without waiting.
func (r *redisLimiter) background(id int64, l *redisLease, rpm, rpd int64, la *redisLeaseArgs) {
	f := func() {
		count, day, ban := r.limiter.known(id)
		ctx, cancel := context.WithTimeout(context.Background(), max(redisLateCall, r.timeout))
		defer cancel()
		start := time.Now()
		res, err := r.stepIn(ctx, r.keyName('k', strconv.FormatInt(id, 10)), rpm, rpd, count, day, ban, r.banThreshold, la)
		r.settle(id, l, rpm, rpd, la, nil, res, err, time.Since(start)) // take 0 never bans
	}
	if r.async != nil {
		r.async(f)
		return
	}
	go f()
}

// fromStep is the decision a fresh answer gives, with what the lease holds
// counted as the key's own: l.seen is res.
func (l *redisLease) fromStep(res redisStep, rpm, rpd int64) decision {
	b := res.bucket
	b.tokens = min(rpm*limTokenUnit, b.tokens+l.held*limTokenUnit)
	count := max(0, res.count-l.held)
	return keyDecision(res.now, rpm, rpd, b, count, res.day,
		res.allowed || rpm == 0 || res.bucket.tokens >= limTokenUnit,
		res.allowed || rpd == 0 || res.count < rpd)
}

// fromSeen decides a request at now (local) from the state last seen:
// its bucket refilled since (within its room beside the leases), less the
// requests admitted beyond it, plus what the lease holds. A request the
// lease paid for (leased) is allowed; any other is allowed only if that
// state, without the lease, still has a token and a unit of the day.
func (l *redisLease) fromSeen(now, rpm, rpd int64, leased bool) decision {
	s := l.seen
	nowR := s.now + min(max(0, now-l.seenAt), int64(time.Minute))
	tokens := s.bucket.tokens
	if rpm > 0 && l.hasSeen {
		if top := (rpm - s.leased) * limTokenUnit; tokens < top {
			tokens = min(top, tokens+(nowR-s.bucket.last)*rpm)
		}
	}
	tokens -= l.extra * limTokenUnit
	count := s.count + l.extra
	if !l.hasSeen {
		tokens, count = rpm*limTokenUnit, 0
	}
	if s.ban > nowR {
		return limBanned(s.ban, nowR, rpm, rpd)
	}
	minuteOK, dayOK := true, true
	if !leased {
		minuteOK = rpm == 0 || tokens >= limTokenUnit
		dayOK = rpd == 0 || count < rpd
	}
	b := limBucket{tokens: max(0, min(rpm*limTokenUnit, tokens+l.held*limTokenUnit)), last: nowR}
	if minuteOK && dayOK && !leased {
		b.tokens = max(0, b.tokens-limTokenUnit) // this request's token
		count++
	}
	return keyDecision(nowR, rpm, rpd, b, max(0, count-l.held), s.day, minuteOK, dayOK)
}

// setBan bans key id until the given time (the zero time lifts the ban);
// a ban voids the key's lease here.
func (r *redisLimiter) setBan(id int64, until time.Time) {
	r.limiter.setBan(id, until)
	if until.IsZero() {
		return
	}
	l := r.leases.of(id)
	l.mu.Lock()
	l.held = 0
	l.mu.Unlock()
}
