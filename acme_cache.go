// acme_cache.go owns what HTTPS from an ACME CA keeps in the database:
// autocert's Cache over the Store's acme_cache rows, and the issuer lock
// that makes the instances on one database take turns at asking the CA,
// so that they make one order and share its certificate.

package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/crypto/acme/autocert"
)

// acmeMaxHold bounds how long an attempt keeps the issuer lock: as long as
// autocert's renewal may take (its context's 10 minutes).
const acmeMaxHold = 10 * time.Minute

// acmeCache is autocert's Cache on the database, for one CA (rows are
// keyed by its directory URL too). It also decides who asks the CA.
//
// How one instance at a time issues or renews. autocert asks the CA only
// after its Cache had no usable certificate: GetCertificate (our start,
// acme.go) reads a name's key once and orders on a miss; a renewal timer
// (renewal.go's do) reads it once and orders unless what it read is not
// due yet, or after any error. So Get, for the key of a listed name whose
// row is missing, unreadable, expired or due (renewAt), takes the issuer
// lock and reads again: another instance may have stored a fresh
// certificate meanwhile, which it returns at once, unlocking. Otherwise it
// keeps the lock (a "hold") and returns what it read, and autocert orders,
// alone. The hold ends with the Put of that key (the new certificate is in
// the database before the next instance reads it), or when the attempt's
// context ends (autocert cancels it as the attempt returns, ordered or
// not: a failed order unlocks at once), or after acmeMaxHold.
//
// The lock is a turn within the instance (one holder at a time: several
// names and renewal timers wait for it, each within its attempt's
// context), then the Store's ACMELock across instances (PostgreSQL's
// advisory lock; nothing on SQLite, which one process serves). It is not
// re-entrant, and need not be: an attempt reads its certificate's key
// once, and the account key is made beforehand under a turn of its own
// (acmeCerts.accountKey), so no attempt waits for the turn it holds. Get
// never returns without the lock when it must take it, but when its
// context ended or the server stops: a renewal then orders with an ended
// context, or through a stopped transport, and its requests fail at once.
//
// Tokens of challenges (HTTP-01's answers, TLS-ALPN-01's certificates) go
// through unlocked: every instance reads them, so that whichever one the
// CA reaches answers.
type acmeCache struct {
	store acmeStore
	dir   string          // the CA's directory URL
	names map[string]bool // the listed names: their keys are certificates'
	now   func() time.Time
	log   *slog.Logger

	turn   chan struct{} // the instance's turn at the issuer lock
	closed chan struct{}
	// stopped ends when closed is: the Store's lock stops waiting then.
	stopped context.Context
	close   func()

	mu     sync.Mutex
	hold   *acmeHold      // the turn's holder, waiting for its Put
	puts   map[string]int // Puts of each name's certificate, by this instance
	served map[string]bool
	// caRequests counts the requests sent to the CA; renewalFailed is
	// called when a renewal of a served name asked the CA and ended
	// without a certificate.
	caRequests    func() int64
	renewalFailed func(name string)
}

// acmeHold is an attempt holding the issuer lock until it stores key.
type acmeHold struct {
	key      string
	stored   chan struct{}
	requests int64 // caRequests when it began
}

func newACMECache(store acmeStore, dir string, names []string, now func() time.Time, logger *slog.Logger) *acmeCache {
	c := &acmeCache{store: store, dir: dir, names: map[string]bool{}, now: now, log: logger,
		turn: make(chan struct{}, 1), closed: make(chan struct{}), puts: map[string]int{}, served: map[string]bool{},
		caRequests: func() int64 { return 0 }, renewalFailed: func(string) {}}
	stopped, stop := context.WithCancel(context.Background())
	c.stopped = stopped
	c.close = sync.OnceFunc(func() { close(c.closed); stop() })
	for _, n := range names {
		c.names[n] = true
	}
	return c
}

func (c *acmeCache) Get(ctx context.Context, key string) ([]byte, error) {
	data, err := c.get(ctx, key)
	if !c.names[key] || (err == nil && c.renewAt(data).After(c.now())) {
		return data, err
	}
	unlock, lerr := c.lock(ctx)
	if lerr != nil {
		return nil, lerr
	}
	data, err = c.get(ctx, key)
	if err == nil && c.renewAt(data).After(c.now()) {
		unlock() // another instance stored it meanwhile
		return data, nil
	}
	// Missing, due, or not readable: this attempt may ask the CA, alone. A
	// renewal that finds the certificate not due after all (autocert's
	// jitter) sends the CA nothing; one that failed did.
	h := &acmeHold{key: key, stored: make(chan struct{}), requests: c.caRequests()}
	c.mu.Lock()
	c.hold = h
	c.mu.Unlock()
	go func() {
		t := time.NewTimer(acmeMaxHold)
		defer t.Stop()
		stored := false
		select {
		case <-h.stored:
			stored = true
		case <-ctx.Done():
		case <-t.C:
		case <-c.closed:
		}
		c.mu.Lock()
		if c.hold == h {
			c.hold = nil
		}
		failed := !stored && c.served[key] && c.caRequests() != h.requests
		c.mu.Unlock()
		unlock()
		if failed {
			c.renewalFailed(key)
		}
	}()
	return data, err
}

func (c *acmeCache) Put(ctx context.Context, key string, data []byte) error {
	err := c.store.ACMEPut(ctx, c.dir, key, data)
	c.mu.Lock()
	if h := c.hold; h != nil && h.key == key {
		c.hold = nil
		close(h.stored)
	}
	renewed := false
	if c.names[key] && err == nil {
		c.puts[key]++
		renewed = c.served[key]
	}
	c.mu.Unlock()
	if renewed {
		c.log.Info("certificate renewed and stored in the database", "name", key)
	}
	return err
}

func (c *acmeCache) Delete(ctx context.Context, key string) error {
	return c.store.ACMEDelete(ctx, c.dir, key)
}

// get reads key, a missing one as autocert's ErrCacheMiss.
func (c *acmeCache) get(ctx context.Context, key string) ([]byte, error) {
	select {
	case <-c.closed:
		return nil, errClosing
	default:
	}
	data, err := c.store.ACMEGet(ctx, c.dir, key)
	if errors.Is(err, errNotFound) {
		return nil, autocert.ErrCacheMiss
	}
	return data, err
}

// lock takes the instance's turn and then the Store's issuer lock, waiting
// until ctx ends: a database that does not answer is tried again every
// second meanwhile.
func (c *acmeCache) lock(ctx context.Context) (func(), error) {
	// Looked at first: a select with several ready cases picks one at
	// random, and a renewal timer that fires after serve (autocert's
	// outlive it) must not take the lock of a database it left.
	select {
	case <-c.closed:
		return nil, errClosing
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, errClosing
	}
	// The Store's wait ends with serve too, not only with ctx: autocert's
	// attempt, whose context ctx is, lasts up to 10 minutes after serve
	// returned, and PostgreSQL's wait holds a connection of its own.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.stopped, cancel)()
	warned := false
	for {
		unlock, err := c.store.ACMELock(lctx)
		if err == nil {
			return sync.OnceFunc(func() { unlock(); <-c.turn }), nil
		}
		if lctx.Err() != nil {
			<-c.turn
			return nil, err
		}
		if !warned {
			c.log.Warn("the ACME issuer lock cannot be taken; trying again every second", "err", err)
			warned = true
		}
		select {
		case <-time.After(time.Second):
			continue
		case <-ctx.Done():
		case <-c.closed:
		}
		<-c.turn
		return nil, err
	}
}

// putsOf returns how many certificates for name this instance stored.
func (c *acmeCache) putsOf(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts[name]
}

// serve marks name's certificate as served: what is stored for it from now
// on is a renewal.
func (c *acmeCache) serve(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.served[name] = true
}

// renewAt is the earliest moment autocert renews the certificate in data
// (a third of its lifetime or 30 days before its end, whichever is less,
// less autocert's jitter, which may be 0), a second early, so that Get
// never returns one that autocert then renews without the lock. Data that
// does not parse is due now.
func (c *acmeCache) renewAt(data []byte) time.Time {
	leaf := acmeLeaf(data)
	if leaf == nil {
		return time.Time{}
	}
	return leaf.NotAfter.Add(-acmeRenewBefore(leaf) - time.Second)
}

// acmeRenewBefore is autocert's renewal threshold for leaf (Manager's
// RenewBefore unset): a third of its lifetime, at most 30 days.
func acmeRenewBefore(leaf *x509.Certificate) time.Duration {
	return min(leaf.NotAfter.Sub(leaf.NotBefore)/3, 30*24*time.Hour)
}

// acmeLeaf returns the first certificate of a cached certificate (autocert
// stores the private key, then the chain, in PEM), or nil.
func acmeLeaf(data []byte) *x509.Certificate {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil
		}
		if b.Type == "CERTIFICATE" {
			leaf, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil
			}
			return leaf
		}
	}
}
