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
// due yet. So Get, for the key of a listed name whose row is missing,
// unreadable, expired or due, takes the issuer lock and reads again:
// another instance may have stored a fresh certificate meanwhile, which it
// returns at once, unlocking. Otherwise it keeps the lock (a "hold") and
// returns what it read, and autocert orders: the hold ends with the Put of
// that key (the new certificate is in the database before the next
// instance reads), or when the attempt's context ends (autocert cancels
// it as the attempt returns, ordered or not: so a failed order unlocks at
// once), or after acmeMaxHold. (A row that cannot be read is treated as
// missing: a renewal orders after any error of Get, so it had better hold
// the lock.) The lock is a turn within the instance (one
// holder at a time: several names and renewal timers wait for it, each
// within its attempt's context) and the Store's ACMELock across instances
// (PostgreSQL's advisory lock; nothing on SQLite, which one process
// serves). An attempt reads a certificate's key once and the account key
// is made beforehand under its own turn (accountKey), so no attempt ever
// waits for the turn it holds. Get never returns without the lock when it
// must take it, except when its context ended: a renewal that got an
// error from Get orders anyway, and with an ended context its requests
// fail at once.
//
// Tokens of challenges (HTTP-01's answers, TLS-ALPN-01's certificates) go
// through unlocked: every instance reads them, so that whichever one the
// CA reaches answers.
type acmeCache struct {
	store Store
	dir   string          // the CA's directory URL
	names map[string]bool // the listed names: their keys are certificates'
	now   func() time.Time
	log   *slog.Logger

	turn   chan struct{} // the instance's turn at the issuer lock
	closed chan struct{}
	close  func()

	mu     sync.Mutex
	hold   *acmeHold      // the turn's holder, waiting for its Put
	puts   map[string]int // Puts of each name's certificate, by this instance
	served map[string]bool
	// renewalFailed is called when a renewal of a served name ended
	// without a certificate.
	renewalFailed func(name string)
}

// acmeHold is an attempt holding the issuer lock until it stores key.
type acmeHold struct {
	key    string
	stored chan struct{}
	due    bool // the CA had to be asked: what was stored was missing, expired or past any renewal time
}

func newACMECache(store Store, dir string, names []string, now func() time.Time, logger *slog.Logger) *acmeCache {
	c := &acmeCache{store: store, dir: dir, names: map[string]bool{}, now: now, log: logger,
		turn: make(chan struct{}, 1), closed: make(chan struct{}), puts: map[string]int{}, served: map[string]bool{}}
	c.close = sync.OnceFunc(func() { close(c.closed) })
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
	// Missing, due, or not readable (a renewal would order all the same):
	// this attempt may ask the CA, alone.
	h := &acmeHold{key: key, stored: make(chan struct{}), due: err != nil || !c.lastRenewAt(data).After(c.now())}
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
		failed := !stored && h.due && c.served[key] && c.renewalFailed != nil
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
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, errClosing
	}
	warned := false
	for {
		unlock, err := c.store.ACMELock(ctx)
		if err == nil {
			return sync.OnceFunc(func() { unlock(); <-c.turn }), nil
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

// lastRenewAt is the latest moment autocert renews it: past it, a renewal
// that stored nothing failed (before it, autocert may have found it not
// due yet, by its jitter).
func (c *acmeCache) lastRenewAt(data []byte) time.Time {
	leaf := acmeLeaf(data)
	if leaf == nil {
		return time.Time{}
	}
	before := acmeRenewBefore(leaf)
	return leaf.NotAfter.Add(-before + min(before/10, time.Hour))
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
