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
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// benchServer is the whole API handler, as newServer builds it for serve,
// on a temp database with 100 categories and a key whose limits refuse
// nothing. Logs go to io.Discard.
func benchServer(b testing.TB) (http.Handler, string, *sqliteStore) {
	b.Helper()
	store := testStore(b, filepath.Join(b.TempDir(), "bench.db"), true)
	b.Cleanup(func() { store.Close() })
	h, secret := benchHandler(b, store)
	return h, secret, store
}

// benchHandler is benchServer's handler on store, which it fills.
func benchHandler(b testing.TB, store Store) (http.Handler, string) {
	b.Helper()
	return benchHandlerTraced(b, store, nil)
}

// benchHandlerTraced is benchHandler with tracing by tr (nil: off).
func benchHandlerTraced(b testing.TB, store Store, tr *tracer) (http.Handler, string) {
	b.Helper()
	secret := newKeySecret("production")
	if _, err := store.CreateKey(context.Background(), keySpec{Hash: hashKey(secret), Name: "bench", Plan: "enterprise", RPM: 100_000_000, RPD: 100_000_000_000, Env: "production"}); err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		name := fmt.Sprintf("category %03d", i)
		desc := "a category for benchmarks"
		if _, err := store.CreateCategory(context.Background(), Category{Name: name, Description: &desc}, foldName(name), nil); err != nil {
			b.Fatal(err)
		}
	}
	lim := newLimiter(limiterConfig{Now: time.Now})
	keys := newKeyring(store, "production", time.Now, nil)
	if err := keys.refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	cfg := serveConfig{env: "production", publicURL: "http://localhost:8080/v1", busyTimeout: defaultBusyTimeout,
		petsDeprecatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), petsSunsetAt: time.Date(2027, 7, 1, 0, 0, 0, 0, time.UTC)}
	h := newServer(newLogger("text", 0, io.Discard), newRequestLog("text", 0, &logWriter{w: io.Discard}), traceCatalog(store, tr, false), newReadiness(store, time.Now), newIdempotency(store, defaultIdemTTL, time.Now), keys, lim, newServerMetrics(lim, store), newInFlight(defaultMaxConnsTotal, maxInFlightPerAddr, proxyTrust{}), cfg, nil, tr)
	return h, secret
}

// BenchmarkHandlerListCategories is one authenticated, rate-limited,
// logged and counted GET /v1/categories of 100 rows.
func BenchmarkHandlerListCategories(b *testing.B) {
	h, key, _ := benchServer(b)
	req := httptest.NewRequest("GET", "/v1/categories", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkHandlerRefusal is one 429 through the whole handler: a request
// without a key from an address over its minute limit, labelled with its
// route (the cheapness of a refusal: BENCHMARKS.md, row 10).
func BenchmarkHandlerRefusal(b *testing.B) {
	h, _, _ := benchServer(b)
	req := httptest.NewRequest("GET", "/v1/categories", nil)
	for range 1000 { // the address's minute is spent
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusTooManyRequests && w.Code != http.StatusUnauthorized { // a token refills each second
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkHandlerCreateCategory is POST /v1/categories through the whole
// handler, from parallel clients, each create durable (group commit).
func BenchmarkHandlerCreateCategory(b *testing.B) { benchCreate(b, false) }

// BenchmarkHandlerCreateCategoryKeyed is the same with an Idempotency-Key
// of its own on each request: what storing the answers costs.
func BenchmarkHandlerCreateCategoryKeyed(b *testing.B) { benchCreate(b, true) }

// BenchmarkHandlerCreateCategoryPostgres and its keyed twin are the two
// above on PostgreSQL (PETSTORE_TEST_POSTGRES), a schema of their own: what
// the Idempotency-Key's lookup and lock cost there.
func BenchmarkHandlerCreateCategoryPostgres(b *testing.B) { benchCreatePostgres(b, false) }

func BenchmarkHandlerCreateCategoryKeyedPostgres(b *testing.B) { benchCreatePostgres(b, true) }

func benchCreatePostgres(b *testing.B, keyed bool) {
	h, key := benchHandler(b, openTestStore(b, postgresSchema(b, needPostgres(b))))
	benchCreateOn(b, h, key, keyed)
}

func benchCreate(b *testing.B, keyed bool) {
	h, key, _ := benchServer(b)
	benchCreateOn(b, h, key, keyed)
}

func benchCreateOn(b *testing.B, h http.Handler, key string, keyed bool) {
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16) // clients waiting at once, as on a server
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := fmt.Sprintf(`{"name":"bench %d"}`, n.Add(1))
			req := httptest.NewRequest("POST", "/v1/categories", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			if keyed {
				req.Header.Set("Idempotency-Key", body[9:len(body)-2])
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 201 || (keyed && w.Header().Get("Idempotency-Replayed") != "") {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
}

// BenchmarkListSerialization reads and serializes the 100-row list, what a
// cache miss costs.
func BenchmarkListSerialization(b *testing.B) {
	_, _, store := benchServer(b)
	l := handleCategoryList(store, "http://x/v1", defaultBusyTimeout).(*categoryLists)
	ctx := context.Background()
	b.ReportAllocs()
	reads := store.categoryListReads.Load()
	for b.Loop() {
		l.cached.Store(nil) // else snapshot serves the copy it kept the first time
		if snap, err := l.snapshot(ctx, 0); snap == nil || err != nil {
			b.Fatalf("no snapshot: %v", err)
		}
	}
	if n := store.categoryListReads.Load() - reads; n != uint64(b.N) {
		b.Fatalf("%d reads of the list in %d iterations: not a miss each time", n, b.N)
	}
}

// BenchmarkGroupCommitCreate is the store's create alone, from parallel
// callers.
func BenchmarkGroupCommitCreate(b *testing.B) {
	_, _, store := benchServer(b)
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			name := fmt.Sprintf("g %d", n.Add(1))
			if _, err := store.CreateCategory(context.Background(), Category{Name: name}, name, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGroupCommitCreatePet is the store's pet create alone, from
// parallel callers: since schema 0011 SQLite's pets have AUTOINCREMENT
// (ids never reused after a delete), whose sqlite_sequence write each
// insert pays; BENCHMARKS.md compares it with the schema before.
func BenchmarkGroupCommitCreatePet(b *testing.B) {
	_, _, store := benchServer(b)
	if _, err := store.CreateCategory(context.Background(), Category{Name: "c"}, "c", nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := store.CreatePet(context.Background(), Pet{Name: "p", CategoryID: 1, Status: "available"}, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTLSHandshake is one full TLS 1.3 handshake against serve's own
// tls.Config (useTLS with a P-256 pair from files), over loopback TCP,
// with each key exchange that Go's clients and today's browsers offer.
// The load harness (BENCHMARKS.md, row 12) measures the server's half
// alone, but its wrk (OpenSSL 3.0) offers X25519 only, so this is where
// the post-quantum hybrid's cost shows. Both halves are in ns/op and
// allocs/op; the client's ECDSA verification is the larger part.
func BenchmarkTLSHandshake(b *testing.B) {
	certFile, keyFile := writeP256Pair(b, b.TempDir())
	certs, err := newFileCerts(certFile, keyFile, newLogger("text", 0, io.Discard))
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{}
	useTLS(srv, certs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	// The server's side: each accepted connection's handshake, reported
	// with what it negotiated.
	served := make(chan tls.ConnectionState)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(served)
				return
			}
			tc := tls.Server(c, srv.TLSConfig)
			if err := tc.Handshake(); err != nil {
				b.Error(err)
			}
			served <- tc.ConnectionState()
			tc.Close()
		}
	}()
	for _, curve := range []tls.CurveID{tls.X25519, tls.X25519MLKEM768} {
		b.Run(curve.String(), func(b *testing.B) {
			// No ClientSessionCache: the client never offers a session.
			client := &tls.Config{InsecureSkipVerify: true, CurvePreferences: []tls.CurveID{curve}, NextProtos: []string{"h2"}}
			b.ReportAllocs()
			for b.Loop() {
				c, err := tls.Dial("tcp", ln.Addr().String(), client)
				if err != nil {
					b.Fatal(err)
				}
				cs := <-served
				c.Close()
				if cs.DidResume || cs.Version != tls.VersionTLS13 || cs.CurveID != curve || cs.NegotiatedProtocol != "h2" {
					b.Fatalf("negotiated TLS %x, %v, ALPN %q, resumed %v; want a full TLS 1.3 handshake with %v and h2",
						cs.Version, cs.CurveID, cs.NegotiatedProtocol, cs.DidResume, curve)
				}
			}
		})
	}
}

// writeP256Pair writes a self-signed ECDSA P-256 certificate for
// 127.0.0.1 and its key into dir, as PEM files.
func writeP256Pair(tb testing.TB, dir string) (certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for file, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return certFile, keyFile
}

// BenchmarkTLSConnection is what row 12 of the load harness measures, in
// process: a new connection per request, each a full TLS 1.3 handshake
// (X25519, as wrk offers) and one GET /healthz with a key over HTTP/1.1,
// the connection closed after it. "petstore" is the API server as serve
// composes it (newHTTPServer, useTLS, the handshake ErrorLog, the ConnState
// tracking, the connection caps on its listener, ServeTLS); "bare" is net/http with the same tls.Config and a
// handler writing the same body. The client's half is in both, so the
// difference between the two is what petstore adds to a connection, in
// ns/op and allocs/op.
func BenchmarkTLSConnection(b *testing.B) {
	certFile, keyFile := writeP256Pair(b, b.TempDir())
	certs, err := newFileCerts(certFile, keyFile, newLogger("text", 0, io.Discard))
	if err != nil {
		b.Fatal(err)
	}
	h, key, _ := benchServer(b)
	discard := &logWriter{w: io.Discard}
	reqLog := newRequestLog("text", 0, discard)
	cfg := serveConfig{readHeaderTimeout: 5 * time.Second, readTimeout: 30 * time.Second, writeTimeout: 30 * time.Second, idleTimeout: time.Minute}
	logger := newLogger("text", 0, discard)
	healthBody := []byte(`{"env":"production","status":"ok","version":"dev"}` + "\n")
	servers := []struct {
		name string
		srv  func(net.Listener) (*http.Server, net.Listener)
	}{
		{"bare", func(ln net.Listener) (*http.Server, net.Listener) {
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write(healthBody)
			})}
			useTLS(srv, certs)
			return srv, ln
		}},
		{"petstore", func(ln net.Listener) (*http.Server, net.Listener) {
			metrics := newServerMetrics(nil, nil)
			srv := newHTTPServer(h, cfg, logger)
			useTLS(srv, certs)
			srv.HTTP2.CountError = metrics.http2Error
			srv.ErrorLog = tlsErrorLog(reqLog, metrics, logger)
			var fresh newConns
			srv.ConnState = fresh.track
			caps := newConnCaps(defaultMaxConnsPerAddr, defaultMaxConnsTotal, defaultAdminMaxConns, nil, cfg.readHeaderTimeout)
			caps.serve(srv)
			return srv, caps.listen(ln, listenerAPI)
		}},
	}
	for _, s := range servers {
		b.Run(s.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv, ln := s.srv(ln)
			go srv.ServeTLS(ln, "", "")
			defer srv.Close()
			// No session cache and no keep-alive: each request a new
			// connection and a full handshake, as wrk with
			// bench/fullhandshake.c and Connection: close.
			tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{
				InsecureSkipVerify: true, CurvePreferences: []tls.CurveID{tls.X25519}}}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			url := "https://" + ln.Addr().String() + "/healthz"
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.DidResume || resp.TLS.Version != tls.VersionTLS13 {
					b.Fatalf("status %d, TLS %v: want 200 after a full TLS 1.3 handshake", resp.StatusCode, resp.TLS != nil && !resp.TLS.DidResume && resp.TLS.Version == tls.VersionTLS13)
				}
			}
		})
	}
}
