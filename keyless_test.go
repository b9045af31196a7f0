// keyless_test.go tests the bounds on what a client without a key can make
// the database do (DECISIONS.md section 17), by counting the reads a flood
// causes: ACME's challenges (HTTP-01 on the plain listener, TLS-ALPN-01
// hellos) through the limit of requests without a key and a second's
// memory of a lookup that found nothing, per client address; /readyz from
// a state at most a second old.

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/acme"
)

// countingStore counts the reads that clients without a key can cause:
// lookups of ACME challenges (autocert's keys of HTTP-01 tokens and
// TLS-ALPN-01 certificates) and /readyz's pings. tokens holds what the CA's
// attempt would have stored; failReady makes the pings fail.
type countingStore struct {
	Store
	tokenReads atomic.Int64
	pings      atomic.Int64
	failReady  atomic.Bool
	tokens     sync.Map // autocert's key -> []byte
}

func (s *countingStore) ACMEGet(ctx context.Context, dir, key string) ([]byte, error) {
	if strings.HasSuffix(key, "+http-01") || strings.HasSuffix(key, "+token") {
		s.tokenReads.Add(1)
		if v, ok := s.tokens.Load(key); ok {
			return v.([]byte), nil
		}
	}
	return s.Store.ACMEGet(ctx, dir, key)
}

func (s *countingStore) Ready(ctx context.Context) error {
	s.pings.Add(1)
	if s.failReady.Load() {
		return errors.New("the test's database does not answer")
	}
	return s.Store.Ready(ctx)
}

// withCountingStore returns parent carrying a wrapper that puts s around
// serve's store.
func withCountingStore(parent context.Context, s *countingStore) context.Context {
	return context.WithValue(parent, storeWrapKey{}, func(st Store) Store { s.Store = st; return s })
}

// tlsALPNCert is a TLS-ALPN-01 challenge certificate for name as autocert
// keeps it: the private key, then the certificate, in PEM.
func tlsALPNCert(t *testing.T, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(34), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: k}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
}

// TestACMEChallengesAreBounded floods both challenge kinds from one address
// of a server whose CA does not answer (it serves challenges while it
// retries) and counts the database's reads: at most the keyless limit's
// worth (--anon-rpm 10), then refusals (429 without rate-limit headers on
// the plain listener; a refused handshake for TLS-ALPN-01), and a lookup
// that found nothing is not made again by its address within a second
// (the injected clock), while the CA's lookup from another address reads
// what was stored meanwhile.
func TestACMEChallengesAreBounded(t *testing.T) {
	const name = "petstore.test"
	clock := &testClock{}
	clock.set(time.Now())
	cs := &countingStore{}
	ctx := withCountingStore(clock.context(), cs)
	ctx = context.WithValue(ctx, acmeTimingsKey{}, acmeTimings{retryMin: time.Hour, retryMax: time.Hour})
	s := startACMEServerIn(t, ctx, testDB(t), []string{name}, "--acme-directory", "https://127.0.0.1:1/directory", "--anon-rpm", "10")

	clients := map[string]*http.Client{} // one per address: a client each time would leave its idle connection open
	challenge := func(from, token string) (int, http.Header, string) {
		t.Helper()
		if clients[from] == nil {
			clients[from] = clientFrom(t, from, nil)
		}
		req, err := http.NewRequest("GET", "http://"+s.httpAddr+"/.well-known/acme-challenge/"+token, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = name
		resp, err := clients[from].Do(req)
		if err != nil {
			t.Fatalf("GET a challenge from %s: %v", from, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}

	// HTTP-01: 500 tokens from one address.
	start := time.Now()
	statuses := map[int]int{}
	for i := range 500 {
		status, h, body := challenge("127.0.0.1", fmt.Sprintf("flood-%d", i))
		statuses[status]++
		if status == 429 {
			for _, k := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit", "Ratelimit-Policy"} {
				if v := h.Get(k); v != "" {
					t.Fatalf("a 429 of the plain listener has %s: %s", k, v)
				}
			}
			if h.Get("Retry-After") == "" || !strings.Contains(body, `"code":"rate_limited"`) {
				t.Fatalf("a 429 of the plain listener: Retry-After %q, body %s", h.Get("Retry-After"), body)
			}
		}
	}
	// 10 a minute: one more for every 6 s the flood took.
	allowed := 10 + int64(time.Since(start)/(6*time.Second)) + 1
	reads := cs.tokenReads.Load()
	t.Logf("500 HTTP-01 requests from one address: %v, %d reads of the database", statuses, reads)
	if reads > allowed || int64(statuses[404]) != reads || statuses[429] != 500-statuses[404] {
		t.Errorf("500 HTTP-01 requests from one address: %v and %d reads of the database, want at most %d reads (404) and 429s", statuses, reads, allowed)
	}

	// A token looked up in vain from 127.0.0.2 is remembered for it alone.
	before := cs.tokenReads.Load()
	for range 5 {
		if status, _, _ := challenge("127.0.0.2", "late"); status != 404 {
			t.Fatalf("a token not stored yet: %d", status)
		}
	}
	if n := cs.tokenReads.Load() - before; n != 1 {
		t.Errorf("one token asked 5 times within a second: %d reads, want 1", n)
	}
	cs.tokens.Store("late+http-01", []byte("late.key-authorization"))
	if status, _, body := challenge("127.0.0.3", "late"); status != 200 || body != "late.key-authorization" {
		t.Errorf("the CA's lookup from another address once the token is stored: %d %q", status, body)
	}
	if status, _, _ := challenge("127.0.0.2", "late"); status != 404 {
		t.Errorf("within the second, the address that missed: %d, want 404 (remembered)", status)
	}
	clock.add(time.Second)
	if status, _, body := challenge("127.0.0.2", "late"); status != 200 || body != "late.key-authorization" {
		t.Errorf("a second later, the address that missed: %d %q", status, body)
	}
	if n := cs.tokenReads.Load() - before; n != 3 {
		t.Errorf("%d reads for the token, want 3 (the miss, the CA's, the one a second later)", n)
	}

	// TLS-ALPN-01: 30 hellos from one address, 10 allowed, one read.
	hello := func(from string) (tls.ConnectionState, error) {
		c, err := tls.DialWithDialer(dialerFrom(from), "tcp", s.addr,
			&tls.Config{ServerName: name, NextProtos: []string{acme.ALPNProto}, InsecureSkipVerify: true})
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer c.Close()
		return c.ConnectionState(), nil
	}
	refused := func() float64 { return s.metric(t, `petstore_ratelimit_refusals_total{reason="rate_limited"}`) }
	before, refusedBefore := cs.tokenReads.Load(), refused()
	for i := range 30 {
		if _, err := hello("127.0.0.4"); err == nil {
			t.Fatalf("TLS-ALPN-01 hello %d without a challenge certificate stored: served", i+1)
		}
	}
	if n := cs.tokenReads.Load() - before; n > 1 {
		t.Errorf("30 TLS-ALPN-01 hellos from one address within a second: %d reads, want 1", n)
	}
	if n := refused() - refusedBefore; n < 15 {
		t.Errorf("30 TLS-ALPN-01 hellos from one address at 10 a minute: %v refused by the limit, want about 20", n)
	}
	cs.tokens.Store(name+"+token", tlsALPNCert(t, name))
	st, err := hello("127.0.0.5")
	if err != nil || st.NegotiatedProtocol != acme.ALPNProto || st.PeerCertificates[0].SerialNumber.Int64() != 34 {
		t.Errorf("the CA's TLS-ALPN-01 hello from another address once the certificate is stored: %v (%q)", err, st.NegotiatedProtocol)
	}
	if _, err := hello("127.0.0.4"); err == nil {
		t.Errorf("the flooding address, within the second and over its limit, was served")
	}
	if n := cs.tokenReads.Load() - before; n != 2 {
		t.Errorf("%d reads for the TLS-ALPN-01 certificate, want 2 (the miss, the CA's)", n)
	}
}

// TestReadyzAnswersFromAFreshState asks /readyz 1,000 times on both
// listeners: the database is pinged once while the injected clock stands,
// and again when the state is a second old, so that a failure shows
// within a second and the return too.
func TestReadyzAnswersFromAFreshState(t *testing.T) {
	clock := &testClock{}
	clock.set(time.Now())
	cs := &countingStore{}
	db := testDB(t)
	ts := startServerIn(t, withCountingStore(clock.context(), cs), db, createKey(t, db, "--plan", "free"))
	ready := func(base string) int {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	var not200 atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			base := ts.base
			if w%2 == 1 {
				base = ts.admin
			}
			for range 125 {
				if ready(base) != 200 {
					not200.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n, p := not200.Load(), cs.pings.Load(); n != 0 || p != 1 {
		t.Errorf("1000 /readyz within one second: %d not 200, %d pings of the database, want 0 and 1", n, p)
	}
	cs.failReady.Store(true)
	if got := ready(ts.base); got != 200 {
		t.Errorf("/readyz within the second of a good ping: %d, want 200", got)
	}
	clock.add(time.Second)
	if got := ready(ts.admin); got != 503 {
		t.Errorf("/readyz a second after the database stopped answering: %d, want 503", got)
	}
	cs.failReady.Store(false)
	if got := ready(ts.base); got != 503 {
		t.Errorf("/readyz within the second of a failed ping: %d, want 503", got)
	}
	clock.add(time.Second)
	if got := ready(ts.base); got != 200 {
		t.Errorf("/readyz a second after the database answered again: %d, want 200", got)
	}
	if p := cs.pings.Load(); p != 3 {
		t.Errorf("%d pings of the database, want 3", p)
	}
}

// slowStore is a healthStore whose Ready waits until release is closed.
type slowStore struct{ release chan struct{} }

func (s slowStore) Ready(ctx context.Context) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (slowStore) Stats() storeStats        { return storeStats{} }
func (slowStore) Replication() replication { return replication{} }

// TestReadyzDoesNotWaitForTheDatabase: on any store, a ping that does not
// come back keeps no /readyz waiting longer than readyWait: it answers
// from the state kept (the store's opening: ready), then, once the ping
// has gone unanswered for a second, not ready; ready again when it comes.
func TestReadyzDoesNotWaitForTheDatabase(t *testing.T) {
	t.Parallel()
	st := slowStore{release: make(chan struct{})}
	rd := newReadiness(st, time.Now)
	check := func() (time.Duration, error) {
		start := time.Now()
		err := rd.check(context.Background())
		return time.Since(start), err
	}
	if took, err := check(); err != nil || took > time.Second {
		t.Errorf("the first /readyz, the ping unanswered: %v after %v, want ready within readyWait", err, took)
	}
	time.Sleep(keylessFor)
	if took, err := check(); !errors.Is(err, errNotAnswering) || took > time.Second {
		t.Errorf("/readyz a second into an unanswered ping: %v after %v, want errNotAnswering within readyWait", err, took)
	}
	close(st.release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := check()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %v 5s after the ping came back", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReadyzFrozenPrimary: with PostgreSQL behind a proxy that stops
// forwarding (a frozen primary: no answer, no reset), /readyz answers
// from the state kept, on both listeners, within readyWait and the
// request's own time (2.01 s before: it waited for the ping): 200 for
// the first second of an unanswered ping, 503 after; 200 again once the
// database answers.
func TestReadyzFrozenPrimary(t *testing.T) {
	t.Parallel()
	db := postgresSchema(t, needPostgres(t))
	key := pmBigKey(t, db)
	proxy := pmStartProxy(t, pmTarget(t, db))
	ts := startServerOn(t, pmViaProxy(t, db, proxy.addr()), key)
	client := &http.Client{Timeout: 5 * time.Second}
	ready := func(base string) (int, time.Duration) {
		start := time.Now()
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	if code, _ := ready(ts.admin); code != 200 {
		t.Fatalf("/readyz before the freeze: %d", code)
	}
	proxy.stall()
	var took []time.Duration
	first503 := time.Duration(0)
	frozen := time.Now()
	for time.Since(frozen) < 3500*time.Millisecond {
		base := ts.base
		if len(took)%2 == 1 {
			base = ts.admin
		}
		code, d := ready(base)
		took = append(took, d)
		if code == 503 && first503 == 0 {
			first503 = time.Since(frozen)
		}
		if code != 200 && code != 503 {
			t.Errorf("/readyz with the primary frozen: %d", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	proxy.restore()
	slices.Sort(took)
	median, worst := took[len(took)/2], took[len(took)-1]
	t.Logf("/readyz with the primary frozen: %d answers, median %v, worst %v; the first 503 %v after the freeze",
		len(took), median.Round(time.Millisecond), worst.Round(time.Millisecond), first503.Round(time.Millisecond))
	// The bound is readyWait (80 ms) and loopback HTTP; the margins are for
	// a loaded machine, far below the ping's 2 s.
	if median > 100*time.Millisecond || worst > time.Second {
		t.Errorf("/readyz with the primary frozen took %v at the median and %v at worst, want 100ms and well under the ping's 2s", median, worst)
	}
	if first503 == 0 || first503 > 3*time.Second {
		t.Errorf("the first 503 came %v after the freeze, want within 3s (a state a second old, a ping unanswered for a second)", first503)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _ := ready(ts.base); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 5s of the database's return")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMissMemory: a miss is remembered for a second per address (an IPv6
// /64 as one, as the limiter counts), forgotten when the clock is set
// back, and the memory stays bounded however many addresses miss.
func TestMissMemory(t *testing.T) {
	clock := &testClock{}
	clock.set(time.Now())
	mm := newMissMemory(clock.now)
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	mm.remember(a, "/t")
	if !mm.missed(a, "/t") || mm.missed(b, "/t") || mm.missed(a, "/u") {
		t.Error("a miss is remembered for its address and what was looked up alone")
	}
	mm.remember(netip.MustParseAddr("2001:db8::1"), "/t")
	if !mm.missed(netip.MustParseAddr("2001:db8::ffff"), "/t") {
		t.Error("an IPv6 /64 is one address")
	}
	clock.add(keylessFor - time.Nanosecond)
	if !mm.missed(a, "/t") {
		t.Error("forgotten before the second")
	}
	clock.add(time.Nanosecond)
	if mm.missed(a, "/t") {
		t.Error("remembered after the second")
	}
	mm.remember(a, "/t")
	clock.add(-time.Minute)
	if mm.missed(a, "/t") {
		t.Error("remembered with the clock set back")
	}
	for i := range 3 * missMemoryMax {
		mm.remember(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), "/t")
		if n := len(mm.m); n > missMemoryMax {
			t.Fatalf("%d lookups remembered, want at most %d", n, missMemoryMax)
		}
	}
}
