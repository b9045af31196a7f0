// limits_redis_tend.go owns the upkeep of the leases of --redis
// (limits_redis_lease.go): renewing those of keys in use, giving back those
// of keys gone quiet, forgetting idle keys; and the round-trip times that
// size a lease.

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"
)

// redisInstanceName returns n random bytes in hex: an instance's name for
// its leases.
func redisInstanceName(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// observe takes in a call's time: into rtt, a moving average that rises
// at once (a lease must outlast slow calls) and falls slowly, and rttMin,
// the quickest calls' time, which falls at once and rises slowly (a near
// Redis stays near through a slow moment).
func (r *redisLimiter) observe(took time.Duration) {
	t := int64(took)
	if m := r.rttMin.Load(); t < m || m == 0 {
		r.rttMin.Store(t)
	} else {
		r.rttMin.Store(m + (t-m)/64)
	}
	if old := r.rtt.Load(); old == 0 {
		r.rtt.Store(t)
	} else if t > old {
		r.rtt.Store((old + t) / 2)
	} else {
		r.rtt.Store(old + (t-old)/16)
	}
}

// tendLeases, every redisLeaseTick until ctx ends, renews the leases of
// keys in use that near their deadline, gives back those of keys gone
// quiet, and forgets keys idle for long.
func (r *redisLimiter) tendLeases(ctx context.Context) {
	tick := time.NewTicker(redisLeaseTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !r.up.Load() {
			continue
		}
		r.tendOnce(r.limiter.now().UnixNano())
	}
}

// tendOnce is one round of tendLeases at now.
func (r *redisLimiter) tendOnce(now int64) {
	for i := range r.leases.shards {
		s := &r.leases.shards[i]
		s.mu.Lock()
		for id, l := range s.m {
			l.mu.Lock()
			var la *redisLeaseArgs
			switch {
			case l.inflight:
			case l.held > 0 && now-l.lastReq >= int64(redisLeaseIdle):
				l.rate = 0 // quiet: leaseArgs gives the lease back
				la = r.leaseArgs(l, now, false, true)
			case l.held > 0 && l.deadline-now < r.renewBefore():
				la = r.leaseArgs(l, now, false, false)
			case l.held == 0 && l.extra == 0 && now-l.lastReq >= int64(redisLeaseForget):
				delete(s.m, id)
			}
			rpm, rpd := l.rpm, l.rpd
			l.mu.Unlock()
			if la != nil {
				r.background(id, l, rpm, rpd, la)
			}
		}
		s.mu.Unlock()
	}
}
