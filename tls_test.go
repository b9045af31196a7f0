// tls_test.go tests HTTPS from certificate files (DECISIONS.md section 13)
// through the real server: certificate pairs made by a CA of the test's
// own, HTTP/1.1 and h2, the pair read again on a change and on SIGHUP with
// connections kept, HSTS, the flags' rules, and the API over HTTP/2.

package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// testCA is a tiny certificate authority: the tests' server certificates
// are signed by it, so that clients verify them as they would a real one.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool // trusts this CA alone
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "petstore test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// testPair is a server certificate for localhost and 127.0.0.1 as its
// files hold it: the chain (the leaf, then the CA, as certbot's
// fullchain.pem) and the PKCS #8 key, both PEM.
type testPair struct {
	serial     *big.Int
	notAfter   time.Time
	chain, key []byte
}

func (ca *testCA) issue(t testing.TB) testPair {
	t.Helper()
	return ca.issueUntil(t, time.Now().Add(12*time.Hour).Truncate(time.Second))
}

// issueUntil is issue with the certificate's end given.
func (ca *testCA) issueUntil(t testing.TB, notAfter time.Time) testPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return ca.issueFor(t, notAfter, key)
}

// issueFor is issueUntil for a key of the test's (RSA, say).
func (ca *testCA) issueFor(t testing.TB, notAfter time.Time, key crypto.Signer) testPair {
	t.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    notAfter.Add(-24 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	return testPair{serial: serial, notAfter: tmpl.NotAfter, chain: chain,
		key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk})}
}

// keyText is the base64 of the key's PEM, the part that a log must never
// show.
func (p testPair) keyText() string {
	lines := strings.Split(strings.TrimSpace(string(p.key)), "\n")
	return strings.Join(lines[1:len(lines)-1], "")
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsClientConfig trusts the certificates in the --tls-cert file that args
// name (a chain that ends in the test's CA), or is nil without one: the
// harness's clients then verify the server's certificate for real.
func tlsClientConfig(t *testing.T, args []string) *tls.Config {
	t.Helper()
	f := tlsCertArg(args)
	if f == "" {
		return nil
	}
	return &tls.Config{RootCAs: certPool(t, f)}
}

// tlsServer is a server on HTTPS with a pair from ca in certFile and
// keyFile.
type tlsServer struct {
	*testServer
	ca                *testCA
	pair              testPair // the first one
	certFile, keyFile string
	addr              string
}

// issueFiles issues a pair from ca and writes it where certbot would:
// fullchain.pem and privkey.pem in a new temporary directory.
func (ca *testCA) issueFiles(t *testing.T) (pair testPair, certFile, keyFile string) {
	t.Helper()
	pair = ca.issue(t)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "fullchain.pem"), filepath.Join(dir, "privkey.pem")
	writeFile(t, certFile, pair.chain)
	writeFile(t, keyFile, pair.key)
	return pair, certFile, keyFile
}

// startTLSServer starts a server on HTTPS with a new CA's pair (files in a
// temporary directory), on db with key, run's context derived from
// parent.
func startTLSServer(t *testing.T, parent context.Context, db, key string, args ...string) *tlsServer {
	t.Helper()
	ca := newTestCA(t)
	pair, certFile, keyFile := ca.issueFiles(t)
	ts := startServerIn(t, parent, db, key, append([]string{"--tls-cert", certFile, "--tls-key", keyFile}, args...)...)
	return &tlsServer{testServer: ts, ca: ca, pair: pair, certFile: certFile, keyFile: keyFile,
		addr: strings.TrimPrefix(ts.base, "https://")}
}

// transportOver returns a transport that trusts roots and speaks proto
// alone: "h2" or "http/1.1".
func transportOver(roots *x509.CertPool, proto string) *http.Transport {
	p := new(http.Protocols)
	if proto == "h2" {
		p.SetHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, Protocols: p}
}

// clientOver returns a client of ts that speaks proto alone, each
// exchange checked against the served document as ts.client's are.
func (ts *tlsServer) clientOver(t *testing.T, proto string) *http.Client {
	t.Helper()
	ct := &checkingTransport{base: transportOver(ts.ca.pool, proto), contract: ts.client.Transport.(*checkingTransport).contract}
	t.Cleanup(func() { ct.report(t) })
	return &http.Client{Transport: ct}
}

// handshake makes a new TLS connection to addr offering protos and returns
// what was agreed: which certificate, which protocol.
func handshake(t *testing.T, addr string, roots *x509.CertPool, protos ...string) tls.ConnectionState {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: protos})
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState()
}

// servedSerial is the serial number of the certificate a new handshake
// gets.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool) *big.Int {
	t.Helper()
	return handshake(t, addr, roots, "http/1.1").PeerCertificates[0].SerialNumber
}

// waitFor polls cond every 10 ms until it holds, and fails the test if it
// does not within d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// getOn sends GET path through c and reports whether it went over a
// connection used before, and which (its local address).
func getOn(t *testing.T, c *http.Client, base, path, key string) (resp *http.Response, reused bool, local string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) { reused, local = ci.Reused, ci.Conn.LocalAddr().String() },
	}))
	resp, err = c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, reused, local
}

// TestTLSServesHTTP2AndHTTP1 checks that HTTPS offers h2 and HTTP/1.1 by
// ALPN, verifies against the CA, and that every HTTPS answer carries HSTS
// while no plain HTTP one does.
func TestTLSServesHTTP2AndHTTP1(t *testing.T) {
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "test")
	ts := startTLSServer(t, context.Background(), db, key)
	for _, proto := range []string{"h2", "http/1.1"} {
		if got := handshake(t, ts.addr, ts.ca.pool, proto).NegotiatedProtocol; got != proto {
			t.Errorf("ALPN offering only %s agreed on %q", proto, got)
		}
	}
	if got := handshake(t, ts.addr, ts.ca.pool, "h2", "http/1.1").NegotiatedProtocol; got != "h2" {
		t.Errorf("ALPN offering h2 and http/1.1 agreed on %q, want h2", got)
	}
	if st := handshake(t, ts.addr, ts.ca.pool); st.Version < tls.VersionTLS12 {
		t.Errorf("TLS version %x", st.Version)
	}
	for proto, wantProto := range map[string]string{"h2": "HTTP/2.0", "http/1.1": "HTTP/1.1"} {
		c := ts.clientOver(t, proto)
		for _, tc := range []struct {
			path, key string
			status    int
		}{{"/v1/categories", ts.key, 200}, {"/v1/categories", "", 401}, {"/v1/nowhere", ts.key, 404}, {"/healthz", "", 200}} {
			resp, _, _ := getOn(t, c, ts.base, tc.path, tc.key)
			if resp.StatusCode != tc.status || resp.Proto != wantProto || resp.TLS == nil {
				t.Errorf("%s GET %s -> %d over %s (TLS %v), want %d over %s", proto, tc.path, resp.StatusCode, resp.Proto, resp.TLS != nil, tc.status, wantProto)
			}
			if got := resp.Header.Values("Strict-Transport-Security"); !slices.Equal(got, []string{"max-age=31536000"}) {
				t.Errorf("%s GET %s: Strict-Transport-Security %q", proto, tc.path, got)
			}
		}
	}
	// The admin listener stays plain HTTP, and no plain answer has HSTS.
	plain := startServer(t)
	for _, u := range []string{ts.admin + "/healthz", plain.base + "/v1/categories", plain.base + "/healthz"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if v := resp.Header.Get("Strict-Transport-Security"); v != "" || resp.TLS != nil {
			t.Errorf("plain GET %s: Strict-Transport-Security %q (TLS %v)", u, v, resp.TLS != nil)
		}
	}
	if !strings.Contains(ts.stderr.String(), `msg="certificate files loaded" reason=start`) ||
		!strings.Contains(ts.stderr.String(), "names=localhost,127.0.0.1 not_after="+ts.pair.notAfter.UTC().Format(time.RFC3339)) {
		t.Errorf("no line says which pair is served:\n%s", ts.stderr.String())
	}
}

// TestTLSMaxConcurrentStreams checks that HTTP/2 connections are told
// that at most 100 streams may be open at a time.
func TestTLSMaxConcurrentStreams(t *testing.T) {
	db := testDB(t)
	ts := startTLSServer(t, context.Background(), db, createKey(t, db, "--plan", "free"))
	_, fr := dialH2(t, ts.addr, ts.ca.pool)
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("the server's first frame is %v, want its SETTINGS", f)
	}
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != 32 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v), want 32 (issue 41 lowered it from 100)", v, ok)
	}
}

// TestTLSOffersOnlyAEADSuites checks the suites of DECISIONS.md section
// 17: over TLS 1.2 only ECDHE with AES-GCM or ChaCha20-Poly1305, for an
// ECDSA and an RSA certificate alike; a client that offers nothing else
// (a CBC suite, say) is refused, and TLS 1.3 is Go's.
func TestTLSOffersOnlyAEADSuites(t *testing.T) {
	ca := newTestCA(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecdsaKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, kt := range []struct {
		name      string
		key       crypto.Signer
		aead, cbc []uint16
	}{
		{"ECDSA", ecdsaKey,
			[]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256},
			[]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}},
		{"RSA", rsaKey,
			[]uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256},
			[]uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA}},
	} {
		t.Run(kt.name, func(t *testing.T) {
			pair := ca.issueFor(t, time.Now().Add(12*time.Hour).Truncate(time.Second), kt.key)
			dir := t.TempDir()
			certFile, keyFile := filepath.Join(dir, "fullchain.pem"), filepath.Join(dir, "privkey.pem")
			writeFile(t, certFile, pair.chain)
			writeFile(t, keyFile, pair.key)
			db := testDB(t)
			ts := startServerOn(t, db, createKey(t, db, "--plan", "free"), "--tls-cert", certFile, "--tls-key", keyFile)
			addr := strings.TrimPrefix(ts.base, "https://")
			dial := func(cfg *tls.Config) (tls.ConnectionState, error) {
				cfg.RootCAs = ca.pool
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
				if err != nil {
					return tls.ConnectionState{}, err
				}
				defer c.Close()
				return c.ConnectionState(), nil
			}
			for _, s := range kt.cbc {
				if st, err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{s}}); err == nil {
					t.Errorf("a TLS 1.2 client offering only %s was served (%s)", tls.CipherSuiteName(s), tls.CipherSuiteName(st.CipherSuite))
				}
			}
			for _, s := range kt.aead {
				st, err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{s}})
				if err != nil || st.Version != tls.VersionTLS12 || st.CipherSuite != s {
					t.Errorf("a TLS 1.2 client offering only %s: %v (version %x, suite %s)", tls.CipherSuiteName(s), err, st.Version, tls.CipherSuiteName(st.CipherSuite))
				}
			}
			// Whole requests over TLS 1.2 with an AEAD suite (h2 and
			// HTTP/1.1) and over TLS 1.3.
			for _, c := range []struct {
				cfg   *tls.Config
				proto string
			}{
				{&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: kt.aead[:1]}, "h2"},
				{&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: kt.aead[2:]}, "http/1.1"},
				{&tls.Config{MinVersion: tls.VersionTLS13}, "h2"},
			} {
				tr := transportOver(ca.pool, c.proto)
				c.cfg.RootCAs = ca.pool
				tr.TLSClientConfig = c.cfg
				resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(ts.base + "/healthz")
				if err != nil {
					t.Errorf("GET /healthz over %s with %+v: %v", c.proto, c.cfg.CipherSuites, err)
					continue
				}
				resp.Body.Close()
				tr.CloseIdleConnections()
				if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.Version != c.cfg.MaxVersion && c.cfg.MaxVersion != 0 {
					t.Errorf("GET /healthz over %s: %d (%s)", c.proto, resp.StatusCode, resp.Proto)
				}
				if c.cfg.MinVersion == tls.VersionTLS13 && resp.TLS.Version != tls.VersionTLS13 {
					t.Errorf("a TLS 1.3 client got version %x", resp.TLS.Version)
				}
			}
		})
	}
}

// dialH2 opens an h2 connection by hand and sends the client's preface
// and an empty SETTINGS; the frames are the test's to read and write.
func dialH2(t *testing.T, addr string, roots *x509.CertPool) (*tls.Conn, *http2.Framer) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN agreed on %q", p)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c, fr
}

// startTLSServerOn is startTLSServer with the pair's files given.
func startTLSServerOn(t *testing.T, parent context.Context, db, key string, ca *testCA, pair testPair, certFile, keyFile string, args ...string) *tlsServer {
	t.Helper()
	ts := startServerIn(t, parent, db, key, append([]string{"--tls-cert", certFile, "--tls-key", keyFile}, args...)...)
	return &tlsServer{testServer: ts, ca: ca, pair: pair, certFile: certFile, keyFile: keyFile,
		addr: strings.TrimPrefix(ts.base, "https://")}
}

// swapLink points link at target as certbot does: a new link renamed over
// the old one, so that a reader sees either, never none.
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".new"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// TestTLSReloadOnFileChange renews the pair as certbot does, with the
// poll made fast through run's context: the new certificate beside the
// old key (a renewal caught halfway) is logged and the old pair kept, the
// whole new pair is served on new handshakes while connections opened
// before go on over HTTP/1.1 and h2; a pair rewritten in place through
// the links is seen too, and a broken one keeps the pair before it.
func TestTLSReloadOnFileChange(t *testing.T) {
	ctx := context.WithValue(context.Background(), certPollKey{}, 20*time.Millisecond)
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "test")
	ca := newTestCA(t)
	dir := t.TempDir()
	archive, live := filepath.Join(dir, "archive"), filepath.Join(dir, "live")
	for _, d := range []string{archive, live} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	certFile, keyFile := filepath.Join(live, "fullchain.pem"), filepath.Join(live, "privkey.pem")
	renew := func(n int, p testPair) (cert, key string) {
		cert, key = filepath.Join(archive, fmt.Sprintf("fullchain%d.pem", n)), filepath.Join(archive, fmt.Sprintf("privkey%d.pem", n))
		writeFile(t, cert, p.chain)
		writeFile(t, key, p.key)
		return "../archive/" + filepath.Base(cert), "../archive/" + filepath.Base(key)
	}
	p1 := ca.issue(t)
	c1, k1 := renew(1, p1)
	swapLink(t, c1, certFile)
	swapLink(t, k1, keyFile)
	ts := startTLSServerOn(t, ctx, db, key, ca, p1, certFile, keyFile)
	log := ts.stderr
	warnings := func() int {
		return strings.Count(log.String(), `msg="certificate files did not load; the old pair is kept"`)
	}

	// Connections opened before the renewal, kept alive.
	clients := map[string]*http.Client{"h2": ts.clientOver(t, "h2"), "http/1.1": ts.clientOver(t, "http/1.1")}
	conns := map[string]string{}
	for proto, c := range clients {
		_, _, conns[proto] = getOn(t, c, ts.base, "/v1/categories", key)
	}
	keptAlive := func(when string) {
		t.Helper()
		for proto, c := range clients {
			resp, reused, local := getOn(t, c, ts.base, "/v1/categories", key)
			if resp.StatusCode != 200 || !reused || local != conns[proto] {
				t.Errorf("%s, %s: status %d over a reused connection %v (%s, before %s); want 200 over the same one",
					when, proto, resp.StatusCode, reused, local, conns[proto])
			}
		}
	}

	// Certbot moves the certificate's link first: the new certificate and
	// the old key do not match.
	p2 := ca.issue(t)
	c2, k2 := renew(2, p2)
	swapLink(t, c2, certFile)
	waitFor(t, 5*time.Second, "a warning about the half-renewed pair", func() bool { return warnings() == 1 })
	if !strings.Contains(log.String(), "private key does not match public key") {
		t.Errorf("the warning does not say why:\n%s", log)
	}
	if got := servedSerial(t, ts.addr, ca.pool); got.Cmp(p1.serial) != 0 {
		t.Fatalf("serial %x served after a half renewal, want the old %x", got, p1.serial)
	}
	time.Sleep(10 * 20 * time.Millisecond) // ten polls of the files as they are
	swapLink(t, k2, keyFile)
	waitFor(t, 5*time.Second, "the renewed pair served", func() bool { return servedSerial(t, ts.addr, ca.pool).Cmp(p2.serial) == 0 })
	loaded := fmt.Sprintf(`msg="certificate files loaded" reason="files changed" cert=%s names=localhost,127.0.0.1 not_after=%s serial=%s`,
		certFile, p2.notAfter.UTC().Format(time.RFC3339), p2.serial.Text(16))
	waitFor(t, 5*time.Second, "a line naming the renewed pair", func() bool { return strings.Contains(log.String(), loaded) })
	if before, _, _ := strings.Cut(log.String(), loaded); strings.Count(before, "did not load") != 1 {
		t.Errorf("%d warnings about one state of the files, want 1:\n%s", strings.Count(before, "did not load"), before)
	}
	keptAlive("after the renewal")

	// A pair rewritten in place through the links (cp over it): the
	// links stay as they are, their targets change.
	p3 := ca.issue(t)
	writeFile(t, keyFile, p3.key)
	writeFile(t, certFile, p3.chain)
	waitFor(t, 5*time.Second, "the rewritten pair served", func() bool { return servedSerial(t, ts.addr, ca.pool).Cmp(p3.serial) == 0 })

	// A file gone is logged once, and read again once it is back.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	gone := `msg="certificate files cannot be read; the old pair is kept" err="stat ` + keyFile + `: no such file or directory"`
	waitFor(t, 5*time.Second, "a warning about the missing key", func() bool { return strings.Contains(log.String(), gone) })
	p4 := ca.issue(t)
	c4, k4 := renew(4, p4)
	swapLink(t, k4, keyFile)
	swapLink(t, c4, certFile)
	waitFor(t, 5*time.Second, "the pair served once back", func() bool { return servedSerial(t, ts.addr, ca.pool).Cmp(p4.serial) == 0 })
	if n := strings.Count(log.String(), "cannot be read"); n != 1 {
		t.Errorf("%d warnings about the missing key, want 1", n)
	}

	// A broken certificate keeps the pair before it.
	before := warnings()
	writeFile(t, certFile, []byte("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n"))
	waitFor(t, 5*time.Second, "a warning about the broken certificate", func() bool { return warnings() > before })
	if got := servedSerial(t, ts.addr, ca.pool); got.Cmp(p4.serial) != 0 {
		t.Errorf("serial %x served after a broken pair, want %x", got, p4.serial)
	}
	keptAlive("after a broken pair")

	// An expired pair loads (it is the operator's), with a warning.
	p5 := ca.issueUntil(t, time.Now().Add(-time.Hour).Truncate(time.Second))
	writeFile(t, keyFile, p5.key)
	writeFile(t, certFile, p5.chain)
	waitFor(t, 5*time.Second, "a warning that the loaded pair has expired", func() bool {
		return strings.Contains(log.String(), `level=WARN msg="certificate files loaded" reason="files changed"`) &&
			strings.Contains(log.String(), "serial="+p5.serial.Text(16))
	})
	for _, p := range []testPair{p1, p2, p3, p4, p5} {
		if strings.Contains(log.String(), p.keyText()[:40]) || strings.Contains(log.String(), "PRIVATE KEY") {
			t.Errorf("the log shows a private key:\n%s", log)
		}
	}
}

// TestTLSReloadOnSIGHUP sends SIGHUP to the real program: a broken pair is
// logged and the old one kept, a good one is served on new handshakes,
// connections opened before go on, and the process serves on.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "test")
	ca := newTestCA(t)
	p1, certFile, keyFile := ca.issueFiles(t)
	p := startProcess(t, db, "--tls-cert", certFile, "--tls-key", keyFile)
	base := "https://" + p.addr
	clients := map[string]*http.Client{
		"h2":       {Transport: transportOver(ca.pool, "h2")},
		"http/1.1": {Transport: transportOver(ca.pool, "http/1.1")},
	}
	conns := map[string]string{}
	for proto, c := range clients {
		_, _, conns[proto] = getOn(t, c, base, "/v1/categories", key)
	}
	hup := func() {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	writeFile(t, keyFile, []byte("not a key\n"))
	hup()
	waitFor(t, 5*time.Second, "a warning for SIGHUP's broken pair", func() bool {
		return strings.Contains(p.stderr.String(), `msg="certificate files did not load; the old pair is kept" reason=SIGHUP`)
	})
	if got := servedSerial(t, p.addr, ca.pool); got.Cmp(p1.serial) != 0 {
		t.Fatalf("serial %x served after SIGHUP with a broken pair, want the old %x", got, p1.serial)
	}

	p2 := ca.issue(t)
	writeFile(t, certFile, p2.chain)
	writeFile(t, keyFile, p2.key)
	hup()
	waitFor(t, 5*time.Second, "SIGHUP's new pair served", func() bool {
		return strings.Contains(p.stderr.String(), `msg="certificate files loaded" reason=SIGHUP`) &&
			servedSerial(t, p.addr, ca.pool).Cmp(p2.serial) == 0
	})
	if !strings.Contains(p.stderr.String(), "serial="+p2.serial.Text(16)) {
		t.Errorf("the log does not name the new pair:\n%s", p.stderr)
	}
	for proto, c := range clients {
		resp, reused, local := getOn(t, c, base, "/v1/categories", key)
		if resp.StatusCode != 200 || !reused || local != conns[proto] {
			t.Errorf("%s after SIGHUP: status %d over a reused connection %v (%s, before %s); want 200 over the same one",
				proto, resp.StatusCode, reused, local, conns[proto])
		}
	}
	p.terminate(t)
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if strings.Contains(p.stderr.String(), p1.keyText()[:40]) || strings.Contains(p.stderr.String(), p2.keyText()[:40]) {
		t.Errorf("the log shows a private key:\n%s", p.stderr)
	}
}

// TestTLSBrokenPairAtStart checks that a pair that does not load ends the
// start with exit 1 and one line naming both files, and nothing of the
// key.
func TestTLSBrokenPairAtStart(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	p1, p2 := ca.issue(t), ca.issue(t)
	file := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		writeFile(t, path, data)
		return path
	}
	cert, key, otherKey := file("cert.pem", p1.chain), file("key.pem", p1.key), file("other.pem", p2.key)
	garbage := file("garbage.pem", []byte("hello\n"))
	tests := []struct {
		name, cert, key, want string
	}{
		{"no certificate file", filepath.Join(dir, "missing.pem"), key, "no such file"},
		{"no key file", cert, filepath.Join(dir, "missing.pem"), "no such file"},
		{"not a certificate", garbage, key, "failed to find any PEM data in certificate input"},
		{"not a key", cert, garbage, "failed to find any PEM data in key input"},
		{"another pair's key", cert, otherKey, "private key does not match public key"},
		{"the files swapped", key, cert, "--tls-cert"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := filepath.Join(dir, "db"+strconv.Itoa(i)+".db")
			_, stderr, err := runCLI(t, nil, "serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off",
				"--tls-cert", tt.cert, "--tls-key", tt.key)
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 1 {
				t.Fatalf("exit code %d (%v), want 1", code, err)
			}
			line := msg.String()
			if strings.Count(line, "\n") != 1 || !strings.Contains(line, tt.want) ||
				!strings.Contains(line, "--tls-cert "+tt.cert) || !strings.Contains(line, "--tls-key "+tt.key) {
				t.Errorf("message %q, want one line naming both files and %q", line, tt.want)
			}
			if stderr != "" {
				t.Errorf("a failed start printed %q before its error", stderr)
			}
			if strings.Contains(line+stderr, p1.keyText()[:40]) || strings.Contains(line+stderr, "PRIVATE KEY") {
				t.Errorf("the message shows the key: %q", line)
			}
		})
	}
}

// TestTLSUsage checks the rules of the TLS and ACME flags (exit 2, one
// line, before any database is made) and the --public-url they default.
func TestTLSUsage(t *testing.T) {
	db := filepath.Join(t.TempDir(), "u.db")
	pair := []string{"--tls-cert", "c.pem", "--tls-key", "k.pem"}
	acme := func(domains string, more ...string) []string {
		return append([]string{"--acme-domains", domains}, more...)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"cert without key", []string{"--tls-cert", "c.pem"}, nil, "--tls-cert and --tls-key go together"},
		{"key without cert", []string{"--tls-key", "k.pem"}, nil, "--tls-cert and --tls-key go together"},
		{"key without cert from the environment", nil, map[string]string{"PETSTORE_TLS_KEY": "k.pem"}, "--tls-cert and --tls-key go together"},
		{"cert with acme", append(pair, acme("api.example.com")...), nil, "exclude each other"},
		{"http-addr without TLS", []string{"--http-addr", "127.0.0.1:0"}, nil, "--http-addr needs"},
		{"bad http-addr", append(pair, "--http-addr", "nowhere"), nil, "--http-addr must be"},
		{"acme: an IPv4 address", acme("192.0.2.1"), nil, "not a host name"},
		{"acme: an IPv6 address", acme("2001:db8::1"), nil, "not a host name"},
		{"acme: a wildcard", acme("*.example.com"), nil, "not a host name"},
		{"acme: a port", acme("example.com:443"), nil, "not a host name"},
		{"acme: a URL", acme("https://example.com"), nil, "not a host name"},
		{"acme: a space", acme("api .example.com"), nil, "not a host name"},
		{"acme: one label", acme("localhost"), nil, "two labels"},
		{"acme: an empty entry", acme("a.example.com,,b.example.com"), nil, "empty name"},
		{"acme: commas only", acme(","), nil, "empty name"},
		{"acme directory without domains", []string{"--acme-directory", "https://ca.example.com/dir"}, nil, "need --acme-domains"},
		{"acme email without domains", []string{"--acme-email", "ops@example.com"}, nil, "need --acme-domains"},
		{"acme CA file without domains", []string{"--acme-ca-file", "ca.pem"}, nil, "need --acme-domains"},
		{"acme directory over http", acme("api.example.com", "--acme-directory", "http://ca.example.com/dir"), nil, "https:// URL"},
		{"acme email of two addresses", acme("api.example.com", "--acme-email", "a@example.com,b@example.com"), nil, "--acme-email"},
		{"acme email without @", acme("api.example.com", "--acme-email", "ops"), nil, "--acme-email"},
		{"trust-proxy with a certificate", append(pair, "--trust-proxy"), nil, "--trust-proxy goes with a proxy in front"},
		{"trust-proxy with acme", acme("api.example.com", "--trust-proxy"), nil, "--trust-proxy goes with a proxy in front"},
		{"PETSTORE_TRUST_PROXY with a certificate", pair, map[string]string{"PETSTORE_TRUST_PROXY": "true"}, "--trust-proxy goes with a proxy in front"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCLI(t, tt.env, append([]string{"serve", "--db", db}, tt.args...)...)
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 2 {
				t.Fatalf("exit code %d (%v), want 2", code, err)
			}
			if line := msg.String(); strings.Count(line, "\n") != 1 || !strings.Contains(line, tt.want) {
				t.Errorf("message %q, want one line with %q", line, tt.want)
			}
		})
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("a refused start made the database")
	}

	defaults := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"plain HTTP", nil, nil, "http://localhost:8080/v1"},
		{"cert on a port", append(pair, "--addr", "127.0.0.1:8443"), nil, "https://localhost:8443/v1"},
		{"cert on 443", append(pair, "--addr", ":443"), nil, "https://localhost/v1"},
		{"cert on 0.0.0.0:443", append(pair, "--addr", "0.0.0.0:443"), nil, "https://localhost/v1"},
		{"cert with --public-url", append(pair, "--public-url", "https://api.example.com/v1/"), nil, "https://api.example.com/v1"},
		{"cert with PETSTORE_PUBLIC_URL", pair, map[string]string{"PETSTORE_PUBLIC_URL": "https://api.example.com/v1"}, "https://api.example.com/v1"},
		{"cert from the environment", nil, map[string]string{"PETSTORE_TLS_CERT": "c.pem", "PETSTORE_TLS_KEY": "k.pem", "PETSTORE_ADDR": ":8443"}, "https://localhost:8443/v1"},
		{"acme: the first domain", acme("API.Example.com, www.example.com"), nil, "https://api.example.com/v1"},
		{"acme: an IDN", acme("bücher.example"), nil, "https://xn--bcher-kva.example/v1"},
	}
	for _, tt := range defaults {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseServe(append([]string{"--db", db}, tt.args...), envFrom(tt.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.publicURL != tt.want {
				t.Errorf("--public-url %q, want %q", cfg.publicURL, tt.want)
			}
		})
	}
}

// freePort returns a loopback port that nothing listens on just now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestTLSPublicURLInDocument checks that a server on HTTPS without
// --public-url advertises https://localhost:PORT/v1 in the OpenAPI
// document's servers list.
func TestTLSPublicURLInDocument(t *testing.T) {
	db := testDB(t)
	port := freePort(t)
	ts := startTLSServer(t, context.Background(), db, createKey(t, db, "--plan", "free"), "--addr", "127.0.0.1:"+port)
	var doc struct {
		Servers []struct{ URL string } `json:"servers"`
	}
	if err := json.Unmarshal([]byte(ts.get(t, ts.base+"/v1/openapi.json")), &doc); err != nil {
		t.Fatal(err)
	}
	if want := "https://localhost:" + port + "/v1"; len(doc.Servers) != 1 || doc.Servers[0].URL != want {
		t.Errorf("servers %+v, want one: %s", doc.Servers, want)
	}
}

// TestTLSAPIOverHTTP2 runs the same exchanges over HTTP/1.1 and h2, each
// with keys of its own, and checks that the answers agree: statuses,
// header names, error bodies and what each exchange promises (DECISIONS.md
// section 13: the API behaves the same over HTTP/2).
func TestTLSAPIOverHTTP2(t *testing.T) {
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "test")
	// Keys made before the start: the server knows them at once.
	slow := map[string]string{}
	for _, proto := range []string{"h2", "http/1.1"} {
		slow[proto] = createKey(t, db, "--plan", "enterprise", "--rpm", "1", "--rpd", "100", "--name", "slow "+proto)
	}
	ts := startTLSServer(t, context.Background(), db, key)
	type step struct {
		method, path, key, body string
		header                  []string
	}
	big := `{"name":"` + strings.Repeat("x", 70<<10) + `"}`
	scenarios := []struct {
		name  string
		steps func(proto string) []step
		check func(t *testing.T, rs []response)
	}{
		{"401 without a key", func(string) []step { return []step{{"GET", "/v1/categories", "", "", nil}} },
			func(t *testing.T, rs []response) {
				wantError(t, rs[0], 401, "unauthorized")
				if rs[0].header.Get("WWW-Authenticate") == "" {
					t.Error("no WWW-Authenticate")
				}
			}},
		{"405 with Allow", func(string) []step { return []step{{"DELETE", "/v1/categories", key, "", nil}} },
			func(t *testing.T, rs []response) {
				wantError(t, rs[0], 405, "method_not_allowed")
				if got := rs[0].header.Get("Allow"); got != "GET, HEAD, POST" {
					t.Errorf("Allow %q", got)
				}
			}},
		{"409 on a taken name", func(p string) []step {
			body := `{"name":"Taken ` + p + `"}`
			return []step{{"POST", "/v1/categories", key, body, nil}, {"POST", "/v1/categories", key, body, nil}}
		}, func(t *testing.T, rs []response) {
			if rs[0].status != 201 {
				t.Fatalf("first create: %d %s", rs[0].status, rs[0].body)
			}
			wantError(t, rs[1], 409, "conflict")
		}},
		{"429 with Retry-After", func(p string) []step {
			return []step{{"GET", "/v1/categories", slow[p], "", nil}, {"GET", "/v1/categories", slow[p], "", nil}}
		}, func(t *testing.T, rs []response) {
			if rs[0].status != 200 {
				t.Fatalf("first request: %d %s", rs[0].status, rs[0].body)
			}
			wantError(t, rs[1], 429, "rate_limited")
			if s, err := strconv.Atoi(rs[1].header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
				t.Errorf("Retry-After %q", rs[1].header.Get("Retry-After"))
			}
		}},
		{"304 on a list", func(string) []step {
			return []step{{"GET", "/v1/categories", key, "", nil}, {"GET", "/v1/categories", key, "", []string{"If-None-Match", "<etag>"}}}
		}, func(t *testing.T, rs []response) {
			if rs[0].status != 200 || rs[1].status != 304 || len(rs[1].body) != 0 || rs[1].header.Get("ETag") != rs[0].header.Get("ETag") {
				t.Errorf("GET %d then with If-None-Match %d %q (ETag %q, then %q)", rs[0].status, rs[1].status, rs[1].body,
					rs[0].header.Get("ETag"), rs[1].header.Get("ETag"))
			}
		}},
		{"Idempotency-Key replayed", func(p string) []step {
			body, h := `{"name":"Once `+p+`"}`, []string{"Idempotency-Key", "once-" + p}
			return []step{{"POST", "/v1/categories", key, body, h}, {"POST", "/v1/categories", key, body, h}}
		}, func(t *testing.T, rs []response) {
			if rs[0].status != 201 || rs[1].status != 201 || !bytes.Equal(rs[0].body, rs[1].body) {
				t.Errorf("create %d %s, replay %d %s; want the same 201", rs[0].status, rs[0].body, rs[1].status, rs[1].body)
			}
			if rs[0].header.Get("Idempotency-Replayed") != "" || rs[1].header.Get("Idempotency-Replayed") != "true" {
				t.Errorf("Idempotency-Replayed %q then %q, want none then true",
					rs[0].header.Get("Idempotency-Replayed"), rs[1].header.Get("Idempotency-Replayed"))
			}
		}},
		{"413 then the next request", func(string) []step {
			return []step{{"POST", "/v1/categories", key, big, nil}, {"GET", "/v1/categories", key, "", nil}}
		}, func(t *testing.T, rs []response) {
			wantError(t, rs[0], 413, "payload_too_large")
			if rs[1].status != 200 {
				t.Errorf("the request after a 413: %d", rs[1].status)
			}
		}},
	}
	got := map[string]map[string][]response{}
	for _, proto := range []string{"http/1.1", "h2"} {
		c := ts.clientOver(t, proto)
		got[proto] = map[string][]response{}
		for _, sc := range scenarios {
			var rs []response
			for _, s := range sc.steps(proto) {
				h := slices.Clone(s.header)
				if len(rs) > 0 && len(h) == 2 && h[1] == "<etag>" {
					h[1] = rs[len(rs)-1].header.Get("ETag")
				}
				r, err := ts.sendVia(c, s.method, s.path, s.key, s.body, h...)
				if err != nil {
					t.Fatalf("%s, %s: %s %s: %v", proto, sc.name, s.method, s.path, err)
				}
				rs = append(rs, r)
			}
			t.Run(sc.name+" over "+proto, func(t *testing.T) { sc.check(t, rs) })
			got[proto][sc.name] = rs
		}
	}
	// What may differ: the date, and the names that each protocol's
	// requests made.
	norm := func(b []byte) string {
		return strings.NewReplacer("http/1.1", "P", "h2", "P").Replace(string(b))
	}
	for _, sc := range scenarios {
		h1, h2 := got["http/1.1"][sc.name], got["h2"][sc.name]
		for i := range h1 {
			a, b := h1[i], h2[i]
			if a.status != b.status {
				t.Errorf("%s, answer %d: %d over HTTP/1.1, %d over h2", sc.name, i+1, a.status, b.status)
			}
			names := func(h http.Header) []string {
				var n []string
				for k := range h {
					if k != "Date" {
						n = append(n, k)
					}
				}
				slices.Sort(n)
				return n
			}
			if !slices.Equal(names(a.header), names(b.header)) {
				t.Errorf("%s, answer %d: headers %v over HTTP/1.1, %v over h2", sc.name, i+1, names(a.header), names(b.header))
			}
			for _, k := range []string{"Content-Type", "Allow", "Idempotency-Replayed", "Strict-Transport-Security", "X-Ratelimit-Limit", "Ratelimit-Policy"} {
				if a.header.Get(k) != b.header.Get(k) {
					t.Errorf("%s, answer %d: %s %q over HTTP/1.1, %q over h2", sc.name, i+1, k, a.header.Get(k), b.header.Get(k))
				}
			}
			if a.status >= 400 && a.status != 429 && norm(a.body) != norm(b.body) {
				t.Errorf("%s, answer %d: %s over HTTP/1.1, %s over h2", sc.name, i+1, a.body, b.body)
			}
		}
	}
}

// TestTLSBanHoldOverHTTP2 checks what docs/api.md says of a banned key on
// HTTP/2: each answer waits --ban-hold, and one connection has at most
// 32 requests open at a time (maxStreams), so it gets at most 32 answers
// a hold; a 33rd stream is refused at once.
func TestTLSBanHoldOverHTTP2(t *testing.T) {
	const hold = 300 * time.Millisecond
	db := testDB(t)
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "1", "--rpd", "1000", "--name", "flood")
	ts := startTLSServer(t, context.Background(), db, key, "--ban-threshold", "1", "--ban-hold", hold.String())
	for i := 0; ; i++ {
		r := ts.do(t, "GET", "/v1/categories", key, "")
		if r.status == 429 && strings.Contains(string(r.body), "key_banned") {
			break
		}
		if i == 10 {
			t.Fatalf("not banned after %d requests: %d %s", i, r.status, r.body)
		}
	}

	c, fr := dialH2(t, ts.addr, ts.ca.pool)
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	const streams = 150
	start := time.Now()
	for i := range streams {
		hbuf.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", ts.addr},
			{":path", "/v1/categories"}, {"authorization", "Bearer " + key}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	answered, refused, early := 0, 0, 0
	for answered+refused < streams {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d answers and %d refusals: %v", answered, refused, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.PseudoValue("status") != "429" {
				t.Errorf("stream %d: status %s", f.StreamID, f.PseudoValue("status"))
			}
			if time.Since(start) < hold {
				early++
			}
			answered++
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeRefusedStream && f.ErrCode != http2.ErrCodeProtocol {
				t.Errorf("stream %d reset with %v", f.StreamID, f.ErrCode)
			}
			refused++
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v after %d answers and %d refusals", f.ErrCode, answered, refused)
		}
	}
	c.Close()
	if answered != maxStreams || refused != streams-maxStreams || early > 0 {
		t.Errorf("%d streams: %d answered (%d before the hold of %v), %d refused; want %d answered after the hold, %d refused",
			streams, answered, early, hold, refused, maxStreams, streams-maxStreams)
	}
}

// TestTLSPanicAfterStatusResetsStream checks docs/api.md's word on a
// handler that fails after its status went out, over HTTP/2: that
// request's stream is reset, so the client sees an error rather than a
// short body that looks complete, and the connection's other requests go
// on.
func TestTLSPanicAfterStatusResetsStream(t *testing.T) {
	h := recoverPanics(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if r.URL.Path != "/panic" {
			w.Write([]byte(`[]`))
			return
		}
		w.Write([]byte(`[{"id":1}`))
		http.NewResponseController(w).Flush()
		panic("after the status")
	}))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&recorder{ResponseWriter: w}, r) // the writer as logRequests hands it on
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()
	resp, err := c.Get(srv.URL + "/panic")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Proto != "HTTP/2.0" || err == nil {
		t.Errorf("%s %d, body %q read with error %v; want HTTP/2 and an error", resp.Proto, resp.StatusCode, body, err)
	}
	if resp, reused, _ := getOn(t, c, srv.URL, "/ok", ""); resp.StatusCode != 200 || !reused {
		t.Errorf("the next request: %d over the same connection %v; want 200 over it", resp.StatusCode, reused)
	}
}

// TestTLSShutdownDrainsHTTP2 stops the server while a create is in flight
// on an HTTP/2 connection (its HEADERS sent, its body not yet) and another
// h2 connection is idle: both get a GOAWAY (NO_ERROR, no stream after the
// create's), the create, its body sent after the GOAWAY, gets its 201 on
// the same connection, both connections are then closed by the server,
// and serve returns.
func TestTLSShutdownDrainsHTTP2(t *testing.T) {
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "drain")
	ts := startTLSServer(t, context.Background(), db, key, "--shutdown-timeout", "10s")
	idleConn, idle := dialH2(t, ts.addr, ts.ca.pool)
	conn, fr := dialH2(t, ts.addr, ts.ca.pool)
	for _, c := range []*tls.Conn{idleConn, conn} {
		c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	body := `{"name":"created while draining"}`
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", ts.addr}, {":path", "/v1/categories"},
		{"authorization", "Bearer " + key}, {"content-type", "application/json"}, {"content-length", strconv.Itoa(len(body))}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hbuf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	// The server reads a connection's frames in order: the PING's answer
	// says that the create's stream is open, its handler waiting for the
	// body.
	if err := fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	// next reads frames, answering the server's SETTINGS, up to one that
	// want takes.
	next := func(fr *http2.Framer, what string, want func(http2.Frame) bool) {
		t.Helper()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
				fr.WriteSettingsAck()
				continue
			}
			if want(f) {
				return
			}
			if _, ok := f.(*http2.GoAwayFrame); ok {
				t.Fatalf("waiting for %s: %v", what, f)
			}
		}
	}
	next(fr, "the PING's answer", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })

	stopped := make(chan struct{})
	go func() { ts.stop(); close(stopped) }()
	goaway := func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		if ok && (g.ErrCode != http2.ErrCodeNo || g.LastStreamID > 1) {
			t.Errorf("GOAWAY %v, last stream %d; want NO_ERROR, at most 1", g.ErrCode, g.LastStreamID)
		}
		return ok
	}
	next(fr, "the GOAWAY of the connection with a request in flight", goaway)
	next(idle, "the GOAWAY of the idle connection", goaway)
	select {
	case <-stopped:
		t.Fatal("serve returned with a request in flight")
	default:
	}
	if err := fr.WriteData(1, true, []byte(body)); err != nil {
		t.Fatal(err)
	}
	status := ""
	next(fr, "the create's answer", func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		if ok {
			status = h.PseudoValue("status")
		}
		return ok
	})
	if status != "201" {
		t.Errorf("the create in flight got %s, want 201", status)
	}
	for name, fr := range map[string]*http2.Framer{"in flight": fr, "idle": idle} {
		for {
			_, err := fr.ReadFrame()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the %s connection was not closed by the server", name)
			}
			if err != nil {
				break
			}
		}
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return within 10 s of the drain")
	}
}

// gatedConn holds its second Write (a TLS client's Finished, after the
// ClientHello) until release is closed, telling held when it waits: the
// server has then sent its whole flight and waits for the client's.
type gatedConn struct {
	net.Conn
	writes        int
	held, release chan struct{}
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if c.writes++; c.writes == 2 {
		close(c.held)
		<-c.release
	}
	return c.Conn.Write(p)
}

// TestTLSShutdownLateHTTP2Conn: an HTTP/2 connection whose TLS handshake
// ends after Shutdown began gets a GOAWAY too, and the drain ends without
// waiting for --shutdown-timeout. Go's HTTP/2 sends GOAWAY only to the
// connections it holds when Shutdown starts (golang/go#81153). serve
// waits for the connections it has just accepted before it calls
// Shutdown, but for newConnGrace at most: a handshake that takes longer
// (possible once --read-header-timeout is raised) ends after. Here the
// client's Finished is held back until the idle connection has its GOAWAY.
func TestTLSShutdownLateHTTP2Conn(t *testing.T) {
	const timeout = 10 * time.Second
	db := testDB(t)
	ts := startTLSServer(t, context.Background(), db, createKey(t, db, "--plan", "free"),
		"--shutdown-timeout", timeout.String(), "--read-header-timeout", "30s")
	idleConn, idle := dialH2(t, ts.addr, ts.ca.pool)
	idleConn.SetDeadline(time.Now().Add(newConnGrace + 10*time.Second))

	raw, err := net.DialTimeout("tcp", ts.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	raw.SetDeadline(time.Now().Add(20 * time.Second))
	gate := &gatedConn{Conn: raw, held: make(chan struct{}), release: make(chan struct{})}
	late := tls.Client(gate, &tls.Config{ServerName: "127.0.0.1", RootCAs: ts.ca.pool, NextProtos: []string{"h2"}})
	handshook := make(chan error, 1)
	go func() { handshook <- late.Handshake() }()
	select {
	case <-gate.held:
	case err := <-handshook:
		t.Fatalf("the handshake ended before the client's Finished: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no server flight within 10 s")
	}

	start := time.Now()
	stopped := make(chan time.Duration, 1)
	go func() { ts.stop(); stopped <- time.Since(start) }()
	for {
		f, err := idle.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY on the idle connection: %v", err)
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			break
		}
	}
	close(gate.release)
	if err := <-handshook; err != nil {
		t.Fatalf("the late handshake: %v", err)
	}
	if p := late.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN agreed on %q", p)
	}
	if _, err := io.WriteString(late, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(late, late)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the late connection got no GOAWAY in %v: %v", time.Since(start), err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			fr.WriteSettingsAck()
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo {
				t.Errorf("GOAWAY %v on the late connection, want NO_ERROR", g.ErrCode)
			}
			break
		}
	}
	if took := <-stopped; took >= timeout {
		t.Errorf("the drain took %v, the whole --shutdown-timeout", took)
	}
	if strings.Contains(ts.stderr.String(), "requests still running at the shutdown timeout") {
		t.Errorf("the drain ran into its timeout:\n%s", ts.stderr)
	}
}
