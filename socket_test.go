package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// systemdSocket makes a listening TCP socket on 127.0.0.1 as systemd does
// for a socket unit, with raw system calls: in blocking mode, which is how
// systemd passes sockets (NonBlocking=no). Not net.Listen and File: Fd,
// which exec.Cmd.ExtraFiles calls, would switch such a socket to blocking
// mode under a server already accepting on it. The test holds it for its
// whole length, as systemd holds a socket unit's across restarts.
func systemdSocket(t *testing.T) (*os.File, string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "systemd socket")
	t.Cleanup(func() { f.Close() })
	return f, net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// activatedCommand returns the command that runs "petstore serve args" with
// socks as fds 3, 4, ... and env (LISTEN_FDS, LISTEN_FDNAMES, ...) in its
// environment; LISTEN_PID is the process's own pid, set by the shell that
// execs it, unless env sets it.
func activatedCommand(socks []*os.File, env []string, args ...string) *exec.Cmd {
	script := `LISTEN_PID=$$ exec "$0" "$@"`
	if slices.ContainsFunc(env, func(v string) bool { return strings.HasPrefix(v, "LISTEN_PID=") }) {
		script = `exec "$0" "$@"`
	}
	cmd := exec.Command("sh", append([]string{"-c", script, os.Args[0], "serve"}, args...)...)
	cmd.Env = append(append(os.Environ(), "PETSTORE_TEST_MAIN=1"), env...)
	cmd.ExtraFiles = socks
	return cmd
}

// launchActivated starts serve on db with sock passed as the API's socket.
func launchActivated(t *testing.T, sock *os.File, db string, args ...string) *serverProcess {
	t.Helper()
	all := append([]string{"--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off"}, args...)
	return launchProcess(t, activatedCommand([]*os.File{sock}, []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=api"}, all...))
}

// TestRestartUnderLoadRefusesNothing: with its socket passed by socket
// activation, the real server is restarted three times (SIGTERM to the old
// process and the new one started at once, as systemd's socket unit allows)
// under a steady load of GETs and keyed POSTs from 8 clients: no request
// fails, every acknowledged create is there at the end, and every old
// process exits 0. On SQLite each new process waits for the old one's
// serve lock; on PostgreSQL both serve for a moment.
func TestRestartUnderLoadRefusesNothing(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		restartUnderLoad(t, filepath.Join(t.TempDir(), "petstore.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		restartUnderLoad(t, postgresSchema(t, needPostgres(t)))
	})
}

func restartUnderLoad(t *testing.T, db string) {
	const (
		restarts  = 3
		clients   = 8
		maxRounds = 1500             // per client: bounds the requests
		maxTime   = 60 * time.Second // bounds the test
	)
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "100000000", "--rpd", "100000000")
	sock, addr := systemdSocket(t)
	start := func() *serverProcess {
		return launchActivated(t, sock, db, "--shutdown-timeout", "5s")
	}
	p := start()
	p.waitListening(t, 10*time.Second)
	if p.addr != addr || !strings.Contains(p.stderr.String(), "systemd=api") {
		t.Fatalf("the server listens on %s, want the passed socket %s, and its log should say systemd=api:\n%s", p.addr, addr, p.stderr.String())
	}
	base := "http://" + addr

	// Each client has a transport, so a keep-alive connection, of its own:
	// the old process closes them when idle, and Go's client sends the
	// request again on a new connection (GET, and POST with an
	// Idempotency-Key).
	ctx, abort := context.WithCancel(context.Background())
	send := func(c *http.Client, method, path, body string, header ...string) (int, []byte, error) {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body) // NewRequest sets GetBody: the body can be sent again
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
	}
	status, body, err := send(newClient(), "POST", "/v1/categories", `{"name":"restarts"}`)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("create the category: %d %s %v", status, body, err)
	}
	var cat Category
	if err := json.Unmarshal(body, &cat); err != nil {
		t.Fatal(err)
	}

	type acked struct {
		id   int64
		name string
	}
	var (
		mu       sync.Mutex
		created  []acked
		failures []string
		requests atomic.Int64
		slowest  atomic.Int64 // nanoseconds
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	timed := func(c *http.Client, method, path, body string, header ...string) (int, []byte, error) {
		t0 := time.Now()
		status, b, err := send(c, method, path, body, header...)
		if d := int64(time.Since(t0)); d > slowest.Load() {
			slowest.Store(d) // racy maximum: good enough for a log line
		}
		requests.Add(1)
		return status, b, err
	}
	stop := make(chan struct{})
	var (
		wg, exits sync.WaitGroup
		stopOnce  sync.Once
	)
	halt := func() {
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
		exits.Wait()
	}
	// A test that fails half way cuts its clients' requests short (the
	// socket would keep them waiting) and waits for them and for the old
	// processes before the processes are killed.
	t.Cleanup(func() {
		abort()
		halt()
	})
	deadline := time.Now().Add(maxTime)
	for c := range clients {
		wg.Go(func() {
			client := newClient()
			var last int64
			for i := range maxRounds {
				select {
				case <-stop:
					return
				default:
				}
				if time.Now().After(deadline) {
					return
				}
				name := fmt.Sprintf("c%d-%d", c, i)
				status, b, err := timed(client, "POST", "/v1/pets", fmt.Sprintf(`{"name":%q,"categoryId":%d}`, name, cat.ID),
					"Idempotency-Key", fmt.Sprintf("restart-%d-%d", c, i))
				if err != nil || status != http.StatusCreated {
					fail("POST /v1/pets %s: %d %s %v", name, status, b, err)
					continue
				}
				var pet Pet
				if err := json.Unmarshal(b, &pet); err != nil || pet.Name != name {
					fail("POST /v1/pets %s: %s %v", name, b, err)
					continue
				}
				mu.Lock()
				created = append(created, acked{pet.ID, name})
				mu.Unlock()
				if last != 0 {
					if status, b, err := timed(client, "GET", "/v1/pets/"+strconv.FormatInt(last, 10), ""); err != nil || status != http.StatusOK {
						fail("GET /v1/pets/%d: %d %s %v", last, status, b, err)
					}
				}
				last = pet.ID
				if status, b, err := timed(client, "GET", "/v1/categories", ""); err != nil || status != http.StatusOK {
					fail("GET /v1/categories: %d %s %v", status, b, err)
				}
			}
		})
	}
	// progress waits until n more creates were acknowledged: the load runs
	// against the server in place before the next restart.
	progress := func(n int) {
		t.Helper()
		mu.Lock()
		want := len(created) + n
		mu.Unlock()
		for limit := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			got, failed := len(created), slices.Clone(failures)
			mu.Unlock()
			if got >= want {
				return
			}
			if time.Now().After(limit) {
				t.Fatalf("only %d of %d creates acknowledged within 20s; failures: %q", got, want, failed)
			}
		}
	}
	sqlite := !isPostgresURL(db)
	for r := range restarts {
		progress(100)
		// A create whose body the old process is still reading when the
		// restart begins keeps it draining until the new one is on its
		// way: on SQLite the new one must wait for the lock, on PostgreSQL
		// both serve at once.
		slow := slowCreate(t, base, key, fmt.Sprintf(`{"name":"slow-%d","categoryId":%d}`, r, cat.ID))
		old := p
		if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p = start() // at once
		exits.Go(func() {
			select {
			case err := <-old.exited:
				if err != nil {
					t.Errorf("old process %d: %v, want exit 0:\n%s", old.cmd.Process.Pid, err, old.stderr.String())
				}
			case <-time.After(15 * time.Second):
				t.Errorf("old process %d did not exit within 15s of SIGTERM", old.cmd.Process.Pid)
			}
		})
		if sqlite {
			p.waitLog(t, "waiting for the previous serve to let go of the database", 20*time.Second)
		} else {
			p.waitListening(t, 20*time.Second)
		}
		a, err := slow.finish()
		if err != nil {
			fail("the create sent across restart %d: %v", r, err)
		} else {
			mu.Lock()
			created = append(created, acked{a.ID, a.Name})
			mu.Unlock()
		}
		if sqlite {
			p.waitListening(t, 20*time.Second)
		}
	}
	progress(100)
	halt()

	mu.Lock()
	defer mu.Unlock()
	for _, f := range failures {
		t.Errorf("failed request: %s", f)
	}
	client := newClient()
	missing := 0
	for _, a := range created {
		status, b, err := send(client, "GET", "/v1/pets/"+strconv.FormatInt(a.id, 10), "")
		var pet Pet
		if err != nil || status != http.StatusOK || json.Unmarshal(b, &pet) != nil || pet.Name != a.name {
			missing++
			if missing <= 10 {
				t.Errorf("acknowledged pet %d %q: %d %s %v", a.id, a.name, status, b, err)
			}
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Errorf("the last process exited %d, want 0", code)
	}
	t.Logf("%d restarts, %d requests, %d creates acknowledged, %d missing, slowest request %v",
		restarts, requests.Load(), len(created), missing, time.Duration(slowest.Load()).Round(time.Millisecond))
}

// slowRequest is a create whose body is held back: see slowCreate.
type slowRequest struct {
	body *io.PipeWriter
	rest string
	done chan error
	pet  Pet
}

// slowCreate sends a keyed POST /v1/pets with body to base and returns once
// the server has begun reading its body (it answered "100 Continue"), so
// that the server process has it in hand; the rest of the body waits for
// finish.
func slowCreate(t *testing.T, base, key, body string) *slowRequest {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest("POST", base+"/v1/pets", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "slow-"+body)
	req.Header.Set("Expect", "100-continue")
	continued := make(chan struct{})
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got100Continue: func() { close(continued) },
	}))
	s := &slowRequest{body: pw, rest: body[1:], done: make(chan error, 1)}
	go func() {
		pw.Write([]byte(body[:1])) // the transport reads it only after the 100
	}()
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 20 * time.Second}, Timeout: 30 * time.Second}
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			s.done <- err
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated {
			s.done <- fmt.Errorf("%d %s", resp.StatusCode, b)
			return
		}
		s.done <- json.Unmarshal(b, &s.pet)
	}()
	select {
	case <-continued:
	case err := <-s.done:
		t.Fatalf("the slow create ended before its body was sent: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no 100 Continue within 10s")
	}
	return s
}

// finish sends the rest of the body and returns the created pet.
func (s *slowRequest) finish() (Pet, error) {
	io.WriteString(s.body, s.rest)
	s.body.Close()
	select {
	case err := <-s.done:
		return s.pet, err
	case <-time.After(30 * time.Second):
		return Pet{}, fmt.Errorf("no answer within 30s")
	}
}

// TestActivatedServeWaitsForTheLock: on SQLite, a serve started by socket
// activation while another holds the database's serve lock waits for it up
// to --shutdown-timeout plus 5 s, saying so, and starts once the lock is
// let go; a holder that does not let go makes it exit 1 naming the holder's
// pid after that time. A serve started without socket activation exits at
// once, as before.
func TestActivatedServeWaitsForTheLock(t *testing.T) {
	pid := strconv.Itoa(os.Getpid()) // the holder: this test
	hold := func(t *testing.T) (string, func()) {
		db := filepath.Join(t.TempDir(), "petstore.db")
		createKey(t, db, "--plan", "free")
		release, err := sqliteLockServing(t.Context(), db, 0)
		if err != nil {
			t.Fatal(err)
		}
		return db, release
	}
	wantHeld := func(t *testing.T, p *serverProcess, within time.Duration) (time.Duration, string) {
		t.Helper()
		t0 := time.Now()
		code := p.wait(t, within)
		took := time.Since(t0)
		log := p.stderr.String()
		if code != 1 || !strings.Contains(log, "in use by pid "+pid) || strings.Contains(log, "msg=listening") {
			t.Errorf("exit %d, want 1 with a line naming pid %s and no listening:\n%s", code, pid, log)
		}
		return took, log
	}

	t.Run("lets go", func(t *testing.T) {
		t.Parallel()
		db, release := hold(t)
		sock, addr := systemdSocket(t)
		p := launchActivated(t, sock, db, "--shutdown-timeout", "1s")
		p.waitLog(t, "waiting for the previous serve", 10*time.Second)
		if log := p.stderr.String(); !strings.Contains(log, "holder_pid="+pid) || !strings.Contains(log, "wait=6s") {
			t.Errorf("the wait's line should name holder_pid=%s and wait=6s:\n%s", pid, log)
		}
		// A client that connects now waits in the socket's queue.
		got := make(chan string, 1)
		go func() {
			c := &http.Client{Timeout: 20 * time.Second}
			resp, err := c.Get("http://" + addr + "/healthz")
			if err != nil {
				got <- err.Error()
				return
			}
			resp.Body.Close()
			got <- strconv.Itoa(resp.StatusCode)
		}()
		release()
		t0 := time.Now()
		p.waitListening(t, 10*time.Second)
		if took := time.Since(t0); took > 3*time.Second {
			t.Errorf("listening came %v after the lock was let go", took)
		}
		if s := <-got; s != "200" {
			t.Errorf("the request sent during the wait: %s, want 200", s)
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t, 10*time.Second); code != 0 {
			t.Errorf("exit %d after SIGTERM, want 0", code)
		}
	})

	t.Run("does not let go", func(t *testing.T) {
		t.Parallel()
		db, release := hold(t)
		defer release()
		sock, _ := systemdSocket(t)
		p := launchActivated(t, sock, db, "--shutdown-timeout", "1s")
		took, log := wantHeld(t, p, 20*time.Second)
		if took < 5500*time.Millisecond || took > 12*time.Second {
			t.Errorf("exited after %v, want about 6s (--shutdown-timeout 1s plus 5s)", took)
		}
		if !strings.Contains(log, "waited 6s") {
			t.Errorf("the last line should say how long it waited:\n%s", log)
		}
	})

	t.Run("stopped while waiting", func(t *testing.T) {
		t.Parallel()
		db, release := hold(t)
		defer release()
		sock, _ := systemdSocket(t)
		p := launchActivated(t, sock, db, "--shutdown-timeout", "10s")
		p.waitLog(t, "waiting for the previous serve", 10*time.Second)
		p.cmd.Process.Signal(syscall.SIGTERM)
		// It would wait 15 s for the lock if SIGTERM did not end the wait.
		code := p.wait(t, 5*time.Second)
		if log := p.stderr.String(); code != 0 || !strings.Contains(log, "stopped while waiting") || strings.Contains(log, "msg=listening") {
			t.Errorf("exit %d after SIGTERM during the wait, want 0 with a line saying it stopped while waiting:\n%s", code, log)
		}
	})

	t.Run("without LISTEN_FDS", func(t *testing.T) {
		t.Parallel()
		db, release := hold(t)
		defer release()
		cmd := exec.Command(os.Args[0], "serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off", "--shutdown-timeout", "10s")
		cmd.Env = append(os.Environ(), "PETSTORE_TEST_MAIN=1")
		p := launchProcess(t, cmd)
		// It would wait 15 s if it waited at all.
		if took, log := wantHeld(t, p, 5*time.Second); strings.Contains(log, "waiting") {
			t.Errorf("a serve without socket activation waited (%v):\n%s", took, log)
		}
	})
}

// TestServeWithoutActivationBindsItsAddr: a plain serve binds --addr; one
// given LISTEN_PID of another process ignores the passed socket and binds
// --addr too; one given sockets it cannot take exits 1 with one line.
func TestServeWithoutActivationBindsItsAddr(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db")
	// A free port, for --addr: a plain serve must bind what it is told.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := ln.Addr().String()
	ln.Close()
	p := startProcess(t, db, "--addr", free)
	if p.addr != free || strings.Contains(p.stderr.String(), "systemd=") {
		t.Errorf("plain serve listens on %s, want --addr %s and no systemd attribute:\n%s", p.addr, free, p.stderr.String())
	}
	if resp, err := http.Get("http://" + free + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /healthz on --addr: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, 10*time.Second)

	sock, addr := systemdSocket(t)
	other := launchProcess(t, activatedCommand([]*os.File{sock}, []string{"LISTEN_PID=1", "LISTEN_FDS=1", "LISTEN_FDNAMES=api"},
		"--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off"))
	other.waitListening(t, 10*time.Second)
	if other.addr == addr || strings.Contains(other.stderr.String(), "systemd=") {
		t.Errorf("with LISTEN_PID of another process, serve listens on %s (the passed socket is %s); want an address of its own:\n%s", other.addr, addr, other.stderr.String())
	}
	other.cmd.Process.Signal(syscall.SIGTERM)
	other.wait(t, 10*time.Second)

	second, _ := systemdSocket(t)
	for _, names := range []string{"api:metrics", "api:api"} {
		bad := launchProcess(t, activatedCommand([]*os.File{sock, second}, []string{"LISTEN_FDS=2", "LISTEN_FDNAMES=" + names},
			"--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off"))
		code := bad.wait(t, 10*time.Second)
		log := bad.stderr.String()
		if code != 1 || strings.Count(log, "\n") != 1 || !strings.Contains(log, "LISTEN_FDNAMES=\""+names+"\"") {
			t.Errorf("sockets named %s: exit %d, want 1 and one line naming them:\n%s", names, code, log)
		}
	}
}

// TestShutdownWithIdleConnectionsIsPrompt: the wait for connections'
// first requests at shutdown ends for connections that have had one, over
// HTTP/1.1 and HTTP/2 alike (HTTP/2 says so through ConnState from its own
// server): with idle connections of both open, SIGTERM ends the process
// well before the 5 s that a connection still counted as new would hold it.
func TestShutdownWithIdleConnectionsIsPrompt(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db")
	key := createKey(t, db, "--plan", "free")
	ca := newTestCA(t)
	_, certFile, keyFile := ca.issueFiles(t)
	p := startProcess(t, db, "--tls-cert", certFile, "--tls-key", keyFile, "--shutdown-timeout", "10s")
	for _, proto := range []string{"h2", "http/1.1"} {
		resp, _, _ := getOn(t, &http.Client{Transport: transportOver(ca.pool, proto)}, "https://"+p.addr, "/v1/categories", key)
		if resp.Proto != map[string]string{"h2": "HTTP/2.0", "http/1.1": "HTTP/1.1"}[proto] {
			t.Fatalf("asked for %s, got %s", proto, resp.Proto)
		}
	}
	t0 := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	took := time.Since(t0)
	t.Logf("stopped %v after SIGTERM", took.Round(time.Millisecond))
	// HTTP/2's GOAWAY alone takes a second (net/http closes the connection
	// a second after sending it).
	if took > 4*time.Second {
		t.Errorf("stopped %v after SIGTERM with two idle connections, want well under the 5 s a new connection may hold it", took)
	}
}

// TestLoneAdminSocket: a lone socket named admin (systemd-socket-activate
// --fdname=admin, or petstore-admin.socket without petstore.socket) is the
// admin listener's, even with --admin-addr off, and the API binds --addr:
// never the API on the address meant for /metrics.
func TestLoneAdminSocket(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db")
	sock, addr := systemdSocket(t)
	p := launchProcess(t, activatedCommand([]*os.File{sock}, []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=admin"},
		"--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off"))
	p.waitListening(t, 10*time.Second)
	log := p.stderr.String()
	if p.addr == addr || logAddr(adminRE, log) != addr || !strings.Contains(log, "systemd=admin") {
		t.Fatalf("API on %s and admin on %s, want the API on --addr and the admin listener on the passed %s (systemd=admin):\n%s", p.addr, logAddr(adminRE, log), addr, log)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /metrics on the passed socket: %d, want 200", resp.StatusCode)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
}

// TestActivatedServeStopsAtOnce: a server on a socket passed in blocking
// mode, with no client to wake its accept, stops at once on SIGTERM: the
// accept waits in Go's poller, which closing the listener ends, never in
// accept(2) on a blocking socket.
func TestActivatedServeStopsAtOnce(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db")
	sock, _ := systemdSocket(t)
	p := launchActivated(t, sock, db)
	p.waitListening(t, 10*time.Second)
	time.Sleep(100 * time.Millisecond) // let its accept start waiting
	t0 := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	t.Logf("stopped %v after SIGTERM", time.Since(t0).Round(time.Millisecond))
}

// TestSocketRolesOf: which listener each passed socket is for.
func TestSocketRolesOf(t *testing.T) {
	for _, tc := range []struct {
		n     int
		names string
		want  []string // nil: an error
	}{
		{1, "", []string{"api"}},
		{1, "api", []string{"api"}},
		{1, "petstore.socket", []string{"api"}}, // systemd's default name: the unit's
		{1, "unknown", []string{"api"}},         // any other name too
		{1, "admin", []string{"admin"}},         // but a lone socket named so is that listener's
		{1, "http", []string{"http"}},
		{2, "api:admin", []string{"api", "admin"}},
		{3, "admin:http:api", []string{"admin", "http", "api"}},
		{2, "", nil},
		{2, "api:metrics", nil},
		{2, "api:api", nil},
		{2, "api", nil},
		{1, "api:admin", nil},
		{4, "api:http:admin:api", nil},
	} {
		got, err := socketRolesOf(tc.n, tc.names)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%d sockets named %q: %v, want an error", tc.n, tc.names, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%d sockets named %q: %v, %v; want %v", tc.n, tc.names, got, err, tc.want)
		}
	}
}

// TestSystemdListenersReadsTheVariablesOnce: the variables are unset
// whatever they said, so that no child of serve takes them for its own;
// LISTEN_PID of another process means no sockets; a malformed value is an
// error.
func TestSystemdListenersReadsTheVariablesOnce(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		pid, fds, names string
		wantErr         bool
	}{
		{"1", "1", "api", false}, // another process's
		{self, "0", "", false},
		{"", "", "api", false},
		{"x", "1", "", true},
		{self, "one", "", true},
		{self, "-1", "", true},
		{self, "4", "", true},
	} {
		t.Setenv("LISTEN_PID", tc.pid)
		t.Setenv("LISTEN_FDS", tc.fds)
		t.Setenv("LISTEN_FDNAMES", tc.names)
		l, err := systemdListeners(serveConfig{})
		if (err != nil) != tc.wantErr || l.api != nil || len(l.fromSystemd) != 0 {
			t.Errorf("LISTEN_PID=%s LISTEN_FDS=%s: %+v, %v; want no sockets and an error: %v", tc.pid, tc.fds, l, err, tc.wantErr)
		}
		for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
			if _, set := os.LookupEnv(v); set {
				t.Errorf("LISTEN_PID=%s LISTEN_FDS=%s: %s is still set", tc.pid, tc.fds, v)
			}
		}
	}
}

// TestPassedListenerRefusesWhatIsNoListener: a socket unit's mistakes
// (Accept=yes passes a connection; ListenDatagram=; a Unix socket) are
// refused with a line that says what to change, and a listening TCP socket
// is taken.
func TestPassedListenerRefusesWhatIsNoListener(t *testing.T) {
	raw := func(domain, typ int) int {
		fd, err := syscall.Socket(domain, typ|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
		return fd
	}
	unbound := raw(syscall.AF_INET, syscall.SOCK_STREAM)
	udp := raw(syscall.AF_INET, syscall.SOCK_DGRAM)
	unixSock := raw(syscall.AF_UNIX, syscall.SOCK_STREAM)
	file, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, tc := range []struct {
		fd   int
		want string
	}{
		{unbound, "Accept=no"},
		{udp, "ListenStream="},
		{unixSock, "not a TCP socket"},
		{int(file.Fd()), "not a socket"},
	} {
		if _, err := passedListener(tc.fd, "api"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("fd %d: %v, want an error saying %q", tc.fd, err, tc.want)
		}
	}

	sock, addr := systemdSocket(t)
	dup, err := syscall.Dup(int(sock.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := passedListener(dup, "api") // closes dup: the listener has its own
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln.Addr().String() != addr {
		t.Errorf("listener on %s, want %s", ln.Addr(), addr)
	}
}

// socketActivateEnv names the variable that points TestSystemdSocketActivate
// at systemd-socket-activate (Debian's systemd package).
const socketActivateEnv = "PETSTORE_TEST_SOCKET_ACTIVATE"

// TestSystemdSocketActivate runs the real program under systemd's own
// implementation of the protocol, systemd-socket-activate (Debian's systemd
// package), which binds the socket, waits for a first connection and then
// execs serve with it: the connection that woke it is answered, the log says
// systemd=api, and SIGTERM stops it with exit 0.
func TestSystemdSocketActivate(t *testing.T) {
	bin := os.Getenv(socketActivateEnv)
	if bin == "" {
		t.Skip("set " + socketActivateEnv + "=/usr/bin/systemd-socket-activate to run socket activation through systemd's own tool")
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("%s=%s: %v", socketActivateEnv, bin, err)
	}
	db := filepath.Join(t.TempDir(), "petstore.db")
	var p *serverProcess
	var addr string
	// It takes no port 0: try a free one, and another should something
	// take it first.
	for attempt := 0; p == nil; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
		cmd := exec.Command(bin, "-l", addr, "--fdname=api", "-E", "PETSTORE_TEST_MAIN=1",
			os.Args[0], "serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off")
		try := launchProcess(t, cmd)
		for limit := time.Now().Add(10 * time.Second); !strings.Contains(try.stderr.String(), "Listening on "+addr); time.Sleep(5 * time.Millisecond) {
			select {
			case err := <-try.exited:
				if attempt == 2 {
					t.Fatalf("systemd-socket-activate exited (%v):\n%s", err, try.stderr.String())
				}
				try = nil
			default:
			}
			if try == nil {
				break
			}
			if time.Now().After(limit) {
				t.Fatalf("systemd-socket-activate did not listen within 10s:\n%s", try.stderr.String())
			}
		}
		p = try
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("the first connection, which starts serve: %v\n%s", err, p.stderr.String())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %d, want 200", resp.StatusCode)
	}
	p.waitListening(t, 10*time.Second)
	if p.addr != addr || !strings.Contains(p.stderr.String(), "systemd=api") {
		t.Errorf("serve listens on %s, want the passed %s with systemd=api in its log:\n%s", p.addr, addr, p.stderr.String())
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
}

// TestShutdownAnswersANewConnection: a connection the server accepted just
// before SIGTERM, whose first request arrives after it, gets its answer.
// During a restart that is every client that connected a moment before the
// old process stopped accepting (one without keep-alive, or in the middle
// of its TLS handshake): on a fresh connection no client sends the request
// again, so an answerless close there would be a failed request.
func TestShutdownAnswersANewConnection(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db")
	p := startProcess(t, db, "--shutdown-timeout", "10s")
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Half the request now, so that the server's read of it has begun.
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: petstore\r\n"); err != nil {
		t.Fatal(err)
	}
	// The server accepts in order: once a later connection is answered,
	// this one has been accepted.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}).Get("http://" + p.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	p.terminate(t) // the listener is closed: the shutdown has begun
	if _, err := io.WriteString(conn, "\r\n"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the request of a connection accepted before SIGTERM got no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %d, want 200", resp.StatusCode)
	}
	if code := p.wait(t, 15*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	if log := p.stderr.String(); strings.Contains(log, "level=WARN") {
		t.Errorf("a warning in the shutdown:\n%s", log)
	}
}

// unitSettings reads a systemd unit file: each "Section.Key" with the
// values of its lines, in order (a key may repeat; a value may list
// several names, split on spaces here).
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string][]string{}
	section := ""
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		default:
			k, v, _ := strings.Cut(line, "=")
			settings[section+"."+k] = append(settings[section+"."+k], strings.Fields(v)...)
		}
	}
	return settings
}

// TestDeploySocketUnits: the socket units in deploy/ are ones serve takes
// (one listening stream socket each, named api, http or admin, each name
// once, for petstore.service), and the service requires the API's alone,
// so that an optional one (admin, http) is on exactly when it is enabled:
// "systemctl disable --now" turns it off. A Wants= would start it with the
// service all the same, and serve would take the socket.
func TestDeploySocketUnits(t *testing.T) {
	units, _ := filepath.Glob("deploy/*.socket")
	if len(units) != len(socketRoles) {
		t.Fatalf("socket units %v, want one for each of %v", units, socketRoles)
	}
	service := unitSettings(t, "deploy/petstore.service")
	seen := map[string]string{}
	for _, u := range units {
		s := unitSettings(t, u)
		name := filepath.Base(u)
		fdName := strings.Join(s["Socket.FileDescriptorName"], " ")
		if !slices.Contains(socketRoles, fdName) || seen[fdName] != "" {
			t.Errorf("%s: FileDescriptorName=%s, want one of %v not taken by another unit (%v)", u, fdName, socketRoles, seen)
		}
		seen[fdName] = name
		if n := len(s["Socket.ListenStream"]); n != 1 {
			t.Errorf("%s: %d ListenStream= addresses, want 1: serve takes one socket named %s", u, n, fdName)
		}
		if a := s["Socket.Accept"]; len(a) > 0 && !slices.Contains([]string{"no", "false", "0"}, a[len(a)-1]) {
			t.Errorf("%s: Accept=%v, want no: serve takes a listening socket", u, a)
		}
		if svc := s["Socket.Service"]; !slices.Equal(svc, []string{"petstore.service"}) {
			t.Errorf("%s: Service=%v, want petstore.service", u, svc)
		}
		if !slices.Contains(service["Unit.After"], name) {
			t.Errorf("petstore.service is not ordered After=%s: it could start without that socket", name)
		}
		required := slices.Contains(service["Unit.Requires"], name)
		if required != (fdName == "api") {
			t.Errorf("petstore.service Requires=%v: want the API's socket (petstore.socket) alone required", service["Unit.Requires"])
		}
		if slices.Contains(service["Unit.Wants"], name) {
			t.Errorf("petstore.service Wants=%s: the optional socket then starts with the service even when disabled", name)
		}
	}
}
