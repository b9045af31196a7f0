// limits_addrs.go owns the minute buckets of requests without a usable
// key, kept per client address (IPv6 per /64) and bounded in number.

package main

import (
	"encoding/binary"
	"net/netip"
	"sync"
)

// limAddrKey is an IPv4 address, or the /64 prefix of an IPv6 address.
type limAddrKey struct{ hi, lo uint64 }

type limAddrShard struct {
	mu  sync.Mutex
	t   map[limAddrKey]limBucket
	max int // addresses tracked at most
	_   [64]byte
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

// sweepAddrs forgets the addresses whose bucket is full again.
func (l *limiter) sweepAddrs(now int64) {
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

// trackedAddrs counts the addresses the limiter tracks.
func (l *limiter) trackedAddrs() int {
	n := 0
	for i := range l.addrs {
		l.addrs[i].mu.Lock()
		n += len(l.addrs[i].t)
		l.addrs[i].mu.Unlock()
	}
	return n
}
