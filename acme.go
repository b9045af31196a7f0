// acme.go owns HTTPS from an ACME CA (--acme-domains, DECISIONS.md section
// 13): autocert's Managers, a certificate for each listed name obtained at
// start and retried while the CA fails, the handshakes that may use them,
// and the answers to the CA's challenges. What is kept, and who asks the
// CA, is acme_cache.go's.

package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
	"golang.org/x/net/idna"
)

// acmeTimings are how the start retries a CA that fails: after retryMin,
// doubling up to retryMax.
type acmeTimings struct {
	retryMin, retryMax time.Duration
}

// acmeTimingsKey carries a test's acmeTimings into serve, through run's
// context, as clockKey does a clock; main never sets it.
type acmeTimingsKey struct{}

func acmeTimingsOf(ctx context.Context) acmeTimings {
	if t, ok := ctx.Value(acmeTimingsKey{}).(acmeTimings); ok {
		return t
	}
	return acmeTimings{retryMin: time.Minute, retryMax: time.Hour}
}

// acmeAccountKey is where autocert keeps the account's key in its cache;
// accountKey makes it here under the same name and form.
const acmeAccountKey = "acme_account+key"

// acmeCerts is the certSource of --acme-domains. Each listed name has its
// own Manager once its certificate is obtained (it renews it from then
// on); until then each attempt has a new one, as autocert remembers a
// failed order for a minute and would not try again sooner. A name is
// served only once its certificate is obtained: a handshake never makes
// an order.
type acmeCerts struct {
	dir     string
	email   string
	http01  bool // the plain listener is on: offer HTTP-01 too (set by serve, before run)
	cache   *acmeCache
	log     *slog.Logger
	domains []*acmeDomain
	byName  map[string]*acmeDomain
	// reader answers the CA's challenges from the database; it never
	// orders (only tokens go to it).
	reader    *autocert.Manager
	transport *acmeTransport
	// metrics counts the failed attempts (at start, and renewals) and the
	// challenges refused; serve sets it before run, and a nil one counts
	// nothing.
	metrics *serverMetrics
	// tracer makes a trace of each attempt at a certificate; serve sets
	// it before run, and a nil one makes none.
	tracer *tracer
	// limits is the limit of requests without a key that every challenge
	// lookup goes through, by client address (proxies: whose
	// X-Forwarded-For is believed on the plain listener); serve sets it
	// before run, and a nil one limits nothing. misses are the lookups
	// that found nothing in the last second (keyless.go).
	limits  rateLimiter
	proxies proxyTrust
	misses  *missMemory
}

// acmeCerts must stay a certSource: serve takes the API's certificates
// from it (--acme-domains) or from files.
var _ certSource = (*acmeCerts)(nil)

// acmeDomain is a listed name: hello is a ClientHello for it that asks for
// an ECDSA certificate, and m its Manager once obtained.
type acmeDomain struct {
	name  string
	hello *tls.ClientHelloInfo
	m     atomic.Pointer[autocert.Manager]
}

func newACMECerts(ctx context.Context, cfg serveConfig, store acmeStore, logger *slog.Logger) (certSource, error) {
	tr, err := newACMETransport(cfg.acmeCAFile)
	if err != nil {
		return nil, err
	}
	c := &acmeCerts{dir: cfg.acmeDirectory, email: cfg.acmeEmail, transport: tr, log: logger, byName: map[string]*acmeDomain{},
		proxies: cfg.proxies(), misses: newMissMemory(clockOf(ctx))}
	// autocert reads the real clock: so must the cache that judges for it.
	c.cache = newACMECache(store, cfg.acmeDirectory, cfg.acmeDomains, time.Now, logger)
	c.cache.caRequests = tr.requests.Load
	c.cache.renewalFailed = func(name string) {
		c.metrics.acmeFailed()
		c.log.Warn("renewing the certificate failed; autocert tries again within 30 to 60 minutes and serves the old one meanwhile",
			"name", name, "directory", c.dir)
	}
	c.reader = &autocert.Manager{Cache: c.cache, HostPolicy: autocert.HostWhitelist(cfg.acmeDomains...)}
	for _, name := range cfg.acmeDomains {
		if c.byName[name] != nil {
			continue
		}
		d := &acmeDomain{name: name, hello: &tls.ClientHelloInfo{
			ServerName:       name,
			CipherSuites:     []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256},
			SignatureSchemes: []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256},
			SupportedCurves:  []tls.CurveID{tls.CurveP256},
		}}
		c.domains = append(c.domains, d)
		c.byName[name] = d
	}
	return c, nil
}

// acmeTransport is how petstore talks to the CA: it trusts the system's
// roots and those of --acme-ca-file, counts its requests, and refuses
// every one once stopped (autocert's renewal timers outlive serve).
type acmeTransport struct {
	base     *http.Transport
	requests atomic.Int64
	stopped  atomic.Bool
}

func newACMETransport(caFile string) (*acmeTransport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--acme-ca-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--acme-ca-file %s: no PEM certificate in it", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &acmeTransport{base: tr}, nil
}

// errServerStopped is what the CA's client says once serve has returned.
var errServerStopped = errors.New("the server has stopped")

func (t *acmeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.stopped.Load() {
		return nil, errServerStopped
	}
	t.requests.Add(1)
	return t.base.RoundTrip(r)
}

func (t *acmeTransport) stop() {
	t.stopped.Store(true)
	t.base.CloseIdleConnections()
}

// run obtains each name's certificate, from the database or else from the
// CA, then keeps the source open until ctx ends. The renewals are the
// Managers' own timers.
func (c *acmeCerts) run(ctx context.Context) {
	t := acmeTimingsOf(ctx)
	var wg sync.WaitGroup
	for _, d := range c.domains {
		wg.Go(func() { c.obtain(ctx, d, t) })
	}
	<-ctx.Done()
	c.cache.close()
	c.transport.stop()
	wg.Wait()
}

// obtain tries until d has a certificate: after a failure it waits
// t.retryMin, doubling up to t.retryMax.
func (c *acmeCerts) obtain(ctx context.Context, d *acmeDomain, t acmeTimings) {
	wait := t.retryMin
	for {
		m, challenges, err := c.attempt(ctx, d)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			d.m.Store(m)
			c.cache.serve(d.name)
			return
		}
		c.metrics.acmeFailed()
		attrs := []any{"name", d.name, "directory", c.dir, "err", err}
		if challenges != "" {
			attrs = append(attrs, "challenges", challenges)
		}
		c.log.Warn("no certificate from the ACME CA yet; trying again", append(attrs, "retry_in", wait)...)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, t.retryMax)
	}
}

// attempt gets d's certificate from a new Manager: the database's, or an
// order's. It stops waiting when ctx ends (autocert's own attempt has its
// own context, of 5 minutes). On failure, challenges is what the CA said
// of the challenges it refused (describeChallenges), which autocert's
// error leaves out.
func (c *acmeCerts) attempt(ctx context.Context, d *acmeDomain) (m *autocert.Manager, challenges string, err error) {
	key, err := c.accountKey(ctx)
	if err != nil {
		return nil, "", err
	}
	if _, err := c.cache.get(ctx, d.name); errors.Is(err, autocert.ErrCacheMiss) {
		c.log.Info("no certificate in the database; asking the ACME CA for one", "name", d.name, "directory", c.dir)
	}
	watch := &challengeWatch{base: c.transport}
	sp := c.tracer.acmeSpan(d.name)
	defer func() {
		if err != nil {
			sp.fail()
		}
		sp.finish()
	}()
	m = &autocert.Manager{
		Prompt:     autocert.AcceptTOS,
		Cache:      c.cache,
		HostPolicy: autocert.HostWhitelist(d.name),
		Email:      c.email,
		Client: &acme.Client{Key: key, DirectoryURL: c.dir, UserAgent: "petstore",
			HTTPClient: &http.Client{Transport: traceCA(sp, watch), Timeout: time.Minute}},
	}
	if c.http01 {
		m.HTTPHandler(nil) // only to make the Manager offer HTTP-01; challenges answers it
	}
	puts := c.cache.putsOf(d.name)
	type result struct {
		cert *tls.Certificate
		err  error
	}
	done := make(chan result, 1)
	go func() {
		cert, err := m.GetCertificate(d.hello)
		done <- result{cert, err}
	}()
	select {
	case <-ctx.Done():
		return nil, "", ctx.Err()
	case r := <-done:
		if r.err != nil {
			return nil, watch.describe(), r.err
		}
		from := "the database"
		if c.cache.putsOf(d.name) != puts {
			from = "the ACME CA"
		}
		c.log.Info("certificate ready", "name", d.name, "from", from, "serial", hex.EncodeToString(r.cert.Leaf.SerialNumber.Bytes()),
			"not_after", r.cert.Leaf.NotAfter.UTC())
		return m, "", nil
	}
}

// accountKey returns the ACME account's key, made and stored under the
// issuer lock if the database has none, so that instances starting
// together share one account. It is made here rather than by autocert so
// that no attempt needs the lock twice (acmeCache).
func (c *acmeCerts) accountKey(ctx context.Context) (*ecdsa.PrivateKey, error) {
	data, err := c.cache.get(ctx, acmeAccountKey)
	if errors.Is(err, autocert.ErrCacheMiss) {
		unlock, lerr := c.cache.lock(ctx)
		if lerr != nil {
			return nil, lerr
		}
		defer unlock()
		if data, err = c.cache.get(ctx, acmeAccountKey); errors.Is(err, autocert.ErrCacheMiss) {
			key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				return nil, err
			}
			der, err := x509.MarshalECPrivateKey(key)
			if err != nil {
				return nil, err
			}
			return key, c.cache.store.ACMEPut(ctx, c.dir, acmeAccountKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the ACME account key: %w", err)
	}
	if b, _ := pem.Decode(data); b != nil {
		if key, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
			return key, nil
		}
	}
	return nil, errors.New("the ACME account key in the database does not parse (an EC PRIVATE KEY in PEM); it is left as it is")
}

// getCertificate answers the CA's TLS-ALPN-01 challenges from the
// database, and serves a listed name's certificate once obtained.
func (c *acmeCerts) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	d := c.domain(hello.ServerName)
	if d == nil {
		if hello.ServerName == "" {
			return nil, errors.New("no server name (SNI) in the handshake")
		}
		return nil, fmt.Errorf("no certificate for %s: not one of --acme-domains", hello.ServerName)
	}
	if len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acme.ALPNProto {
		return c.challengeCertificate(hello, d)
	}
	m := d.m.Load()
	if m == nil {
		return nil, fmt.Errorf("no certificate for %s yet: waiting for the ACME CA", d.name)
	}
	return m.GetCertificate(d.hello)
}

// domain returns the listed name that serverName is, in any case, with or
// without the final dot, in Unicode or its ASCII form; nil if none.
func (c *acmeCerts) domain(serverName string) *acmeDomain {
	if d := c.byName[serverName]; d != nil {
		return d
	}
	name, err := idna.Lookup.ToASCII(strings.TrimSuffix(serverName, "."))
	if err != nil {
		return nil
	}
	return c.byName[name]
}

func (c *acmeCerts) reload() {
	c.log.Info("SIGHUP: nothing to read again; ACME certificates renew on their own")
}

func (c *acmeCerts) waiting() string {
	for _, d := range c.domains {
		if d.m.Load() == nil {
			return "none yet for " + d.name + " from the ACME CA"
		}
	}
	return ""
}

func (c *acmeCerts) expiries() map[string]time.Time {
	exp := map[string]time.Time{}
	for _, d := range c.domains {
		if m := d.m.Load(); m != nil {
			if cert, err := m.GetCertificate(d.hello); err == nil {
				exp[d.name] = cert.Leaf.NotAfter
			}
		}
	}
	return exp
}

// challenges answers HTTP-01 on the plain listener, from the database, for
// the listed names (in a Host header with a port too, as a CA other than
// Let's Encrypt may send); a challenge path of another host is any path
// to next, and a token unknown a JSON 404. A lookup goes through the limit
// of requests without a key of its client address (over it: a 429 with
// Retry-After and no rate-limit headers: the plain listener has none), and
// one that its address made in vain in the last second is a 404 without
// a read.
func (c *acmeCerts) challenges(next http.Handler) http.Handler {
	h := c.reader.HTTPHandler(nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hostOnly, _, err := net.SplitHostPort(host); err == nil {
			host = hostOnly
		}
		d := c.domain(host)
		if !strings.HasPrefix(r.URL.Path, "/.well-known/acme-challenge/") || d == nil {
			next.ServeHTTP(w, r)
			return
		}
		addr := c.proxies.clientAddr(r)
		if dec, ok := c.allowChallenge(addr); !ok {
			w.Header().Set("Retry-After", strconv.FormatInt(dec.RetryAfter, 10))
			writeRefusal(w, dec)
			return
		}
		notFound := errorf("not_found", "no ACME challenge answer for %s at this path", d.name)
		if c.misses.missed(addr, r.URL.Path) {
			writeError(w, r, notFound)
			return
		}
		r = r.Clone(r.Context())
		r.Host = d.name
		a := &challengeAnswer{header: http.Header{}}
		h.ServeHTTP(a, r)
		if a.status != http.StatusOK {
			c.misses.remember(addr, r.URL.Path)
			writeError(w, r, notFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write(a.body.Bytes())
	})
}

// challengeAnswer keeps what autocert's HTTP-01 handler answers: a token's
// key authorization (some 90 bytes), or its plain-text error.
type challengeAnswer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (a *challengeAnswer) Header() http.Header { return a.header }

func (a *challengeAnswer) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
}

func (a *challengeAnswer) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	return a.body.Write(b)
}

func (c *acmeCerts) nextProtos() []string { return []string{acme.ALPNProto} }
