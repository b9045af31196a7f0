package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rssOf is the resident memory of process pid, from /proc.
func rssOf(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for ln := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(ln, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// floodConn opens an HTTP/2 connection to addr and asks for path on
// streams streams, and never reads a byte: the answers fill the
// connection's flow-control window and then wait. It returns the
// connection, to be closed to end the flood, or nil when it failed (an
// error of the test: it may run in a goroutine of its own).
func floodConn(t *testing.T, addr string, roots *x509.CertPool, path string, streams int) net.Conn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		t.Errorf("flood dial: %v", err) // in a goroutine of the test's: no Fatal
		return nil
	}
	t.Cleanup(func() { c.Close() })
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", addr}, {":path", path}, {"accept-encoding", "gzip"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	fr.WriteSettings()
	for i := range streams {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(out.Bytes()); err != nil {
		t.Errorf("flood write: %v", err)
	}
	return c
}

// TestStreamFloodMemory floods the real HTTPS server, in a process of its
// own, from one address as issue 41's probe did at a CI's scale: 64
// HTTP/2 connections asking for the Swagger UI bundle on 100 streams each
// and reading nothing. The server's resident memory grows by less than
// docs/operations.md's bound for them (each connection 64 KiB, each of
// the address's 64 requests in flight 64 KiB, each stream a connection may
// hold 8 KiB: 22 MiB; before the bounds the flood took about 100 MiB), a
// client from another address (127.0.0.2) is served meanwhile, and once
// the flood is over the memory is given back (--memory-release-interval
// 500ms here) within a bounded wait: down to 16 MiB (releaseAbove) over
// what it was before. PETSTORE_FLOOD_BIN runs it against
// another binary (the build before: BENCHMARKS.md). Under the race
// detector (whose shadow memory the bounds do not cover) only the service
// of the other address is checked.
func TestStreamFloodMemory(t *testing.T) {
	const conns, streams = 64, 100
	db := t.TempDir() + "/petstore.db" // SQLite: the server's own memory, not a database's
	key := createKey(t, db, "--plan", "business", "--name", "flood")
	ca := newTestCA(t)
	_, certFile, keyFile := ca.issueFiles(t)
	bin := os.Getenv("PETSTORE_FLOOD_BIN")
	args := []string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off", "--tls-cert", certFile, "--tls-key", keyFile}
	if bin == "" {
		bin = os.Args[0]
		args = append(args, "--memory-release-interval", "500ms")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PETSTORE_TEST_MAIN=1")
	p := launchProcess(t, cmd)
	p.waitListening(t, 20*time.Second)
	pid := cmd.Process.Pid

	// The other client: another address, HTTP/2, a keyed list and the page.
	other := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext,
		TLSClientConfig:   &tls.Config{RootCAs: ca.pool},
		ForceAttemptHTTP2: true,
	}}
	served := func() error {
		for _, path := range []string{"/v1/categories", "/docs"} {
			req, _ := http.NewRequest("GET", "https://"+p.addr+path, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := other.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("GET %s: %d", path, resp.StatusCode)
			}
		}
		return nil
	}
	if err := served(); err != nil {
		t.Fatalf("before the flood: %v", err)
	}
	before := rssOf(t, pid)

	var mu sync.Mutex
	var flood []net.Conn
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			c := floodConn(t, p.addr, ca.pool, "/docs/swagger-ui-bundle.js", streams)
			if c == nil {
				return
			}
			mu.Lock()
			flood = append(flood, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	peak := before
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		peak = max(peak, rssOf(t, pid))
	}
	if err := served(); err != nil {
		t.Errorf("a client of another address during the flood: %v", err)
	}
	peak = max(peak, rssOf(t, pid))
	bound := int64(conns*64<<10 + maxInFlightPerAddr*64<<10 + conns*maxStreams*8<<10)
	t.Logf("resident memory: %d MiB before, %d MiB at the flood's peak (+%d MiB; bound +%d MiB)",
		before>>20, peak>>20, (peak-before)>>20, bound>>20)
	if raceEnabled {
		// The race detector's shadow memory grows with every goroutine
		// and is never given back: the bounds are of the real build.
		t.Logf("under the race detector: the memory bounds are not checked")
		return
	}
	if peak-before > bound {
		t.Errorf("the flood took %d MiB, over the bound of %d MiB", (peak-before)>>20, bound>>20)
	}

	for _, c := range flood {
		c.Close()
	}
	end := time.Now()
	var now int64
	for deadline := end.Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if now = rssOf(t, pid); now <= before+releaseAbove {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("resident memory still %d MiB 20 s after the flood (%d MiB before it)", now>>20, before>>20)
			break
		}
	}
	t.Logf("resident memory %d MiB %v after the flood", now>>20, time.Since(end).Round(100*time.Millisecond))
}

// TestInFlightShare: the middleware lets one address hold 64 requests in
// flight and refuses its 65th at once, 429 over HTTP/1.1 and a reset over
// HTTP/2 (http.ErrAbortHandler), while another address is served; past
// the total (--max-conns) it is 503. An HTTP/1.1 request counts until its
// handler returns, an HTTP/2 one until its context ends (its stream is let
// go).
func TestInFlightShare(t *testing.T) {
	f := newInFlight(maxInFlightPerAddr+2, maxInFlightPerAddr, proxyTrust{})
	release := make(chan struct{})
	var entered sync.WaitGroup
	h := f.limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			entered.Done()
			<-release
		}
		w.WriteHeader(200)
	}))
	send := func(from, path string, h2 bool) (w *httptest.ResponseRecorder, cancel context.CancelFunc, aborted bool) {
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequestWithContext(ctx, "GET", path, nil)
		r.RemoteAddr = from + ":1234"
		if h2 {
			r.ProtoMajor, r.Proto = 2, "HTTP/2.0"
		}
		w = httptest.NewRecorder()
		defer func() {
			if p := recover(); p != nil {
				if p != http.ErrAbortHandler {
					panic(p)
				}
				aborted = true
			}
		}()
		h.ServeHTTP(w, r)
		return w, cancel, false
	}
	var done sync.WaitGroup
	entered.Add(maxInFlightPerAddr)
	for range maxInFlightPerAddr {
		done.Go(func() { send("192.0.2.1", "/wait", false) })
	}
	entered.Wait()
	if w, _, _ := send("192.0.2.1", "/", false); w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("the 65th request of one address: %d (Retry-After %q), want 429", w.Code, w.Header().Get("Retry-After"))
	}
	if w, _, aborted := send("192.0.2.1", "/", true); !aborted || w.Code != 429 {
		t.Errorf("the 65th over HTTP/2: reset %v, status %d for the log; want a reset, 429", aborted, w.Code)
	}
	entered.Add(1)
	done.Go(func() { send("198.51.100.1", "/wait", false) }) // the total's 65th
	entered.Wait()
	if w, _, _ := send("203.0.113.1", "/", false); w.Code != 200 {
		t.Errorf("another address: %d, want 200", w.Code)
	}
	entered.Add(1)
	done.Go(func() { send("203.0.113.1", "/wait", false) }) // the total's 66th: the other one's answer left
	entered.Wait()
	if w, _, _ := send("203.0.113.9", "/", false); w.Code != 503 {
		t.Errorf("over the total: %d, want 503", w.Code)
	}
	close(release)
	done.Wait()
	if n := f.count(); n != 0 {
		t.Errorf("%d in flight once the HTTP/1.1 handlers returned, want 0", n)
	}
	w, cancel, _ := send("192.0.2.1", "/", true)
	if w.Code != 200 || f.count() != 1 {
		t.Errorf("HTTP/2 after the flood: %d, %d in flight after its handler; want 200, 1 until its stream ends", w.Code, f.count())
	}
	cancel()
	waitFor(t, 2*time.Second, "the HTTP/2 request to leave", func() bool { return f.count() == 0 })
	if got := f.refused[inFlightPerAddr].Load() + f.refused[inFlightTotal].Load(); got != 3 {
		t.Errorf("%d refusals counted, want 3", got)
	}
}

// TestReleaseMemory: once the process holds 64 MiB more than when
// releaseMemory started (a flood's buffers), it collects and gives the free
// memory back within a few of its intervals (50 ms here), and says so in
// the log; while more than 64 requests are in flight it waits.
func TestReleaseMemory(t *testing.T) {
	f := newInFlight(0, 0, proxyTrust{})
	for range releaseBelow + 1 {
		f.enter(netip.MustParseAddr("192.0.2.1"))
	}
	var logBuf syncBuffer
	logger := slog.New(slog.NewTextHandler(&logBuf, nil))
	// What earlier tests of this process left is given back first, so that
	// the runtime does not give it back during this one, under the 64 MiB.
	debug.FreeOSMemory()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.releaseMemory(ctx, 50*time.Millisecond, logger); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(100 * time.Millisecond) // its first reading, before the "flood"
	garbage := make([][]byte, 64)
	for i := range garbage {
		garbage[i] = bytes.Repeat([]byte{1}, 1<<20)
	}
	// Kept alive: the process holds 64 MiB more whatever the runtime's
	// own scavenger does meanwhile, so the test watches the trigger (what
	// is in flight, what is held), not the runtime.
	time.Sleep(300 * time.Millisecond)
	if strings.Contains(logBuf.String(), "memory given back") {
		t.Fatalf("memory given back with %d requests in flight:\n%s", f.count(), logBuf.String())
	}
	f.leave(netip.MustParseAddr("192.0.2.1"))
	waitFor(t, 5*time.Second, "the memory given back", func() bool { return strings.Contains(logBuf.String(), "memory given back") })
	t.Log(strings.TrimSpace(logBuf.String()))
	runtime.KeepAlive(garbage)
}
