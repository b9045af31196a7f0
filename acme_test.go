package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pebbleEnv names the variable that points the ACME tests at Debian's
// pebble, Let's Encrypt's test CA (pebble-challtestsrv beside it answers
// its DNS). Unset, they skip.
const pebbleEnv = "PETSTORE_TEST_PEBBLE"

// needPebble returns pebble's path, or skips the test when the variable is
// not set.
func needPebble(t *testing.T) string {
	t.Helper()
	p := os.Getenv(pebbleEnv)
	if p == "" {
		t.Skip("set " + pebbleEnv + "=/usr/bin/pebble to run the ACME tests")
	}
	return p
}

// testPebble is a pebble CA of the test's own, with a pebble-challtestsrv
// as its DNS server (every name is 127.0.0.1). Its validation reaches
// petstore through two proxies that the test routes: http at pebble's
// httpPort (HTTP-01) and tls at its tlsPort (TLS-ALPN-01). Until routed
// they hold the CA's connections.
type testPebble struct {
	directory string         // --acme-directory
	caFile    string         // --acme-ca-file: the certificate of pebble's listener
	roots     *x509.CertPool // pebble's root, that what it issues chains to
	log       *syncBuffer
	http, tls *pmProxy
	addr      string // pebble's listener
	start     func() // starts it, when pebbleOptions.later
	kill      func() // ends pebble (not its DNS server): the CA is gone
}

// pebbleOptions are what a test sets of pebble: the lifetime of what it
// issues (0: its default, 5 years), and whether it starts now.
type pebbleOptions struct {
	validity time.Duration
	later    bool // the test calls start itself
}

// startPebble starts a pebble for the test; the processes are killed at
// its end.
func startPebble(t *testing.T, o pebbleOptions) *testPebble {
	t.Helper()
	bin := needPebble(t)
	dir := t.TempDir()
	p := &testPebble{log: &syncBuffer{}}
	var keyFile string
	p.caFile, keyFile = writeP256Pair(t, dir)
	p.http, p.tls = pmStartProxy(t), pmStartProxy(t)
	p.http.stall()
	p.tls.stall()
	p.addr = net.JoinHostPort("127.0.0.1", freePort(t))
	p.directory = "https://" + p.addr + "/dir"
	p.start = func() {
		t.Helper()
		for try := 1; ; try++ {
			err := p.run(t, bin, dir, keyFile, o)
			if err == nil {
				return
			}
			if try == 3 {
				t.Fatalf("pebble did not start: %v\n%s", err, p.log.String())
			}
			t.Logf("pebble did not start (%v); again on other ports", err)
			if !o.later { // else the servers have its address already
				p.addr = net.JoinHostPort("127.0.0.1", freePort(t))
				p.directory = "https://" + p.addr + "/dir"
			}
		}
	}
	if !o.later {
		p.start()
	}
	return p
}

// run starts pebble-challtestsrv and pebble on free ports (pebble's own
// listener on p.addr), and waits until pebble serves its directory and
// root. A port taken meanwhile is an error: the caller tries again.
func (p *testPebble) run(t *testing.T, bin, dir, keyFile string, o pebbleOptions) (err error) {
	t.Helper()
	dns := net.JoinHostPort("127.0.0.1", freePort(t))
	mgmt := net.JoinHostPort("127.0.0.1", freePort(t))
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress": p.addr, "managementListenAddress": mgmt,
		"certificate": p.caFile, "privateKey": keyFile,
		"httpPort": p.http.ln.Addr().(*net.TCPAddr).Port, "tlsPort": p.tls.ln.Addr().(*net.TCPAddr).Port,
		"ocspResponderURL": "", "externalAccountBindingRequired": false,
		"certificateValidityPeriod": int(o.validity.Seconds()),
	}}
	b, jerr := json.Marshal(cfg)
	if jerr != nil {
		t.Fatal(jerr)
	}
	conf := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var procs []*exec.Cmd
	defer func() {
		if err != nil {
			for _, cmd := range procs {
				cmd.Process.Kill()
			}
		}
	}()
	startProc := func(name string, env []string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				fmt.Fprintln(p.log, sc.Text())
			}
			cmd.Wait()
			close(done)
			select {
			case <-exited:
			default:
				close(exited)
			}
		}()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-done
		})
		procs = append(procs, cmd)
		p.kill = func() { cmd.Process.Kill() } // the last one started: pebble
	}
	challtest := filepath.Join(filepath.Dir(bin), "pebble-challtestsrv")
	startProc(challtest, nil, "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-dns01", dns,
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-management", net.JoinHostPort("127.0.0.1", freePort(t)))
	startProc(bin, []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0"},
		"-config", conf, "-dnsserver", dns)

	pool := x509.NewCertPool()
	if b, err = os.ReadFile(p.caFile); err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(b)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			return fmt.Errorf("a process exited")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no directory within 10s")
		}
		resp, gerr := client.Get(p.directory)
		if gerr != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		// pebble makes a new root on every start.
		if resp, gerr = client.Get("https://" + mgmt + "/roots/0"); gerr != nil {
			continue
		}
		root, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		p.roots = x509.NewCertPool()
		if !p.roots.AppendCertsFromPEM(root) {
			t.Fatalf("pebble's /roots/0: %q", root)
		}
		return nil
	}
}

// orders returns how many orders pebble received.
func (p *testPebble) orders() int {
	return strings.Count(p.log.String(), "POST /order-plz")
}

// requests returns how many requests pebble's ACME API received.
func (p *testPebble) requests() int {
	return strings.Count(p.log.String(), "-> calling handler()")
}

// route makes pebble's validation reach the servers' listeners: HTTP-01
// the plain ones (--http-addr), TLS-ALPN-01 the HTTPS ones, in turn.
func (p *testPebble) route(servers ...*acmeServer) {
	var plain, tls []string
	for _, s := range servers {
		plain, tls = append(plain, s.httpAddr), append(tls, s.addr)
	}
	p.http.route(plain...)
	p.tls.route(tls...)
	p.http.restore()
	p.tls.restore()
}

// acmeServer is "petstore serve --acme-domains" run through run, with its
// three listeners on random loopback ports.
type acmeServer struct {
	addr, httpAddr, admin string
	stderr                *syncBuffer
	stop                  func()
}

var (
	acmeHTTPAddrRE = regexp.MustCompile(`msg=listening .*http_addr=(\S+)()`)
	acmeAdminRE    = regexp.MustCompile(`msg=listening .*admin_addr=(\S+)()`)
)

// acmeTestTimings are the retries of the tests' servers: a CA that fails
// is tried again after 100 ms, 200 ms, then every 400 ms.
var acmeTestTimings = acmeTimings{retryMin: 100 * time.Millisecond, retryMax: 400 * time.Millisecond}

// startACMEServer runs serve on db for names, with pebble as its CA, and
// waits until it listens (not until it has a certificate).
func startACMEServer(t *testing.T, p *testPebble, db string, names []string, args ...string) *acmeServer {
	t.Helper()
	return startACMEServerIn(t, context.WithValue(context.Background(), acmeTimingsKey{}, acmeTestTimings), db, names,
		append([]string{"--acme-directory", p.directory, "--acme-ca-file", p.caFile}, args...)...)
}

// startACMEServerIn is startACMEServer with run's context derived from
// parent (which may carry timings, a clock, a store's wrapper) and the CA
// named in args.
func startACMEServerIn(t *testing.T, parent context.Context, db string, names []string, args ...string) *acmeServer {
	t.Helper()
	all := append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--acme-domains", strings.Join(names, ",")}, args...)
	s := &acmeServer{}
	var done <-chan error
	s.stderr, done, s.stop = serveInBackground(t, parent, all)
	for deadline := time.Now().Add(10 * time.Second); s.addr == ""; time.Sleep(10 * time.Millisecond) {
		log := s.stderr.String()
		if a := logAddr(listeningRE, log); a != "" {
			s.addr, s.httpAddr, s.admin = a, logAddr(acmeHTTPAddrRE, log), logAddr(acmeAdminRE, log)
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start within 10s:\n%s", log)
		}
	}
	return s
}

// waitLog waits until the server's log has n lines that match re.
func (s *acmeServer) waitLog(t *testing.T, re string, n int, within time.Duration) {
	t.Helper()
	r := regexp.MustCompile(re)
	for deadline := time.Now().Add(within); len(r.FindAllString(s.stderr.String(), -1)) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %d log lines matching %q within %v:\n%s", n, re, within, s.stderr.String())
		}
	}
}

// served handshakes with the server for name and returns the certificate
// it served, verified against pebble's root; it also asks for /healthz
// over that connection.
func (s *acmeServer) served(t *testing.T, p *testPebble, name string) (*x509.Certificate, error) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.addr,
		&tls.Config{ServerName: name, RootCAs: p.roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", name)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /healthz over HTTPS: %d", resp.StatusCode)
	}
	return conn.ConnectionState().PeerCertificates[0], nil
}

// metric returns the value of the admin listener's metric (its name
// with labels, as scraped), or -1 if there is none.
func (s *acmeServer) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%s: %q", series, line)
			}
			return f
		}
	}
	return -1
}

// ready returns the status and body of the admin listener's /readyz.
func (s *acmeServer) ready(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const acmeReadyRE = `msg="certificate ready" name=%s from="the %s"`

// TestACMEObtainsAtStart starts petstore with pebble as its CA and no
// certificate: it obtains one for each name at start, before any client's
// handshake, by TLS-ALPN-01 (tried first); the certificate chains to
// pebble's root and serves the API, and a name not listed gets none. A
// restart, a backup taken while serving (SQLite) and a copy (to a SQLite
// file, and from it to PostgreSQL when PETSTORE_TEST_POSTGRES is set)
// serve the same certificates without a request to the CA.
func TestACMEObtainsAtStart(t *testing.T) {
	p := startPebble(t, pebbleOptions{})
	db := testDB(t)
	names := []string{"api.petstore.test", "www.petstore.test"}
	s := startACMEServer(t, p, db, names)
	p.route(s)
	for _, name := range names {
		s.waitLog(t, fmt.Sprintf(acmeReadyRE, regexp.QuoteMeta(name), "ACME CA"), 1, 30*time.Second)
	}
	if n := p.orders(); n != 2 {
		t.Errorf("pebble got %d orders, want 2", n)
	}
	if h, h2 := p.http.hitsOf(s.httpAddr), p.tls.hitsOf(s.addr); h != 0 || h2 == 0 {
		t.Errorf("the CA reached the plain listener %d times and the HTTPS one %d times; want TLS-ALPN-01 alone, which comes first", h, h2)
	}
	serials := map[string]string{}
	for _, name := range names {
		leaf, err := s.served(t, p, name)
		if err != nil {
			t.Fatalf("handshake for %s: %v", name, err)
		}
		if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != name {
			t.Errorf("the certificate served for %s is for %v", name, leaf.DNSNames)
		}
		serials[name] = leaf.SerialNumber.String()
		if exp := s.metric(t, fmt.Sprintf("petstore_tls_certificate_expiry_timestamp_seconds{name=%q}", name)); exp != float64(leaf.NotAfter.Unix()) {
			t.Errorf("the expiry of %s in the metrics: %v, want %d", name, exp, leaf.NotAfter.Unix())
		}
	}
	if n := s.metric(t, "petstore_acme_failures_total"); n != 0 {
		t.Errorf("petstore_acme_failures_total %v, want 0", n)
	}
	if err := tryHandshake(s.addr, "other.petstore.test"); err == nil {
		t.Errorf("a handshake for a name not listed got a certificate")
	}
	var dbs []string // where the certificates should be found
	if !isPostgresURL(db) {
		backup := filepath.Join(t.TempDir(), "backup.db")
		if _, _, err := runCLI(t, nil, "backup", "--db", db, backup); err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, backup)
	}
	s.stop()
	copied := filepath.Join(t.TempDir(), "copy.db")
	if out, errOut, err := runCLI(t, nil, "copy", "--from", db, "--to", copied); err != nil || !strings.Contains(out, "acme_cache: 3 rows") {
		t.Fatalf("copy: %v\n%s%s", err, out, errOut) // the account key and two certificates
	}
	dbs = append(dbs, db, copied)
	if os.Getenv(postgresEnv) != "" {
		pg := postgresSchema(t, needPostgres(t))
		if out, errOut, err := runCLI(t, nil, "copy", "--from", copied, "--to", pg); err != nil {
			t.Fatalf("copy to PostgreSQL: %v\n%s%s", err, out, errOut)
		}
		dbs = append(dbs, pg)
	}

	requests := p.requests()
	for _, db := range dbs {
		again := startACMEServer(t, p, db, names)
		for _, name := range names {
			again.waitLog(t, fmt.Sprintf(acmeReadyRE, regexp.QuoteMeta(name), "database"), 1, 10*time.Second)
			leaf, err := again.served(t, p, name)
			if err != nil {
				t.Fatalf("%s: handshake for %s: %v", redactDB(db), name, err)
			}
			if got := leaf.SerialNumber.String(); got != serials[name] {
				t.Errorf("%s serves the certificate %s for %s, want the first one, %s", redactDB(db), got, name, serials[name])
			}
		}
		again.stop()
	}
	if n := p.requests(); n != requests {
		t.Errorf("pebble got %d requests from the restarts, want none", n-requests)
	}
}

// tryHandshake makes a TLS handshake with addr for name, without
// verifying what it gets: it fails only if the server refuses.
func tryHandshake(addr, name string) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err == nil {
		conn.Close()
	}
	return err
}

// TestACMEHTTP01 makes pebble's TLS-ALPN-01 validation fail (its port
// leads nowhere): autocert then orders again with HTTP-01, which the plain
// listener answers.
func TestACMEHTTP01(t *testing.T) {
	p := startPebble(t, pebbleOptions{})
	name := "api.petstore.test"
	s := startACMEServer(t, p, testDB(t), []string{name})
	p.http.route(s.httpAddr)
	p.http.restore()
	p.tls.route() // no target: every connection is closed at once
	p.tls.restore()
	s.waitLog(t, fmt.Sprintf(acmeReadyRE, regexp.QuoteMeta(name), "ACME CA"), 1, 30*time.Second)
	if h := p.http.hitsOf(s.httpAddr); h == 0 {
		t.Errorf("the CA never reached the plain listener")
	}
	if _, err := s.served(t, p, name); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if n := p.orders(); n != 2 {
		t.Errorf("pebble got %d orders, want 2: TLS-ALPN-01's, then HTTP-01's", n)
	}
	// A token it does not have is a JSON 404; the challenge path of
	// another host is any path of the plain listener (a redirect).
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for host, want := range map[string]int{name: http.StatusNotFound, name + ":80": http.StatusNotFound, "other.petstore.test": http.StatusPermanentRedirect} {
		req, _ := http.NewRequest("GET", "http://"+s.httpAddr+"/.well-known/acme-challenge/unknown", nil)
		req.Host = host
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusNotFound && !strings.Contains(string(body), `"not_found"`)) {
			t.Errorf("Host %s, an unknown token: %d %s; want %d (JSON)", host, resp.StatusCode, body, want)
		}
	}
}

// TestACMELogsTheCAsReasons: with the CA's validation reaching the wrong
// servers (TLS-ALPN-01 a plain HTTP listener, HTTP-01 nothing), a failed
// attempt logs, beside autocert's "no viable challenge type found", what
// the CA said of each challenge and the port it was to use.
func TestACMELogsTheCAsReasons(t *testing.T) {
	p := startPebble(t, pebbleOptions{})
	name := "api.petstore.test"
	s := startACMEServer(t, p, testDB(t), []string{name})
	p.tls.route(s.httpAddr) // plain HTTP where the CA expects TLS
	p.http.route()          // every connection closed at once
	p.tls.restore()
	p.http.restore()
	s.waitLog(t, `msg="no certificate from the ACME CA yet; trying again" name=api\.petstore\.test directory=\S+ err="[^\n]*no viable challenge type found[^\n]*" `+
		`challenges="tls-alpn-01 to port 443: [a-z]+: (?:[^"\\]|\\.)+; http-01 to port 80: [a-z]+: (?:[^"\\]|\\.)+" retry_in=`, 1, 30*time.Second)
}

// TestACMERetriesWhileTheCAFails starts petstore before its CA: it serves
// no certificate and says it waits for one, tries again after 100 ms, 200
// ms, then every 400 ms (the tests' timings; 1 minute to 1 hour by
// default), and gets one soon after the CA starts. (autocert remembers a
// failed order for a minute: each attempt needs a Manager of its own.)
func TestACMERetriesWhileTheCAFails(t *testing.T) {
	p := startPebble(t, pebbleOptions{later: true})
	name := "api.petstore.test"
	s := startACMEServer(t, p, testDB(t), []string{name})
	p.route(s)
	s.waitLog(t, `msg="no certificate from the ACME CA yet; trying again"`, 4, 10*time.Second)
	retries := regexp.MustCompile(`msg="no certificate from the ACME CA yet; trying again" name=api.petstore.test directory=\S+ err=.*connect.* retry_in=(\S+)`).
		FindAllStringSubmatch(s.stderr.String(), -1)
	var waits []string
	for _, m := range retries {
		waits = append(waits, m[1])
	}
	if want := []string{"100ms", "200ms", "400ms", "400ms"}; len(waits) < 4 || !slices.Equal(waits[:4], want) {
		t.Errorf("the retries waited %v, want %v first", waits, want)
	}
	if err := tryHandshake(s.addr, name); err == nil {
		t.Errorf("a handshake got a certificate before there was one")
	}
	s.waitLog(t, `msg="TLS handshake failed" remote=\S+ err="no certificate for api.petstore.test yet: waiting for the ACME CA"`, 1, 5*time.Second)
	if status, body := s.ready(t); status != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for a certificate: none yet for api.petstore.test") {
		t.Errorf("/readyz before a certificate: %d %s, want 503 saying it waits for one", status, body)
	}
	if n := s.metric(t, "petstore_acme_failures_total"); n < 4 {
		t.Errorf("petstore_acme_failures_total %v after 4 failed attempts", n)
	}
	if n := s.metric(t, `petstore_tls_certificate_expiry_timestamp_seconds{name="api.petstore.test"}`); n != -1 {
		t.Errorf("a certificate's expiry in the metrics before there is one: %v", n)
	}
	p.start()
	s.waitLog(t, fmt.Sprintf(acmeReadyRE, regexp.QuoteMeta(name), "ACME CA"), 1, 10*time.Second)
	if _, err := s.served(t, p, name); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if status, body := s.ready(t); status != http.StatusOK {
		t.Errorf("/readyz with a certificate: %d %s, want 200", status, body)
	}
	if n := p.orders(); n != 1 {
		t.Errorf("pebble got %d orders, want 1", n)
	}
}

// TestACMERenews has pebble issue certificates that live 15 s: autocert
// renews at a third of the lifetime before its end (10 s after it begins,
// plus up to 10% of 5 s), without a restart, and the new one is served.
// Its renewal then fails (the CA is gone): that is logged, and the
// certificate it has is served on. (Not by cutting the CA's validation
// off: pebble reuses a valid authorization in 1% of orders even with
// PEBBLE_AUTHZREUSE=0, and the renewal would then get through.)
func TestACMERenews(t *testing.T) {
	p := startPebble(t, pebbleOptions{validity: 15 * time.Second})
	name := "api.petstore.test"
	s := startACMEServer(t, p, testDB(t), []string{name})
	p.route(s)
	s.waitLog(t, fmt.Sprintf(acmeReadyRE, regexp.QuoteMeta(name), "ACME CA"), 1, 30*time.Second)
	first, err := s.served(t, p, name)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if life := first.NotAfter.Sub(first.NotBefore); life < 14*time.Second || life > 16*time.Second {
		t.Fatalf("pebble issued a certificate for %v, want 15s", life)
	}
	renewed := `msg="certificate renewed and stored in the database" name=api.petstore.test`
	s.waitLog(t, renewed, 1, 30*time.Second)
	if now, third := time.Now(), first.NotAfter.Add(-5*time.Second); now.Before(third.Add(-time.Second)) {
		t.Errorf("renewed at %v, before a third of the lifetime was left (%v)", now, third)
	}
	var second *x509.Certificate
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if second, err = s.served(t, p, name); err != nil {
			t.Fatalf("handshake after the renewal: %v", err)
		}
		if second.SerialNumber.Cmp(first.SerialNumber) != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still serving the first certificate 5s after the renewal")
		}
	}
	if n := p.orders(); n != 2 {
		t.Errorf("pebble got %d orders, want 2", n)
	}
	if exp := s.metric(t, `petstore_tls_certificate_expiry_timestamp_seconds{name="api.petstore.test"}`); exp != float64(second.NotAfter.Unix()) {
		t.Errorf("the expiry in the metrics after the renewal: %v, want the new certificate's, %d", exp, second.NotAfter.Unix())
	}

	p.kill()
	s.waitLog(t, `msg="renewing the certificate failed; autocert tries again within 30 to 60 minutes and serves the old one meanwhile" name=api.petstore.test`, 1, 20*time.Second)
	if n := strings.Count(s.stderr.String(), renewed); n != 1 {
		t.Errorf("%d renewals stored, want 1", n)
	}
	if leaf, err := s.served(t, p, name); err != nil || leaf.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Errorf("after a failed renewal: %v, %v; want the second certificate served on", leaf.SerialNumber, err)
	}
	if n := s.metric(t, "petstore_acme_failures_total"); n != 1 {
		t.Errorf("petstore_acme_failures_total %v after one failed renewal, want 1", n)
	}
}

// TestACMEPostgresSharesOneCertificate runs two instances on one
// PostgreSQL schema. Started together, they make one order, and the CA's
// validation, sent to each in turn, is answered by either; both serve the
// one certificate. Then on a new schema the first instance orders while
// the CA can reach only the second one, started meanwhile: it answers
// the challenge from the database.
func TestACMEPostgresSharesOneCertificate(t *testing.T) {
	base := needPostgres(t)
	p := startPebble(t, pebbleOptions{})
	name := "api.petstore.test"
	ready := fmt.Sprintf(`msg="certificate ready" name=%s from=`, regexp.QuoteMeta(name))

	db := postgresSchema(t, base)
	var servers [2]*acmeServer
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { servers[i] = startACMEServer(t, p, db, []string{name}) })
	}
	wg.Wait()
	p.route(servers[0], servers[1])
	for _, s := range servers {
		s.waitLog(t, ready, 1, 30*time.Second)
	}
	if n := p.orders(); n != 1 {
		t.Errorf("two instances started together made %d orders, want 1", n)
	}
	serial := ""
	for i, s := range servers {
		leaf, err := s.served(t, p, name)
		if err != nil {
			t.Fatalf("instance %d: handshake: %v", i, err)
		}
		if serial == "" {
			serial = leaf.SerialNumber.String()
		} else if leaf.SerialNumber.String() != serial {
			t.Errorf("instance %d serves %s, the other %s", i, leaf.SerialNumber, serial)
		}
	}
	for _, s := range servers {
		s.stop()
	}

	// The first orders; the CA's connections wait in the proxies until
	// the second has started, then go to it alone.
	p.http.stall()
	p.tls.stall()
	db = postgresSchema(t, base)
	first := startACMEServer(t, p, db, []string{name})
	for deadline := time.Now().Add(30 * time.Second); p.tls.open() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the CA did not try to validate within 30s:\n%s", first.stderr.String())
		}
	}
	second := startACMEServer(t, p, db, []string{name})
	p.route(second)
	first.waitLog(t, fmt.Sprintf(acmeReadyRE, regexp.QuoteMeta(name), "ACME CA"), 1, 30*time.Second)
	second.waitLog(t, fmt.Sprintf(acmeReadyRE, regexp.QuoteMeta(name), "database"), 1, 30*time.Second)
	if p.tls.hitsOf(second.addr) == 0 || p.tls.hitsOf(first.addr) != 0 {
		t.Errorf("the CA reached the second instance %d times and the first %d times, want the second alone", p.tls.hitsOf(second.addr), p.tls.hitsOf(first.addr))
	}
	if n := p.orders(); n != 2 {
		t.Errorf("pebble got %d orders in all, want 2", n)
	}
	a, err := first.served(t, p, name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := second.served(t, p, name)
	if err != nil {
		t.Fatal(err)
	}
	if a.SerialNumber.Cmp(b.SerialNumber) != 0 {
		t.Errorf("the instances serve %s and %s, want one certificate", a.SerialNumber, b.SerialNumber)
	}
}

// TestACMECAFileMustLoad: an --acme-ca-file that cannot be read, or holds
// no PEM certificate, ends the start with exit 1, naming the file. No CA is
// needed: the server stops before it would ask one.
func TestACMECAFileMustLoad(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		filepath.Join(dir, "missing.pem"): "--acme-ca-file: open " + filepath.Join(dir, "missing.pem") + ": no such file or directory",
		notPEM:                            "--acme-ca-file " + notPEM + ": no PEM certificate in it",
	} {
		// Bounded: a server that started anyway stops after 10 s.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, []string{"serve", "--db", filepath.Join(dir, "p.db"), "--addr", "127.0.0.1:0", "--admin-addr", "off",
			"--acme-domains", "api.petstore.test", "--acme-directory", "https://127.0.0.1:1/dir", "--acme-ca-file", file}, envFrom(nil), io.Discard, io.Discard)
		cancel()
		var out strings.Builder
		if code := exitCode(err, &out); code != 1 || !strings.Contains(out.String(), want) {
			t.Errorf("--acme-ca-file %s: exit %d, %q; want 1 and %q", file, code, out.String(), want)
		}
	}
}

// TestACMEStopsWaitingForTheIssuerLock: an instance that waits for the
// PostgreSQL issuer lock, which another holds (here the test), stops
// waiting when serve returns. The wait is in autocert's attempt, which
// outlives serve by up to 5 minutes (10 for a renewal); the lock's
// connection must be closed with the server, not dial on after it.
func TestACMEStopsWaitingForTheIssuerLock(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// No CA is reached: the wait for the lock comes first. An account key
	// in the database makes autocert's the first lock taken.
	p := &testPebble{directory: "https://127.0.0.1:1/dir"}
	p.caFile, _ = writeP256Pair(t, t.TempDir())
	store, err := openStore(ctx, db, storeOptions{migrate: true, now: time.Now, busy: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(key)
	err = store.ACMEPut(ctx, p.directory, acmeAccountKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	store.Close()
	if err != nil {
		t.Fatal(err)
	}

	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var schema string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	lockKey := newPgACMELock(cfg, schema).key
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		t.Fatal(err)
	}

	s := startACMEServer(t, p, db, []string{"api.petstore.test"})
	// An int8 advisory lock shows in pg_locks as its two halves.
	hi, lo := int64(uint64(lockKey)>>32), int64(uint32(lockKey))
	var waiter int32
	for deadline := time.Now().Add(10 * time.Second); waiter == 0; time.Sleep(20 * time.Millisecond) {
		err := conn.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1`, hi, lo).Scan(&waiter)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if waiter == 0 && time.Now().After(deadline) {
			t.Fatalf("the server did not wait for the issuer lock within 10s:\n%s", s.stderr.String())
		}
	}
	s.stop()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", waiter).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the issuer lock's connection (pid %d) still waits 5s after serve returned", waiter)
		}
	}
}

// TestACMEHTTP01OnASystemdSocket: the plain listener passed by systemd
// (petstore-http.socket, no --http-addr) answers HTTP-01 like one bound
// from --http-addr. TLS-ALPN-01 cannot get through, so without HTTP-01
// offered the first attempt fails and the next is a minute away.
func TestACMEHTTP01OnASystemdSocket(t *testing.T) {
	p := startPebble(t, pebbleOptions{})
	name := "api.petstore.test"
	api, _ := systemdSocket(t)
	plain, plainAddr := systemdSocket(t)
	s := launchProcess(t, activatedCommand([]*os.File{api, plain}, []string{"LISTEN_FDS=2", "LISTEN_FDNAMES=api:http"},
		"--db", testDB(t), "--admin-addr", "off", "--acme-domains", name, "--acme-directory", p.directory, "--acme-ca-file", p.caFile))
	p.http.route(plainAddr)
	p.http.restore()
	p.tls.route() // no target: every connection is closed at once
	p.tls.restore()
	re := regexp.MustCompile(fmt.Sprintf(acmeReadyRE, regexp.QuoteMeta(name), "ACME CA"))
	for deadline := time.Now().Add(30 * time.Second); !re.MatchString(s.stderr.String()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no certificate within 30s:\n%s", s.stderr.String())
		}
	}
	if h := p.http.hitsOf(plainAddr); h == 0 {
		t.Errorf("the CA never reached the plain listener")
	}
}
