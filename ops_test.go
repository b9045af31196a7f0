package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// heldCreate is a create whose body is not sent yet: with "Expect:
// 100-continue" the server says when its handler waits for the body, so the
// request is surely in flight.
type heldCreate struct {
	conn net.Conn
	br   *bufio.Reader
	body string
}

func holdCreate(t *testing.T, addr, key, name string) *heldCreate {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body := fmt.Sprintf(`{"name":%q}`, name)
	fmt.Fprintf(conn, "POST /v1/categories HTTP/1.1\r\nHost: petstore\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", key, len(body))
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("want 100 Continue, got %q, %v", line, err)
	}
	br.ReadString('\n') // the blank line after it
	return &heldCreate{conn, br, body}
}

// finish sends the body and returns the response's status and body.
func (h *heldCreate) finish(t *testing.T) (int, string) {
	t.Helper()
	io.WriteString(h.conn, h.body)
	resp, err := http.ReadResponse(h.br, nil)
	if err != nil {
		t.Fatalf("the request in flight got no response: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(got)
}

// TestDrainKeepsLogging checks that the log is still written out while the
// server drains after SIGTERM, and not only once it exits: a drain can take
// the whole --shutdown-timeout, and a process killed at the end of its
// grace period would lose every line held back.
func TestDrainKeepsLogging(t *testing.T) {
	db := filepath.Join(t.TempDir(), "drain.db")
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "1000", "--rpd", "1000")
	p := startProcess(t, db, "--shutdown-timeout", "30s")
	first := holdCreate(t, p.addr, key, "done while draining")
	second := holdCreate(t, p.addr, key, "holds the drain open")
	p.terminate(t)
	if status, got := first.finish(t); status != 201 {
		t.Fatalf("the first create got %d %s, want 201", status, got)
	}
	// The second create keeps the server draining; the first one's line
	// must reach stderr meanwhile (the log is flushed every 100 ms).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		log := p.stderr.String()
		if strings.Contains(log, `msg="shutting down"`) && strings.Contains(log, "status=201") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s into the drain, the shutdown and the finished create are not both on stderr:\n%s", log)
		}
	}
	if status, got := second.finish(t); status != 201 {
		t.Fatalf("the second create got %d %s, want 201", status, got)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	if n := strings.Count(p.stderr.String(), "status=201"); n != 2 {
		t.Errorf("%d request lines with status 201, want 2", n)
	}
}

// TestClosedStderrDoesNotKillServer checks that the server keeps serving
// when whoever read its stderr goes away: the log's writes fail with EPIPE
// instead of SIGPIPE ending the process in the middle of its requests.
func TestClosedStderrDoesNotKillServer(t *testing.T) {
	db := filepath.Join(t.TempDir(), "pipe.db")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off")
	cmd.Env = append(os.Environ(), "PETSTORE_TEST_MAIN=1")
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sc := bufio.NewScanner(r)
	addr := ""
	for addr == "" && sc.Scan() {
		addr = logAddr(listeningRE, sc.Text())
	}
	if addr == "" {
		t.Fatal("no listening line")
	}
	r.Close() // the log reader goes away
	// Each request logs a line, and the log is flushed every 100 ms: over a
	// second of requests, many writes meet the closed pipe.
	for i := range 20 {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("request %d after the log reader left: %v (process: %v)", i, err, processState(exited))
		}
		resp.Body.Close()
		time.Sleep(50 * time.Millisecond)
	}
	if st := processState(exited); st != "running" {
		t.Fatalf("the server process: %s", st)
	}
}

// processState says whether the process behind exited has ended, and how.
func processState(exited <-chan error) string {
	select {
	case err := <-exited:
		return fmt.Sprintf("exited: %v", err)
	default:
		return "running"
	}
}

func TestSIGTERMFinishesRequestsAndFlushes(t *testing.T) {
	clearOfMidnight(t, time.Minute)
	db := filepath.Join(t.TempDir(), "term.db")
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "1000", "--rpd", "1000")
	p := startProcess(t, db)
	ts := &testServer{base: "http://" + p.addr, key: key, client: contractClient(t, nil)}
	for range 5 {
		if r := ts.do(t, "GET", "/v1/categories", key, ""); r.status != 200 {
			t.Fatalf("status %d", r.status)
		}
	}

	held := holdCreate(t, p.addr, key, "in flight")
	p.terminate(t)
	if status, got := held.finish(t); status != 201 || !strings.Contains(got, `"in flight"`) {
		t.Fatalf("the request in flight got %d %s, want 201", status, got)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(p.stderr.String(), "msg=stopped") {
		t.Errorf("no 'stopped' line in the log")
	}

	if st, err := os.Stat(db + "-wal"); err == nil && st.Size() > 0 {
		t.Errorf("the WAL holds %d bytes after shutdown, want it checkpointed", st.Size())
	}
	s := testStore(t, db, false)
	counts, err := s.DayCounts(context.Background(), time.Now().UTC().Format(time.DateOnly))
	if err != nil {
		t.Fatal(err)
	}
	if counts[1] != 6 {
		t.Errorf("stored day count = %d after shutdown, want 6 (5 lists and the create)", counts[1])
	}
	var names []string
	s.EachCategory(context.Background(), func(c Category) error { names = append(names, c.Name); return nil })
	if len(names) != 1 || names[0] != "in flight" {
		t.Errorf("categories after shutdown: %q", names)
	}
}

func TestSlowHeadersAreCutOff(t *testing.T) {
	ts := startServer(t, "--read-header-timeout", "500ms")
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	io.WriteString(conn, "GET /v1/categories HTTP/1.1\r\nHost: petstore\r\n")
	closed := make(chan time.Duration, 1)
	go func() {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, conn) // returns when the server closes the connection
		closed <- time.Since(start)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case d := <-closed:
			if d > 5*time.Second {
				t.Fatalf("a client trickling its headers was cut off only after %v", d)
			}
			return
		case <-tick.C:
			// One header line every 100 ms, never the blank line that ends them.
			fmt.Fprintf(conn, "X-Trickle-%d: x\r\n", i)
			if i%3 == 0 {
				if r := ts.do(t, "GET", "/v1/categories", ts.key, ""); r.status != 200 {
					t.Errorf("a normal client during the trickle: %d", r.status)
				}
			}
			if time.Since(start) > 10*time.Second {
				t.Fatal("the trickling connection is still open after 10s")
			}
		}
	}
}
