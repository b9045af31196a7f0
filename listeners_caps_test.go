// listeners_caps_test.go tests DECISIONS.md section 17's connections
// through the real server: the caps per client address and in all (with a
// child's open-file limit set by prlimit), an HTTP/2 connection's first
// stream within --read-header-timeout, HTTP/2's protocol errors counted,
// and a drain that silent connections do not hold.

package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// dialFrom opens a TCP connection to addr from the loopback address src
// (Linux routes all of 127/8 to lo, so 127.0.0.2 is a second client).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	c, err := dialerFrom(src).Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// refusedFrom reports whether a connection to addr from src is closed by
// the server within 5 s of its accept: its connect, or a read on it, ends
// in a reset or EOF.
func refusedFrom(t *testing.T, src, addr string) bool {
	t.Helper()
	c, err := dialerFrom(src).Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	defer c.Close()
	return closedByServer(c, 5*time.Second)
}

// closedByServer reports whether the server has closed c (a read ends in
// EOF or a reset within d), and not only kept it open and silent.
func closedByServer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestConnCapPerAddress: with --max-conns-per-addr 4, one address holding
// four idle connections over the API and the plain listener together gets
// its fifth closed at accept on either, before any TLS (no handshake
// error is counted, no byte comes back); a second address (127.0.0.2)
// still creates a category over HTTPS and gets the plain listener's
// redirect, the admin listener's /metrics answers and counts the refusals
// by listener; the refusal is logged; and once one of the four closes, the
// address gets a connection again.
func TestConnCapPerAddress(t *testing.T) {
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "caps")
	ts := startTLSServer(t, context.Background(), db, key, "--http-addr", "127.0.0.1:0",
		"--max-conns-per-addr", "4", "--read-header-timeout", "30s")
	plain := plainAddr(t, ts.testServer)
	// The harness's client asked /healthz from 127.0.0.1: its connection
	// would be one of the four.
	ts.client.Transport.(*checkingTransport).base.(*http.Transport).CloseIdleConnections()
	waitMetric(t, ts.testServer, `petstore_connections_open{listener="api"}`, 0)

	var held []net.Conn
	for _, addr := range []string{ts.addr, ts.addr, ts.addr, plain} {
		held = append(held, dialFrom(t, "127.0.0.1", addr))
	}
	waitMetric(t, ts.testServer, `petstore_connections_open{listener="api"}`, 3)
	waitMetric(t, ts.testServer, `petstore_connections_open{listener="plain"}`, 1)
	for _, addr := range []string{plain, ts.addr} {
		if !refusedFrom(t, "127.0.0.1", addr) {
			t.Errorf("a fifth connection from 127.0.0.1 to %s was kept", addr)
		}
	}
	for i, c := range held {
		if closedByServer(c, 50*time.Millisecond) {
			t.Errorf("held connection %d was closed", i)
		}
	}

	other := clientFrom(t, "127.0.0.2", &tls.Config{RootCAs: ts.ca.pool})
	req, _ := http.NewRequest("POST", ts.base+"/v1/categories", strings.NewReader(`{"name":"from another address"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := other.Do(req)
	if err != nil {
		t.Fatalf("a create from 127.0.0.2: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("a create from 127.0.0.2: %d, want 201", resp.StatusCode)
	}
	resp, err = other.Get("http://" + plain + "/")
	if err != nil {
		t.Fatalf("the plain listener from 127.0.0.2: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect {
		t.Errorf("the plain listener from 127.0.0.2: %d, want 308", resp.StatusCode)
	}

	waitMetric(t, ts.testServer, `petstore_connections_refused_total{listener="api",reason="max_conns_per_addr"}`, 1)
	waitMetric(t, ts.testServer, `petstore_connections_refused_total{listener="plain",reason="max_conns_per_addr"}`, 1)
	waitMetric(t, ts.testServer, "petstore_tls_handshake_errors_total", 0)
	if log := ts.stderr.String(); !strings.Contains(log, `msg="connection refused" listener=api reason=max_conns_per_addr remote=127.0.0.1:`) {
		t.Errorf("no log line of the refusal:\n%s", log)
	}

	open := metricValue(ts.get(t, ts.admin+"/metrics"), `petstore_connections_open{listener="api"}`)
	held[0].Close()
	waitMetric(t, ts.testServer, `petstore_connections_open{listener="api"}`, int(open)-1)
	again := clientFrom(t, "127.0.0.1", &tls.Config{RootCAs: ts.ca.pool})
	resp, err = again.Get(ts.base + "/healthz")
	if err != nil {
		t.Fatalf("127.0.0.1 after one of its connections closed: %v", err)
	}
	resp.Body.Close()
}

// TestConnCapWithinOpenFileLimit runs the real binary with an open-file
// limit of 64 (prlimit; os/exec cannot set it) and no cap flag: the
// default --max-conns is then 80% of the limit less the database's and
// Redis's files. 80 idle connections are opened (more than the limit);
// those over the cap are closed at accept and counted, and the process
// never runs out of files: the admin listener answers /metrics and
// /readyz, a create and a list go through the database (and the limiter
// through Redis when PETSTORE_TEST_REDIS is set) on a connection opened
// before the flood, and SIGTERM still ends it with 0.
func TestConnCapWithinOpenFileLimit(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	const nofile, flood = 64, 80
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "files")
	args := []string{fmt.Sprintf("--nofile=%d:%d", nofile, nofile), os.Args[0], "serve", "--db", db,
		"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--read-header-timeout", "30s", "--shutdown-timeout", "5s", "--admin-max-conns", "4"}
	args = append(args, testRedisArgs(t, db)...)
	cmd := exec.Command(prlimit, args...)
	cmd.Env = append(os.Environ(), "PETSTORE_TEST_MAIN=1")
	p := launchProcess(t, cmd)
	p.waitListening(t, 10*time.Second)
	admin := "http://" + logAddr(adminRE, p.stderr.String())
	limit := nofile * 8 / 10
	if m := regexp.MustCompile(`max_conns=(\d+)`).FindStringSubmatch(p.stderr.String()); m == nil {
		t.Errorf("the listening line names no max_conns:\n%s", p.stderr)
	} else if limit, _ = strconv.Atoi(m[1]); limit < 1 || limit > nofile*8/10 {
		t.Fatalf("max_conns=%d with an open-file limit of %d, want 1 to 80%% of it", limit, nofile)
	}
	t.Logf("max_conns=%d under an open-file limit of %d", limit, nofile)

	// One keep-alive connection of a client, made before the flood.
	tr := &http.Transport{MaxConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	call := func(c *http.Client, method, url, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := call(client, "GET", "http://"+p.addr+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}

	conns := make([]net.Conn, 0, flood)
	closed := 0
	for i := range flood {
		c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if errors.Is(err, syscall.ECONNRESET) { // refused before the connect returned
			closed++
			continue
		}
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	var wg sync.WaitGroup
	var n atomic.Int64
	for _, c := range conns { // those kept wait out the 2 s, all at once
		wg.Go(func() {
			if closedByServer(c, 2*time.Second) {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	closed += int(n.Load())
	if want := flood - (limit - 1); closed < want {
		t.Errorf("%d of %d connections closed, want at least %d (max_conns=%d, one held before)", closed, flood, want, limit)
	}

	adminClient := &http.Client{Timeout: 5 * time.Second}
	if code, body := call(adminClient, "GET", admin+"/readyz", ""); code != 200 {
		t.Errorf("admin /readyz: %d %s", code, body)
	}
	if code, body := call(client, "POST", "http://"+p.addr+"/v1/categories", `{"name":"at the cap"}`); code != 201 {
		t.Errorf("a create at the cap: %d %s", code, body)
	}
	if code, body := call(client, "GET", "http://"+p.addr+"/v1/categories", ""); code != 200 || !strings.Contains(body, "at the cap") {
		t.Errorf("a list at the cap: %d %.200s", code, body)
	}
	code, metrics := call(adminClient, "GET", admin+"/metrics", "")
	if code != 200 {
		t.Fatalf("admin /metrics: %d", code)
	}
	refused := metricValue(metrics, `petstore_connections_refused_total{listener="api",reason="max_conns"}`)
	if refused < float64(flood-(limit-1)) {
		t.Errorf("refused %v at max_conns, want at least %d", refused, flood-(limit-1))
	}
	if os.Getenv(redisEnv) != "" {
		if v := metricValue(metrics, "petstore_ratelimit_backend_up"); v != 1 {
			t.Errorf("petstore_ratelimit_backend_up %v at the cap, want 1", v)
		}
		if v := metricValue(metrics, "petstore_redis_failures_total"); v != 0 {
			t.Errorf("petstore_redis_failures_total %v at the cap, want 0", v)
		}
	}
	if log := p.stderr.String(); strings.Contains(log, "too many open files") {
		t.Errorf("the process ran out of files:\n%s", log)
	}
	p.cmd.Process.Signal(os.Interrupt)
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGINT, want 0", code)
	}
}

// metricValue is the value of the sample named (with its labels) sample
// in the exposition text, or -1 when there is none.
func metricValue(text, sample string) float64 {
	for ln := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(ln), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// TestHTTP2FirstStreamWithinReadHeaderTimeout: an HTTP/2 connection that
// sends its preface and SETTINGS and then nothing is closed within
// --read-header-timeout (1 s here), as HTTP/1.1 closes one without a
// first request; one whose first stream came in time is served and kept
// past it for its next request (--idle-timeout applies then).
func TestHTTP2FirstStreamWithinReadHeaderTimeout(t *testing.T) {
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "h2")
	ts := startTLSServer(t, context.Background(), db, key, "--read-header-timeout", "1s")
	conn, fr := dialH2(t, ts.addr, ts.ca.pool)
	start := time.Now()
	conn.SetDeadline(start.Add(10 * time.Second))
	var err error
	for {
		var f http2.Frame
		if f, err = fr.ReadFrame(); err != nil {
			break
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			fr.WriteSettingsAck()
		}
	}
	took := time.Since(start)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection without a stream was still open after %v", took.Round(time.Millisecond))
	}
	if took > 3*time.Second {
		t.Errorf("a connection without a stream was closed after %v, want about 1 s", took.Round(time.Millisecond))
	}

	c := ts.clientOver(t, "h2")
	if resp, _, _ := getOn(t, c, ts.base, "/v1/categories", key); resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" {
		t.Fatalf("GET over h2: %d %s", resp.StatusCode, resp.Proto)
	}
	time.Sleep(1500 * time.Millisecond) // past --read-header-timeout
	resp, reused, _ := getOn(t, c, ts.base, "/v1/categories", key)
	if resp.StatusCode != 200 || !reused {
		t.Errorf("a second GET 1.5 s after the first: %d, reused %v; want 200 on the same connection", resp.StatusCode, reused)
	}
	waitMetric(t, ts.testServer, `petstore_connections_closed_total{reason="http2_no_stream"}`, 1)
}

// TestHTTP2ErrorsCounted: a frame that breaks HTTP/2 (a PING on a
// stream) ends its connection and is counted by type, as Go's HTTP/2
// server reports it.
func TestHTTP2ErrorsCounted(t *testing.T) {
	db := testDB(t)
	ts := startTLSServer(t, context.Background(), db, createKey(t, db, "--plan", "free"))
	conn, fr := dialH2(t, ts.addr, ts.ca.pool)
	if err := fr.WriteRawFrame(http2.FramePing, 0, 1, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var goaway *http2.GoAwayFrame
	for goaway == nil {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY: %v", err)
		}
		goaway, _ = f.(*http2.GoAwayFrame)
	}
	if goaway.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", goaway.ErrCode)
	}
	waitMetric(t, ts.testServer, `petstore_http2_errors_total{type="frame_ping_has_stream"}`, 1)
	fams := parseExposition(t, ts.get(t, ts.admin+"/metrics"))
	if f := fams["petstore_http2_errors_total"]; f == nil || f.typ != "counter" || f.help == "" {
		t.Errorf("petstore_http2_errors_total: %+v, want a counter with a help text", f)
	}
}

// TestDrainClosesSilentConnections: 50 connections that sent part of a
// ClientHello and an HTTP/2 connection without a stream, all silent for
// over a second, do not hold the drain: serve returns within 2 s of
// being stopped, not when newConnGrace (5 s after their accept) runs out.
// (TestShutdownAnswersANewConnection and TestTLSShutdownLateHTTP2Conn keep
// the grace of connections still sending.)
func TestDrainClosesSilentConnections(t *testing.T) {
	db := testDB(t)
	ts := startTLSServer(t, context.Background(), db, createKey(t, db, "--plan", "free"),
		"--read-header-timeout", "30s", "--shutdown-timeout", "10s")
	// A TLS record header announcing a 512-byte handshake message, and the
	// message's first bytes: a ClientHello that stops there.
	partial := []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}
	for range 50 {
		c := dialFrom(t, "127.0.0.1", ts.addr)
		if _, err := c.Write(partial); err != nil {
			t.Fatal(err)
		}
	}
	conn, fr := dialH2(t, ts.addr, ts.ca.pool)
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	for { // the server's SETTINGS, acked: then the connection is silent
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			fr.WriteSettingsAck()
			break
		}
	}
	time.Sleep(1200 * time.Millisecond) // each silent for over a second
	start := time.Now()
	ts.stop()
	took := time.Since(start)
	t.Logf("serve returned %v after it was stopped", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("serve returned %v after it was stopped, with silent connections open; want under 2 s", took.Round(time.Millisecond))
	}
	if log := ts.stderr.String(); strings.Contains(log, "requests still running") {
		t.Errorf("the drain ran into its timeout:\n%s", log)
	}
}

// TestConnCapFlags: the caps' flags and their PETSTORE_* variables are
// read, and bad values are bad usage (exit 2) naming the flag.
func TestConnCapFlags(t *testing.T) {
	db := t.TempDir() + "/caps.db"
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--max-conns-per-addr", "-1"}, nil, "--max-conns-per-addr"},
		{[]string{"--max-conns", "0"}, nil, "--max-conns"},
		{nil, map[string]string{"PETSTORE_MAX_CONNS": "-5"}, "PETSTORE_MAX_CONNS must be at least 1"},
		{nil, map[string]string{"PETSTORE_MAX_CONNS_PER_ADDR": "many"}, "PETSTORE_MAX_CONNS_PER_ADDR"},
	} {
		_, _, err := runCLI(t, tt.env, append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off"}, tt.args...)...)
		var msg strings.Builder
		if code := exitCode(err, &msg); code != 2 || !strings.Contains(msg.String(), tt.want) {
			t.Errorf("%v %v: exit %d %q, want 2 naming %s", tt.args, tt.env, code, msg.String(), tt.want)
		}
	}
	cfg, err := parseServe([]string{"--db", db}, envFrom(map[string]string{"PETSTORE_MAX_CONNS": "100", "PETSTORE_MAX_CONNS_PER_ADDR": "0"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.maxConns != 100 || !cfg.maxConnsSet || cfg.maxConnsPerAddr != 0 {
		t.Errorf("from the environment: max-conns %d (set %v), per addr %d; want 100 (set), 0", cfg.maxConns, cfg.maxConnsSet, cfg.maxConnsPerAddr)
	}
	cfg, err = parseServe([]string{"--db", db}, envFrom(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.maxConns != 4096 || cfg.maxConnsSet || cfg.maxConnsPerAddr != 256 {
		t.Errorf("defaults: max-conns %d (set %v), per addr %d; want 4096 (not set), 256", cfg.maxConns, cfg.maxConnsSet, cfg.maxConnsPerAddr)
	}
}

// TestConnAddrKey: a client is its IPv4 address, or its IPv6 address's
// /64 (one host usually holds a whole /64); an IPv4-mapped IPv6 address is
// the IPv4 one.
func TestConnAddrKey(t *testing.T) {
	for _, tt := range []struct{ a, b string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2:aaaa::1", "2001:db8:1:2::"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::"},
		{"fe80::1%eth0", "fe80::"},
	} {
		if got := connAddrKey(netip.MustParseAddr(tt.a)); got != netip.MustParseAddr(tt.b) {
			t.Errorf("connAddrKey(%s) = %s, want %s", tt.a, got, tt.b)
		}
	}
	if connAddrKey(netip.MustParseAddr("2001:db8:1:2::1")) == connAddrKey(netip.MustParseAddr("2001:db8:1:3::1")) {
		t.Error("two /64s are one client")
	}
}

// TestAutoMaxConns: --max-conns's default is 4096, or 80% of the
// open-file limit less the database's and Redis's files when lower, and
// never under 1.
func TestAutoMaxConns(t *testing.T) {
	sqlite := serveConfig{db: "petstore.db", dbMaxConns: 10}
	pg := serveConfig{db: "postgres://u@h/db", dbMaxConns: 10}
	pgRedis := serveConfig{db: "postgres://u@h/db", dbMaxConns: 10, redis: "redis://h"}
	for _, tt := range []struct {
		cfg    serveConfig
		nofile uint64
		want   int
	}{
		{sqlite, 1 << 20, 4096},
		{sqlite, 65536, 4096},
		{sqlite, 1024, 1024*8/10 - sqliteFiles},
		{pg, 1024, 1024*8/10 - (10 + postgresExtraFiles)},
		{pgRedis, 1024, 1024*8/10 - (10 + postgresExtraFiles) - redisFiles},
		{sqlite, 10, 1},
	} {
		if got := autoMaxConns(tt.cfg, tt.nofile); got != tt.want {
			t.Errorf("autoMaxConns(%s, redis %q, nofile %d) = %d, want %d", tt.cfg.db, tt.cfg.redis, tt.nofile, got, tt.want)
		}
	}
}

// TestDeployUnitRaisesOpenFiles: the systemd unit sets LimitNOFILE=65536,
// well over --max-conns's default of 4096 (systemd's own default soft
// limit is 1024).
func TestDeployUnitRaisesOpenFiles(t *testing.T) {
	if got := unitSettings(t, "deploy/petstore.service")["Service.LimitNOFILE"]; len(got) != 1 || got[0] != "65536" {
		t.Errorf("petstore.service LimitNOFILE=%v, want 65536", got)
	}
}

// TestConnCapExempt: an address the exemption names (--trusted-proxies)
// is not held to the cap per address but is to the cap in all; another
// address is held to both.
func TestConnCapExempt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	caps := newConnCaps(1, 3, 1, inPrefixes([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}), time.Second)
	capped := caps.listen(ln, listenerAPI)
	defer capped.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := capped.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	next := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			t.Cleanup(func() { c.Close() })
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("nothing accepted within 5 s")
			return nil
		}
	}
	dialFrom(t, "127.0.0.1", ln.Addr().String())
	dialFrom(t, "127.0.0.1", ln.Addr().String()) // over the cap of 1, but exempt
	next()
	next()
	dialFrom(t, "127.0.0.2", ln.Addr().String())
	next()
	if !refusedFrom(t, "127.0.0.2", ln.Addr().String()) { // over both caps
		t.Error("a second connection from 127.0.0.2 was kept")
	}
	if !refusedFrom(t, "127.0.0.1", ln.Addr().String()) { // over the cap in all
		t.Error("a fourth connection in all was kept")
	}
	if n := caps.refused[listenerAPI][refusedPerAddr].Load(); n != 1 {
		t.Errorf("%d refused at max_conns_per_addr, want 1 (127.0.0.2's second)", n)
	}
	if n := caps.refused[listenerAPI][refusedTotal].Load(); n != 1 {
		t.Errorf("%d refused at max_conns, want 1 (127.0.0.1's third)", n)
	}
}

// TestAdminMaxConns: the admin listener has its own cap (issue 41):
// with --admin-max-conns 3 and --max-conns 2, two idle connections fill
// the API, and the admin listener still answers /metrics on one of its
// own; its fourth connection is closed at accept and counted
// (reason="admin_max_conns"), and once one closes it answers again.
func TestAdminMaxConns(t *testing.T) {
	db := testDB(t)
	ts := startServerOn(t, db, createKey(t, db, "--plan", "free"), "--max-conns", "2", "--admin-max-conns", "3", "--read-header-timeout", "30s")
	adminAddr := strings.TrimPrefix(ts.admin, "http://")
	apiAddr := strings.TrimPrefix(ts.base, "http://")
	dial := func(addr string) net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// get asks for /metrics on c, an admin connection kept alive.
	get := func(c net.Conn) (int, string) {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: admin\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("admin /metrics: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The harness's client holds keep-alive connections to both: closed,
	// and seen closed, before counting.
	ts.client.Transport.(*checkingTransport).base.(*http.Transport).CloseIdleConnections()
	asker := dial(adminAddr)
	waitFor(t, 5*time.Second, "the harness's connections closed", func() bool {
		_, text := get(asker)
		return metricValue(text, `petstore_connections_open{listener="api"}`) == 0 &&
			metricValue(text, `petstore_connections_open{listener="admin"}`) == 1
	})
	for range 2 {
		dial(apiAddr)
	}
	// refused: a connection closed at accept, maybe before the dial
	// returned (a reset).
	refused := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return errors.Is(err, syscall.ECONNRESET)
		}
		defer c.Close()
		return closedByServer(c, 2*time.Second)
	}
	if !refused(apiAddr) {
		t.Fatal("a third API connection over --max-conns 2 was kept")
	}
	// The admin listener answers while the API is full: the asker, and
	// two idle connections.
	idle := []net.Conn{dial(adminAddr), dial(adminAddr)}
	if code, _ := get(asker); code != 200 {
		t.Fatalf("admin /metrics with the API full: %d", code)
	}
	if !refused(adminAddr) {
		t.Fatal("a fourth admin connection over --admin-max-conns 3 was kept")
	}
	idle[0].Close()
	waitFor(t, 5*time.Second, "the admin listener to take a connection again", func() bool {
		c, err := net.DialTimeout("tcp", adminAddr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		return !closedByServer(c, 300*time.Millisecond)
	})
	_, text := get(asker)
	if v := metricValue(text, `petstore_connections_refused_total{listener="admin",reason="admin_max_conns"}`); v < 1 {
		t.Errorf("admin refusals counted: %v, want at least 1", v)
	}
	if v := metricValue(text, `petstore_connections_refused_total{listener="api",reason="max_conns"}`); v < 1 {
		t.Errorf("API refusals counted: %v, want at least 1", v)
	}
	if v := metricValue(text, `petstore_admin_connections_max`); v != 3 {
		t.Errorf("petstore_admin_connections_max %v, want 3", v)
	}
}

// TestHTTP2WithoutPrefaceClosed: a TLS connection that agrees on h2 and
// then sends nothing, not even the preface, is closed within
// --read-header-timeout (1 s here; Go's own wait for the preface is 10 s)
// and counted (issue 41).
func TestHTTP2WithoutPrefaceClosed(t *testing.T) {
	db := testDB(t)
	ts := startTLSServer(t, context.Background(), db, createKey(t, db, "--plan", "free"), "--read-header-timeout", "1s")
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ts.addr, &tls.Config{RootCAs: ts.ca.pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(start.Add(8 * time.Second))
	_, err = io.Copy(io.Discard, c) // the server's SETTINGS, then its close
	took := time.Since(start)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection without a preface was still open after %v", took.Round(time.Millisecond))
	}
	if took > 3*time.Second {
		t.Errorf("a connection without a preface was closed after %v, want about 1 s", took.Round(time.Millisecond))
	}
	waitMetric(t, ts.testServer, `petstore_connections_closed_total{reason="http2_no_stream"}`, 1)
}
