// keyless.go owns the bounds on what a client without a key can make the
// database do (DECISIONS.md section 17): ACME's challenge lookups (HTTP-01
// in acme.go's challenges, TLS-ALPN-01 here) go through the limit of
// requests without a key of their client address, and one that found
// nothing is remembered for a second per address; /readyz's view of the
// database is at most a second old however often it is asked, and comes
// within readyWait however slow the database is.

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
	"time"
)

// keylessFor is how long a lookup that found nothing is remembered, and
// how old /readyz's state of the database may be.
const keylessFor = time.Second

// missMemoryMax bounds the lookups remembered at once.
const missMemoryMax = 16_384

// missMemory remembers for keylessFor the lookups that found nothing, by
// client address (an IPv4 address or an IPv6 /64, as the limiter counts
// them) and what was looked up (an HTTP-01 token's path, a TLS-ALPN-01
// name), so that an address that asks again and again reads the database
// once a second. It is per address so that a flood from one address
// cannot make the CA's own lookup, from another, miss what was stored
// meanwhile. What was looked up is kept as a hash (a path may be long).
// When it is full, what has expired goes, and if nothing has, all of it:
// it saves reads that the limiter bounds anyway.
type missMemory struct {
	now  func() time.Time
	seed maphash.Seed
	mu   sync.Mutex
	m    map[missKey]int64 // when (Unix nanoseconds) the lookup found nothing
}

type missKey struct {
	addr limAddrKey
	what uint64
}

func newMissMemory(now func() time.Time) *missMemory {
	return &missMemory{now: now, seed: maphash.MakeSeed(), m: map[missKey]int64{}}
}

func (mm *missMemory) key(addr netip.Addr, what string) missKey {
	return missKey{limAddrKeyOf(addr), maphash.String(mm.seed, what)}
}

// fresh reports whether a miss noted at at is still remembered at now (a
// clock set back forgets it).
func missFresh(at, now int64) bool { return now >= at && now-at < int64(keylessFor) }

// missed reports whether a lookup of what from addr found nothing less
// than keylessFor ago.
func (mm *missMemory) missed(addr netip.Addr, what string) bool {
	k, now := mm.key(addr, what), mm.now().UnixNano()
	mm.mu.Lock()
	defer mm.mu.Unlock()
	at, ok := mm.m[k]
	if ok && !missFresh(at, now) {
		delete(mm.m, k)
		return false
	}
	return ok
}

// remember notes that a lookup of what from addr found nothing.
func (mm *missMemory) remember(addr netip.Addr, what string) {
	k, now := mm.key(addr, what), mm.now().UnixNano()
	mm.mu.Lock()
	defer mm.mu.Unlock()
	if len(mm.m) >= missMemoryMax {
		for k, at := range mm.m {
			if !missFresh(at, now) {
				delete(mm.m, k)
			}
		}
		if len(mm.m) >= missMemoryMax {
			clear(mm.m)
		}
	}
	mm.m[k] = now
}

// challengeCertificate answers a TLS-ALPN-01 hello for d from the
// database, within the limit of requests without a key of its address; a
// hello over it is refused, and so is one whose address found no
// certificate for d in the last second, without a read.
func (c *acmeCerts) challengeCertificate(hello *tls.ClientHelloInfo, d *acmeDomain) (*tls.Certificate, error) {
	addr := connAddr(hello.Conn)
	if dec, ok := c.allowChallenge(addr); !ok {
		return nil, fmt.Errorf("TLS-ALPN-01 hello for %s refused: over the limit of requests without a key, retry in %d s", d.name, dec.RetryAfter)
	}
	if c.misses.missed(addr, d.name) {
		return nil, fmt.Errorf("no TLS-ALPN-01 challenge certificate for %s (none a second ago either)", d.name)
	}
	cert, err := c.reader.GetCertificate(hello)
	if err != nil {
		c.misses.remember(addr, d.name)
	}
	return cert, err
}

// allowChallenge counts a challenge lookup from addr against its limit of
// requests without a key, and a refusal in the metrics.
func (c *acmeCerts) allowChallenge(addr netip.Addr) (decision, bool) {
	if c.limits == nil {
		return decision{Allowed: true}, true
	}
	d := c.limits.allowAddr(addr)
	if !d.Allowed && c.metrics != nil {
		c.metrics.refused(d.Code)
	}
	return d, d.Allowed
}

// connAddr is the address of c's peer, or the zero Addr.
func connAddr(c net.Conn) netip.Addr {
	if c == nil {
		return netip.Addr{}
	}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr()
	}
	ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	return ap.Addr()
}

// readyWait bounds how long /readyz waits for a ping under way: past it,
// it answers from the state kept (DECISIONS.md section 21: within 100 ms,
// also while the primary does not answer).
const readyWait = 80 * time.Millisecond

// errNotAnswering is /readyz's state while a ping has gone unanswered for
// keylessFor: a frozen primary is not ready.
var errNotAnswering = fmt.Errorf("%w: the database has not answered a ping for %v", errUnavailable, keylessFor)

// readiness is /readyz's view of the database, shared by the API and admin
// listeners: one ping at a time, its answer kept for keylessFor, so that
// however often /readyz is asked the database sees about one ping a second
// from it, and a failure (or the return) shows within a second and the
// ping's own wait, or a second more when the ping goes unanswered.
// Before the first ping's answer the state is the store's opening: ready.
type readiness struct {
	store healthStore
	now   func() time.Time

	mu      sync.Mutex
	at      time.Time     // when the last finished ping began; zero: none yet
	err     error         // its answer
	pinging chan struct{} // closed when the ping under way ends; nil: none
	since   time.Time     // when it began, by the wall clock (not now: a test's clock may stand)
}

func newReadiness(store healthStore, now func() time.Time) *readiness {
	return &readiness{store: store, now: now}
}

// check returns the database's state as of at most keylessFor ago: the
// last ping's answer, or a new ping's when it comes within readyWait; else
// the last state, or errNotAnswering once the ping under way is
// keylessFor old. The ping runs on its own: a request that goes away or
// stops waiting does not end it, and the requests that ask meanwhile
// share it.
func (rd *readiness) check(ctx context.Context) error {
	rd.mu.Lock()
	if age := rd.now().Sub(rd.at); !rd.at.IsZero() && age >= 0 && age < keylessFor {
		err := rd.err
		rd.mu.Unlock()
		return err
	}
	ch := rd.pinging
	if ch == nil {
		ch = make(chan struct{})
		rd.pinging, rd.since = ch, time.Now()
		go rd.ping(ch, rd.now())
	}
	rd.mu.Unlock()
	wait := time.NewTimer(readyWait)
	defer wait.Stop()
	select {
	case <-ch:
	case <-wait.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.pinging == ch && time.Since(rd.since) >= keylessFor {
		return errNotAnswering
	}
	return rd.err
}

// ping asks the store, and keeps its answer as the state as of start.
func (rd *readiness) ping(ch chan struct{}, start time.Time) {
	var err error
	defer func() {
		if p := recover(); p != nil { // on its own goroutine: no recoverPanics
			err = fmt.Errorf("%w: the ping panicked: %v", errUnavailable, p)
		}
		rd.mu.Lock()
		rd.at, rd.err, rd.pinging = start, err, nil
		rd.mu.Unlock()
		close(ch)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = rd.store.Ready(ctx)
}
