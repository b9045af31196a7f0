package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var plainAddrRE = regexp.MustCompile(`msg=listening .*http_addr=(\S+)|"msg":"listening".*"http_addr":"([^"]+)"`)

// plainAddr returns the plain listener's address from ts's log.
func plainAddr(t *testing.T, ts *testServer) string {
	t.Helper()
	addr := logAddr(plainAddrRE, ts.stderr.String())
	if addr == "" {
		t.Fatalf("no http_addr in the log:\n%s", ts.stderr.String())
	}
	return addr
}

// TestPlainListener: beside HTTPS, the plain listener answers every path
// outside the API with a 308 to https, same path and query, on the
// request's host only when it is one of ours (any case, port left out),
// else --public-url's, always on --public-url's port; and everything
// under /v1, whatever the method and however the path is spelled, with a
// JSON 403 naming the https URL and no redirect. Every answer has a
// request id and nosniff and no rate-limit header. Hostile request lines
// get an answer, never a 5xx or a redirect elsewhere. Its lines are on
// the log's budget: in a second of the injected clock, 100 of 250 are
// written and the rest counted by status; the metrics count all, as route
// "plain".
func TestPlainListener(t *testing.T) {
	clock := &testClock{}
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clock.set(start)
	certFile, keyFile := writeP256Pair(t, t.TempDir())
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "plain")
	ts := startServerIn(t, clock.context(), db, key, "--tls-cert", certFile, "--tls-key", keyFile, "--http-addr", "127.0.0.1:0",
		"--public-url", "https://API.example.test:8443/v1", "--acme-directory", defaultACMEDirectory)
	plain := plainAddr(t, ts)
	client := &http.Client{
		Transport:     &http.Transport{},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(client.CloseIdleConnections)
	send := func(method, path, host, body string, header ...string) (*http.Response, []byte) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, "http://"+plain+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	common := func(what string, resp *http.Response) {
		t.Helper()
		if resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: X-Request-Id %q, X-Content-Type-Options %q", what, resp.Header.Get("X-Request-Id"), resp.Header.Get("X-Content-Type-Options"))
		}
		for name := range resp.Header {
			if strings.HasPrefix(strings.ToLower(name), "ratelimit") || strings.HasPrefix(strings.ToLower(name), "x-ratelimit") {
				t.Errorf("%s: a rate-limit header %s", what, name)
			}
		}
		if resp.Header.Get("Strict-Transport-Security") != "" {
			t.Errorf("%s: HSTS over plain HTTP", what)
		}
	}

	const ours = "https://API.example.test:8443" // --public-url's spelling and port
	for _, c := range []struct {
		method, path, host, want string
	}{
		{"GET", "/", "", ours + "/"}, // 127.0.0.1:port is not ours
		{"GET", "/docs?x=1&y=%20z", "api.example.test", ours + "/docs?x=1&y=%20z"},
		{"GET", "/docs", "api.EXAMPLE.test:80", ours + "/docs"},
		{"GET", "/docs", "localhost:1234", ours + "/docs"},
		{"GET", "/a/b%2Fc?", "evil.example", ours + "/a/b%2Fc?"},
		{"POST", "/healthz", "evil.example:443", ours + "/healthz"},
		{"GET", "//evil.example/x", "evil.example", ours + "//evil.example/x"}, // a path, after our host
		{"GET", "/v1x/pets", "", ours + "/v1x/pets"},
		{"PROPFIND", "/readyz", "", ours + "/readyz"},
	} {
		what := c.method + " " + c.path + " Host " + c.host
		resp, _ := send(c.method, c.path, c.host, "")
		if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != c.want {
			t.Errorf("%s: %d Location %q, want 308 %q", what, resp.StatusCode, resp.Header.Get("Location"), c.want)
		}
		common(what, resp)
	}

	for _, c := range []struct{ method, path, want string }{
		{"GET", "/v1/categories", "/v1/categories"},
		{"POST", "/v1/categories", "/v1/categories"},
		{"DELETE", "/v1/pets/1?x=2", "/v1/pets/1"},
		{"GET", "/v1", "/v1"},
		{"GET", "/v1/", "/v1/"},
		{"GET", "/%76%31/pets", "/%76%31/pets"}, // the path as sent
		{"GET", "/docs/../v1/pets", "/docs/../v1/pets"},
		{"GET", "//v1/pets", "//v1/pets"},
		{"HEAD", "/v1/categories", ""},
	} {
		what := c.method + " " + c.path
		resp, body := send(c.method, c.path, "api.example.test", `{"name":"Dog"}`, "Authorization", "Bearer "+key)
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
			t.Errorf("%s: %d Location %q, want 403 and none", what, resp.StatusCode, resp.Header.Get("Location"))
			continue
		}
		common(what, resp)
		if c.method == "HEAD" {
			continue
		}
		wantError(t, response{status: resp.StatusCode, header: resp.Header, body: body}, http.StatusForbidden, "forbidden")
		var e apiError
		json.Unmarshal(body, &e)
		if !strings.Contains(e.Message, "HTTPS only") || !strings.Contains(e.Message, ours+c.want) || strings.Contains(e.Message, key) {
			t.Errorf("%s: message %q, want HTTPS only and %s", what, e.Message, ours+c.want)
		}
	}

	// Hostile request lines: an answer each, never a 5xx, never a redirect
	// to a host of the client's choosing.
	huge := strings.Repeat("x", 30<<10)
	for _, req := range []string{
		"GET /" + huge + " HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /v1/" + huge + " HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /" + strings.Repeat("y", 40<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", // over the header limit: 431
		"F@O /x HTTP/1.1\r\nHost: x\r\n\r\n",
		"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://evil.example/v1/pets HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET http://evil.example/docs?a=b HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"GET /docs HTTP/1.1\r\n\r\n", // no Host: 400
		"GET /docs HTTP/1.0\r\n\r\n",
		"GET /docs HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET /docs HTTP/1.1\r\nHost: evil.example\r\nX-Forwarded-Host: api.example.test\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
		"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n",
		"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /docs HTTP/1.1\r\nHost: [::1\r\n\r\n",
		"GET /docs HTTP/1.1\r\nHost: \xff\xfe\r\n\r\n",
	} {
		what := fmt.Sprintf("%.60q", req)
		res, err := rawExchange(plain, []byte(req), false)
		if err != nil || res.closed {
			t.Errorf("%s: %v, closed %v", what, err, res.closed)
			continue
		}
		if res.status >= 500 {
			t.Errorf("%s: %d %s", what, res.status, res.body)
		}
		if loc := res.header.Get("Location"); loc != "" && !strings.HasPrefix(loc, ours+"/") {
			t.Errorf("%s: Location %q", what, loc)
		}
		if strings.Contains(req, "/v1/") && res.status == http.StatusPermanentRedirect {
			t.Errorf("%s: a redirect of an API path", what)
		}
	}

	// The budget: 250 answers in one second of the clock, after the
	// second that the start and the requests above spent.
	clock.set(start.Add(time.Hour))
	sent := map[int]int{}
	for i := range 250 {
		path := "/docs"
		if i%5 == 0 {
			path = "/v1/pets"
		}
		resp, _ := send("GET", path, "", "")
		sent[resp.StatusCode]++
	}
	clock.set(start.Add(time.Hour + time.Second))
	scrape := ts.get(t, ts.admin+"/metrics")
	for status, n := range map[int]int{308: 250 * 4 / 5, 403: 250 / 5} {
		if sent[status] != n {
			t.Fatalf("the flood got %v", sent)
		}
	}
	ts.stop()
	log := ts.stderr.String()
	stamp := start.Add(time.Hour).Format("2006-01-02T15:04:05")
	logged := map[int]int{}
	for ln := range strings.Lines(log) {
		if strings.Contains(ln, "time="+stamp) && strings.Contains(ln, " msg=request ") {
			if !strings.Contains(ln, " route=plain ") {
				t.Errorf("a request line of the flood not on route plain: %s", ln)
			}
			_, s, _ := strings.Cut(ln, " status=")
			n, _ := strconv.Atoi(s[:3])
			logged[n]++
		}
	}
	left := map[string]int64{}
	for _, c := range logCounts(t, "text", log) {
		for k, v := range c {
			left[k] += v
		}
	}
	if logged[308]+logged[403] != logBudgetPerSecond {
		t.Errorf("%v lines written in the flood's second, want %d", logged, logBudgetPerSecond)
	}
	for status, n := range sent {
		if int64(logged[status])+left[statusKey(status)] != int64(n) {
			t.Errorf("status %d: %d answered, %d logged, %d counted", status, n, logged[status], left[statusKey(status)])
		}
	}
	for _, want := range []string{`petstore_http_requests_total{route="plain",status="308"}`, `petstore_http_requests_total{route="plain",status="403"}`} {
		if !strings.Contains(scrape, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}

// TestHTTPSTarget: the redirect's host is the request's when it is
// --public-url's or an ACME domain's (any case, port and a final dot left
// out), in our spelling, else --public-url's; the port is --public-url's,
// left out when 443; an IPv6 host is bracketed.
func TestHTTPSTarget(t *testing.T) {
	acme := serveConfig{publicURL: "https://api.example.com/v1", acmeDomains: []string{"api.example.com", "www.example.org"}}
	for _, c := range []struct {
		cfg        serveConfig
		host, want string
	}{
		{acme, "WWW.Example.ORG", "https://www.example.org/p?q"},
		{acme, "www.example.org.:80", "https://www.example.org/p?q"},
		{acme, "api.example.com", "https://api.example.com/p?q"},
		{acme, "example.org", "https://api.example.com/p?q"},
		{acme, "www.example.org.evil.example", "https://api.example.com/p?q"},
		{acme, "", "https://api.example.com/p?q"},
		{serveConfig{publicURL: "https://api.example.com:443/v1"}, "x", "https://api.example.com/p?q"},
		{serveConfig{publicURL: "https://[::1]:8443/v1"}, "[::1]:80", "https://[::1]:8443/p?q"},
		{serveConfig{publicURL: "https://[::1]/v1"}, "[::1]", "https://[::1]/p?q"},
	} {
		r := httptest.NewRequest("GET", "/p?q", nil)
		r.Host = c.host
		if got := newHTTPSTarget(c.cfg).url(r); got != c.want {
			t.Errorf("%s, Host %q: %s, want %s", c.cfg.publicURL, c.host, got, c.want)
		}
	}
}

// handshakeFlood makes a bad handshake of kind 0 to 3, each ending in one
// failure on the server: plain HTTP to the TLS port, a client that refuses
// the certificate for a name it does not hold (an unknown SNI), a
// ClientHello cut short, and a ClientHello offering only kilobytes of ALPN
// protocols no server speaks (which net/http's error quotes); or, kind 4,
// an HTTP/2 connection that breaks the protocol, which the server logs
// before its GOAWAY.
func handshakeFlood(addr string, pool *x509.CertPool, kind int) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	switch kind {
	case 0:
		if _, err := io.WriteString(c, "GET /v1/categories HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		b, _ := io.ReadAll(c)
		if !strings.Contains(string(b), "400 Bad Request") {
			return fmt.Errorf("plain HTTP to the TLS port: %q", b)
		}
	case 1:
		tc := tls.Client(c, &tls.Config{ServerName: "unknown.example", RootCAs: pool})
		if err := tc.Handshake(); err == nil {
			return fmt.Errorf("a handshake for unknown.example succeeded")
		}
	case 2:
		// A handshake record that promises 512 bytes and holds 4.
		if _, err := c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc}); err != nil {
			return err
		}
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	case 3:
		protos := make([]string, 15)
		for i := range protos {
			protos[i] = strings.Repeat("\n\"\x00é", 50)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "127.0.0.1", RootCAs: pool, NextProtos: protos})
		if err := tc.Handshake(); err == nil {
			return fmt.Errorf("a handshake with unknown ALPN protocols succeeded")
		}
	case 4:
		tc := tls.Client(c, &tls.Config{ServerName: "127.0.0.1", RootCAs: pool, NextProtos: []string{"h2"}})
		if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
			return fmt.Errorf("h2: %v, %q", err, tc.ConnectionState().NegotiatedProtocol)
		}
		tc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		tc.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0})             // SETTINGS, empty
		tc.Write([]byte{0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // WINDOW_UPDATE of 0: PROTOCOL_ERROR
		for {                                                   // the server's frames, up to its GOAWAY (type 7)
			var head [9]byte
			if _, err := io.ReadFull(tc, head[:]); err != nil {
				return fmt.Errorf("h2: no GOAWAY: %v", err)
			}
			if _, err := io.CopyN(io.Discard, tc, int64(head[0])<<16|int64(head[1])<<8|int64(head[2])); err != nil {
				return err
			}
			if head[3] == 7 {
				return nil
			}
		}
	}
	return nil
}

// waitMetric polls the admin listener until the sample named (with its
// labels) has the value want, for up to 10 s.
func waitMetric(t *testing.T, ts *testServer, sample string, want int) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for ln := range strings.Lines(ts.get(t, ts.admin+"/metrics")) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(ln), sample+" "); ok {
				if got = v; v == strconv.Itoa(want) {
					return
				}
			}
		}
	}
	t.Fatalf("%s is %q after 10 s, want %d", sample, got, want)
}

// TestHandshakeFloodIsBounded floods the real HTTPS server with 1,600
// failed handshakes of four kinds and 400 HTTP/2 connections that break
// the protocol, in two seconds of an injected clock. Each failed handshake
// is counted in petstore_tls_handshake_errors_total; no second of the log
// holds more than logBudgetPerSecond of their lines and one count line;
// the lines written and those counted as tls_handshake add up to the
// count, as those of HTTP/2 and those counted as http2 add up to the
// connections, and the two kinds together wrote exactly the budget of the
// two seconds; no line is over 2 KiB though the ALPN kind's error quotes
// 4 KiB of what the client sent (cut, escaped: no line break of the
// client's reaches the log); and a good client is still served.
func TestHandshakeFloodIsBounded(t *testing.T) {
	clock := &testClock{}
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clock.set(start)
	certFile, keyFile := writeP256Pair(t, t.TempDir())
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "tls")
	// The flood comes from one address faster than a busy server closes
	// its side of the connections the clients have left, and every
	// handshake is counted here: no cap per address.
	ts := startServerIn(t, clock.context(), db, key, "--tls-cert", certFile, "--tls-key", keyFile, "--max-conns-per-addr", "0")
	addr := strings.TrimPrefix(ts.base, "https://")
	pool := certPool(t, certFile)

	const windows, perWindow, workers, kinds = 2, 1000, 4, 5
	const h2PerWindow = perWindow / kinds
	const failures = windows * (perWindow - h2PerWindow) // handshakes that fail
	for w := range windows {
		clock.set(start.Add(time.Duration(w+1) * time.Second))
		var wg sync.WaitGroup
		for g := range workers {
			wg.Go(func() {
				for i := range perWindow / workers {
					if err := handshakeFlood(addr, pool, (g*perWindow/workers+i)%kinds); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		// The server logs each failure after the client has gone: all of
		// this window's are in before the clock moves on.
		waitMetric(t, ts, "petstore_tls_handshake_errors_total", (w+1)*(perWindow-h2PerWindow))
	}
	if r := ts.do(t, "GET", "/v1/categories", key, ""); r.status != http.StatusOK {
		t.Fatalf("a good client after the flood: %d %s", r.status, r.body)
	}
	clock.set(start.Add((windows + 1) * time.Second))
	ts.stop()
	log := ts.stderr.String()

	perSecond := map[string]int{}
	countLines := map[string]int{}
	logged, h2Logged, truncated, total := 0, 0, 0, 0
	long := 0
	for ln := range strings.Lines(log) {
		if len(ln) > 2048 {
			if long++; long == 1 {
				t.Errorf("a line of %d bytes: %.300s...", len(ln), ln)
			}
		}
		sec := ln[:min(len(ln), len("time=2006-01-02T15:04:05"))]
		switch {
		case strings.Contains(ln, ` msg="TLS handshake failed" `):
			if !strings.HasPrefix(ln, "time=") || !strings.Contains(ln, " level=INFO ") || !strings.Contains(ln, " remote=127.0.0.1:") || !strings.Contains(ln, " err=") {
				t.Errorf("a handshake line: %s", ln)
			}
			logged++
			perSecond[sec]++
			total += len(ln)
			if strings.Contains(ln, fieldCut) {
				truncated++
			}
		case strings.Contains(ln, ` msg="requests not logged" `):
			countLines[sec]++
			total += len(ln)
		case strings.Contains(ln, "http2: server connection error from 127.0.0.1:"):
			// the logger's line, stamped by the real clock
			h2Logged++
			total += len(ln)
		case strings.Contains(ln, "TLS handshake") || strings.Contains(ln, "http2"):
			t.Errorf("a handshake line outside the budget: %s", ln)
		}
	}
	var left, h2Left int64
	for _, c := range logCounts(t, "text", log) {
		left += c["tls_handshake"]
		h2Left += c["http2"]
	}
	if int64(logged)+left != failures {
		t.Errorf("%d handshake lines + %d counted = %d, want %d", logged, left, int64(logged)+left, failures)
	}
	if int64(h2Logged)+h2Left != windows*h2PerWindow {
		t.Errorf("%d HTTP/2 lines + %d counted = %d, want %d", h2Logged, h2Left, int64(h2Logged)+h2Left, windows*h2PerWindow)
	}
	if logged+h2Logged != windows*logBudgetPerSecond {
		t.Errorf("%d handshake and %d HTTP/2 lines written in %d seconds, want %d in all", logged, h2Logged, windows, windows*logBudgetPerSecond)
	}
	for sec, n := range perSecond {
		if n > logBudgetPerSecond || countLines[sec] > 1 {
			t.Errorf("%s: %d handshake lines and %d count lines", sec, n, countLines[sec])
		}
	}
	if long > 0 {
		t.Errorf("%d lines longer than 2 KiB", long)
	}
	if truncated == 0 {
		t.Errorf("no handshake line was cut: the ALPN kind's error should be")
	}
	if limit := (windows + 2) * (logBudgetPerSecond + 1) * 2048; total > limit {
		t.Errorf("the flood wrote %d bytes of log, more than %d", total, limit)
	}
}

// TestTLSErrorLog: the HTTPS server's ErrorLog sends a failed handshake's
// line to the request log, byte for byte what slog would write (both
// formats), its fields escaped and cut; other lines go to the logger, at
// WARN, as every server's do.
func TestTLSErrorLog(t *testing.T) {
	at := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.UTC)
	long := strings.Repeat("\n\"\\\x00é", 200)
	for _, format := range []string{"text", "json"} {
		out := &logWriter{}
		reqLog := newRequestLog(format, slog.LevelInfo, out)
		reqLog.now = func() time.Time { return at }
		var other strings.Builder
		m := newServerMetrics(newLimiter(limiterConfig{Now: time.Now}), nil)
		el := tlsErrorLog(reqLog, m, newLogger(format, slog.LevelInfo, &other))
		el.Printf("http: TLS handshake error from %s: %v", "[::1]:4431", "tls: unsupported "+long)
		el.Printf("http: Accept error: %v; retrying in %v", "too many open files", time.Second)

		var want strings.Builder
		rec := slog.NewRecord(at, slog.LevelInfo, "TLS handshake failed", 0)
		rec.AddAttrs(slog.String("remote", "[::1]:4431"), slog.String("err", clipField("tls: unsupported "+long)))
		newLogger(format, slog.LevelInfo, &want).Handler().Handle(context.Background(), rec)
		if got := string(out.buf); got != want.String() {
			t.Errorf("%s:\n got %s\nwant %s", format, got, want.String())
		}
		if len(out.buf) > 600 || strings.Count(string(out.buf), "\n") != 1 {
			t.Errorf("%s: the line is %d bytes, %d line breaks", format, len(out.buf), strings.Count(string(out.buf), "\n"))
		}
		if !strings.Contains(other.String(), "Accept error") || !strings.Contains(other.String(), "WARN") || strings.Contains(other.String(), "handshake") {
			t.Errorf("%s: the other lines: %q", format, other.String())
		}
		if n := m.handshakeErrors.Load(); n != 1 {
			t.Errorf("%s: %d handshake errors counted, want 1", format, n)
		}
	}
}

// TestTLSErrorLogHTTP2Timeouts: HTTP/2's line about a client that sent
// its preface and then no SETTINGS frame ("timeout waiting for SETTINGS
// frames from ADDR", without the "http2: " prefix) is one that anyone can
// cause once a connection, 2 s each: it goes on the budget as http2, as
// HTTP/2's other lines do. 150 of them in one second write 100 lines and
// count 50.
func TestTLSErrorLogHTTP2Timeouts(t *testing.T) {
	at := time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC)
	out := &logWriter{}
	reqLog := newRequestLog("text", slog.LevelInfo, out)
	reqLog.now = func() time.Time { return at }
	var other strings.Builder
	m := newServerMetrics(newLimiter(limiterConfig{Now: time.Now}), nil)
	el := tlsErrorLog(reqLog, m, newLogger("text", slog.LevelInfo, &other))
	for i := range 150 {
		el.Printf("timeout waiting for SETTINGS frames from 127.0.0.1:%d", 1000+i)
	}
	reqLog.endSecond(at.Add(time.Second), true)
	if n := strings.Count(other.String(), "timeout waiting for SETTINGS frames"); n != logBudgetPerSecond {
		t.Errorf("%d lines written, want %d", n, logBudgetPerSecond)
	}
	var left int64
	for _, c := range logCounts(t, "text", string(out.buf)) {
		left += c["http2"]
	}
	if left != 50 {
		t.Errorf("%d counted as http2, want 50:\n%s", left, out.buf)
	}
	if n := m.handshakeErrors.Load(); n != 0 {
		t.Errorf("%d handshake errors counted, want 0", n)
	}
}

// waitingCerts is a certSource that cannot serve a certificate yet, as an
// ACME source is before its CA answers: the one source that waits.
type waitingCerts struct {
	fileCerts
	why string
}

func (c *waitingCerts) waiting() string { return c.why }

// TestReadyWaitsForCertificate: /readyz is 503 unavailable, with
// Retry-After and the source's reason (on the admin listener; the API
// listener says only that it waits), while the certificate source waits,
// and 200 once it does not (the database answering). The real server's
// sources (files) never wait: through it, /readyz is 200 on HTTPS and on
// the admin listener.
func TestReadyWaitsForCertificate(t *testing.T) {
	store := testStore(t, filepath.Join(t.TempDir(), "ready.db"), true)
	lim := newLimiter(limiterConfig{Now: time.Now})
	certs := &waitingCerts{why: "no answer yet from https://acme.example/directory: connection refused"}
	ready := newReadiness(store, time.Now)
	h := handleReady(ready, lim, certs, true) // the admin listener's
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	r := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	wantError(t, r, http.StatusServiceUnavailable, "unavailable")
	if e := decode[apiError](t, r); !strings.Contains(e.Message, "waiting for a certificate") || !strings.Contains(e.Message, certs.why) {
		t.Errorf("message %q", e.Message)
	}
	// The API listener's says why in a few words, not the CA's answer.
	rec = httptest.NewRecorder()
	handleReady(ready, lim, certs, false).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	r = response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	wantError(t, r, http.StatusServiceUnavailable, "unavailable")
	if e := decode[apiError](t, r); !strings.Contains(e.Message, "waiting for a certificate") || strings.Contains(e.Message, "acme.example") {
		t.Errorf("the API listener's message %q", e.Message)
	}
	if ra := rec.Header().Get("Retry-After"); ra != retryAfterUnavailable {
		t.Errorf("Retry-After %q", ra)
	}
	certs.why = ""
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("not waiting: %d %s", rec.Code, rec.Body)
	}

	certFile, keyFile := writeP256Pair(t, t.TempDir())
	ts := startServer(t, "--tls-cert", certFile, "--tls-key", keyFile)
	if r := ts.do(t, "GET", "/readyz", "", ""); r.status != http.StatusOK || !strings.HasPrefix(ts.base, "https://") {
		t.Errorf("%s/readyz: %d %s", ts.base, r.status, r.body)
	}
	ts.get(t, ts.admin+"/readyz")
}

// TestTLSMetrics: with --tls-cert the scrape has the certificate's expiry
// by name (its NotAfter) and the handshake errors, each with its help
// text and type; no ACME family without ACME; and none of them without
// TLS. The ACME family, which only an ACME source feeds, is read from
// the metrics alone, and checked by promtool with the rest when
// PETSTORE_TEST_PROMTOOL is set.
func TestTLSMetrics(t *testing.T) {
	certFile, keyFile := writeP256Pair(t, t.TempDir())
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, "--tls-cert", certFile, "--tls-key", keyFile)
	c, err := tls.Dial("tcp", strings.TrimPrefix(ts.base, "https://"), &tls.Config{ServerName: "nowhere.example", RootCAs: certPool(t, certFile)})
	if err == nil {
		c.Close()
		t.Fatal("a handshake for nowhere.example succeeded")
	}
	waitMetric(t, ts, "petstore_tls_handshake_errors_total", 1)
	scrape := ts.get(t, ts.admin+"/metrics")
	fams := parseExposition(t, scrape)
	exp := fams["petstore_tls_certificate_expiry_timestamp_seconds"]
	if exp == nil || exp.typ != "gauge" || exp.help != families["petstore_tls_certificate_expiry_timestamp_seconds"].help || len(exp.samples) != 1 ||
		exp.samples[0].labels["name"] != "127.0.0.1" || exp.samples[0].value != float64(leaf.NotAfter.Unix()) {
		t.Errorf("the expiry family: %+v; NotAfter %d", exp, leaf.NotAfter.Unix())
	}
	if f := fams["petstore_tls_handshake_errors_total"]; f == nil || f.typ != "counter" || f.help == "" {
		t.Errorf("the handshake family: %+v", f)
	}
	if fams["petstore_acme_failures_total"] != nil {
		t.Errorf("an ACME family without ACME")
	}
	for name, f := range fams {
		if strings.HasPrefix(name, "petstore_") && (f.help == "" || f.help != families[name].help || f.typ == "" || f.metadataAfterData) {
			t.Errorf("%s: help %q, type %q", name, f.help, f.typ)
		}
	}

	plainServer := startServer(t)
	for _, name := range []string{"petstore_tls_certificate_expiry_timestamp_seconds", "petstore_tls_handshake_errors_total", "petstore_acme_failures_total"} {
		if strings.Contains(plainServer.get(t, plainServer.admin+"/metrics"), name) {
			t.Errorf("%s without TLS", name)
		}
	}

	// An ACME source's families: two certificates, one failure.
	m := newServerMetrics(newLimiter(limiterConfig{Now: time.Now}), testStore(t, filepath.Join(t.TempDir(), "m.db"), true))
	notAfter := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	m.servesTLS(&fixedCerts{exp: map[string]time.Time{"b.example": notAfter, `a"\` + "\n.example": notAfter.Add(time.Hour)}}, true)
	m.acmeFailed()
	(*serverMetrics)(nil).acmeFailed() // a source without metrics counts nothing, and does not panic
	rec := httptest.NewRecorder()
	handleMetrics(m).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	fams = parseExposition(t, rec.Body.String())
	if f := fams["petstore_acme_failures_total"]; f == nil || f.typ != "counter" || len(f.samples) != 1 || f.samples[0].value != 1 {
		t.Errorf("the ACME family: %+v", f)
	}
	if f := fams["petstore_tls_certificate_expiry_timestamp_seconds"]; f == nil || len(f.samples) != 2 ||
		f.samples[0].labels["name"] != `a"\`+"\n.example" || f.samples[1].value != float64(notAfter.Unix()) {
		t.Errorf("the expiry family of two names: %+v", f)
	}
	for _, s := range []string{scrape, rec.Body.String()} {
		promtoolCheck(t, s)
	}
}

// fixedCerts is a certSource whose certificates expire at exp.
type fixedCerts struct {
	fileCerts
	exp map[string]time.Time
}

func (c *fixedCerts) expiries() map[string]time.Time { return c.exp }

// promtoolCheck runs promtool check metrics on scrape when
// PETSTORE_TEST_PROMTOOL names it: it must find nothing.
func promtoolCheck(t *testing.T, scrape string) {
	t.Helper()
	promtool := os.Getenv(promtoolEnv)
	if promtool == "" {
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("%s check metrics: %v\n%s\nthe scrape:\n%s", promtool, err, out, scrape)
	}
}
