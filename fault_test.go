package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mountSmallDisk mounts a tmpfs of the given size (e.g. "2m") in a temp
// directory, so that a test can fill it, or make it read-only, for real.
func mountSmallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillDisk writes a file into dir until the filesystem is full and returns
// its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			return filler
		}
	}
}

func TestFullDiskGives503(t *testing.T) {
	dir := mountSmallDisk(t, "4m")
	db := filepath.Join(dir, "petstore.db")
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "100000", "--rpd", "1000000")
	ts := startServerOn(t, db, key)
	var acked []string
	create := func(i int) response {
		name := fmt.Sprintf("c%03d", i)
		r := ts.do(t, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":%q,"description":%q}`, name, strings.Repeat("d", 1000)))
		if r.status == 201 {
			acked = append(acked, name)
		}
		return r
	}
	for i := range 5 {
		if r := create(i); r.status != 201 {
			t.Fatalf("create before the disk is full: %d %s", r.status, r.body)
		}
	}
	filler := fillDisk(t, dir)

	// The WAL may still have room for a few rows; then the disk is full.
	var full response
	for i := 5; i < 500; i++ {
		r := create(i)
		if r.status == 201 {
			continue
		}
		full = r
		break
	}
	wantError(t, full, 503, "unavailable")
	if full.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	wantError(t, create(1000), 503, "unavailable")

	list := decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, ""))
	if len(list) != len(acked) {
		t.Errorf("reads on a full disk: %d categories, want the %d acknowledged", len(list), len(acked))
	}
	if r := ts.do(t, "GET", "/readyz", "", ""); r.status != 200 {
		t.Errorf("/readyz on a full disk: %d", r.status)
	}

	os.Remove(filler)
	if r := create(2000); r.status != 201 {
		t.Fatalf("create after space returned: %d %s", r.status, r.body)
	}
	ts.stop()
	ts = startServerOn(t, db, key)
	have := map[string]bool{}
	for _, c := range decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, "")) {
		have[c.Name] = true
	}
	for _, name := range acked {
		if !have[name] {
			t.Errorf("acknowledged %s is gone", name)
		}
	}
	t.Logf("%d creates acknowledged around a full disk, all kept", len(acked))
}

// TestReadOnlyStorage covers a database that cannot be written: on a
// read-only filesystem the server refuses to start (one line, exit 1); a
// SQLite read-only or I/O error while it runs, as when the kernel remounts
// a failing disk read-only, becomes 503 unavailable. (A tmpfs in use cannot
// be remounted read-only, so the second half takes a real read-only error
// from SQLite and checks how the store describes it.)
func TestReadOnlyStorage(t *testing.T) {
	dir := mountSmallDisk(t, "8m")
	db := filepath.Join(dir, "petstore.db")
	createKey(t, db, "--plan", "business")
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v %s", err, out)
	}
	_, _, err := runCLI(t, nil, "serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off")
	var msg strings.Builder
	if code := exitCode(err, &msg); code != 1 || !strings.Contains(msg.String(), "read-only file system") {
		t.Errorf("serve on a read-only filesystem: exit %d, %q", code, msg.String())
	}

	rw := testStore(t, filepath.Join(t.TempDir(), "src.db"), true)
	rw.Close()
	ro, err := sql.Open("sqlite", "file:"+rw.path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, err = ro.Exec("INSERT INTO categories (name, fold) VALUES ('x', 'x')")
	if err == nil {
		t.Fatal("an insert through a read-only connection succeeded")
	}
	if !errors.Is(sqliteDescribe(err), errUnavailable) {
		t.Errorf("sqliteDescribe(%v) is not errUnavailable, so the client would get a 500", err)
	}
}

func TestLockedDatabaseGives503(t *testing.T) {
	db := filepath.Join(t.TempDir(), "locked.db")
	key := createKey(t, db, "--plan", "business")
	ts := startServerOn(t, db, key, "--busy-timeout", "300ms")
	if r := ts.do(t, "POST", "/v1/categories", key, `{"name":"before"}`); r.status != 201 {
		t.Fatalf("create: %d", r.status)
	}

	unlock := lockDB(t, db)
	r := ts.do(t, "POST", "/v1/categories", key, `{"name":"during"}`)
	wantError(t, r, 503, "unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	if r := ts.do(t, "GET", "/v1/categories", key, ""); r.status != 200 {
		t.Errorf("read while another process holds the write lock: %d", r.status)
	}
	unlock()
	if r := ts.do(t, "POST", "/v1/categories", key, `{"name":"after"}`); r.status != 201 {
		t.Errorf("create after the lock was released: %d %s", r.status, r.body)
	}
}

// TestIdleConnectionsDoNotStarveClients holds 1,000 idle connections, half
// of them never sending a byte and half after one request, and checks that
// normal clients are still served. They come from four addresses
// (127.0.0.2-5), 250 each, under the default --max-conns-per-addr of 256;
// the normal client is 127.0.0.1.
func TestIdleConnectionsDoNotStarveClients(t *testing.T) {
	ts := startServer(t)
	addr := strings.TrimPrefix(ts.base, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 1000 {
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%4))}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 1 {
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: petstore\r\n\r\n")
		}
	}
	for i, c := range conns {
		if i%2 == 1 {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				t.Fatalf("keep-alive connection %d got no answer: %v", i, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 20 {
		if ctx.Err() != nil {
			t.Fatal("normal requests did not finish within 10s")
		}
		if r := ts.do(t, "POST", "/v1/categories", ts.key, fmt.Sprintf(`{"name":"busy-%d"}`, i)); r.status != 201 {
			t.Fatalf("request %d beside 1,000 idle connections: %d", i, r.status)
		}
	}
}

// TestRevokedAndBannedKeysNeverSucceed tries every operation with a revoked
// and with a banned key.
func TestRevokedAndBannedKeysNeverSucceed(t *testing.T) {
	ts := startServer(t, "--ban-threshold", "1")
	revoked := createKey(t, ts.db, "--plan", "business")
	banned := createKey(t, ts.db, "--plan", "enterprise", "--rpm", "1", "--rpd", "1000")
	waitStatus(t, ts, banned, 200)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	if _, _, err := runCLI(t, nil, "keys", "revoke", "2", "--db", ts.db); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ts, revoked, 401)
	wantError(t, ts.do(t, "GET", "/v1/categories", banned, ""), 429, "rate_limited")
	wantError(t, ts.do(t, "GET", "/v1/categories", banned, ""), 429, "key_banned")

	ops := []struct{ method, path, body string }{
		{"GET", "/v1/categories", ""},
		{"POST", "/v1/categories", `{"name":"x"}`},
		{"GET", "/v1/pets", ""},
		{"POST", "/v1/pets", `{"name":"x","categoryId":1}`},
		{"GET", "/v1/pets/1", ""},
		{"GET", "/v1/store/orders", ""},
		{"POST", "/v1/store/orders", `{"petId":1,"quantity":1}`},
	}
	for _, op := range ops {
		wantError(t, ts.do(t, op.method, op.path, revoked, op.body), 401, "unauthorized")
		wantError(t, ts.do(t, op.method, op.path, banned, op.body), 429, "key_banned")
	}
}

// TestInvalidKeyFloodMemory sends 100,000 requests with distinct invalid
// keys to the program in its own process and measures its resident memory
// before and after: invalid keys must leave no state behind.
func TestInvalidKeyFloodMemory(t *testing.T) {
	db := filepath.Join(t.TempDir(), "flood.db")
	key := createKey(t, db, "--plan", "business")
	p := startProcess(t, db, "--anon-rpm", "100000000")
	ts := &testServer{base: "http://" + p.addr, key: key, client: contractClient(t, nil)}
	send := func(from, to int) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := from + w; i < to; i += 4 {
					req, _ := http.NewRequest("GET", ts.base+"/v1/categories", nil)
					req.Header.Set("Authorization", fmt.Sprintf("Bearer ps_live_%040d", i))
					resp, err := ts.client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode != 401 {
						t.Errorf("invalid key %d: %d", i, resp.StatusCode)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	send(0, 5_000) // warm up: pools, buffers, the heap's steady size
	before := processMemory(t, p.cmd.Process.Pid, "VmRSS")
	send(5_000, 105_000)
	after := processMemory(t, p.cmd.Process.Pid, "VmRSS")
	peak := processMemory(t, p.cmd.Process.Pid, "VmHWM")
	t.Logf("100,000 distinct invalid keys: RSS %d KiB before, %d KiB after, peak %d KiB", before, after, peak)
	if after-before > 32<<10 {
		t.Errorf("RSS grew by %d KiB over 100,000 invalid keys, want it bounded (under 32 MiB)", after-before)
	}
}

// processMemory reads a field (in KiB) of /proc/PID/status.
func processMemory(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
			return kib
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// lockDB takes the database's write lock in another process until the
// returned function is called.
func lockDB(t *testing.T, db string) (unlock func()) {
	t.Helper()
	locker := exec.Command(os.Args[0])
	locker.Env = append(os.Environ(), "PETSTORE_TEST_LOCK="+db)
	stdin, _ := locker.StdinPipe()
	stdout, _ := locker.StdoutPipe()
	if err := locker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locker.Process.Kill() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "locked\n" {
		t.Fatalf("the locking process said %q", line)
	}
	return func() { stdin.Close(); locker.Wait() }
}

// TestBanWrittenOnceDatabaseRecovers checks that a ban whose write failed
// (the database locked by another process) is written when the lock goes,
// and so survives a restart (DECISIONS: "A ban survives a restart").
func TestBanWrittenOnceDatabaseRecovers(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ban.db")
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "1", "--rpd", "1000")
	args := []string{"--ban-threshold", "1", "--ban-duration", "15m", "--busy-timeout", "200ms"}
	ts := startServerOn(t, db, key, args...)
	ts.do(t, "GET", "/v1/categories", key, "")
	unlock := lockDB(t, db)
	wantError(t, ts.do(t, "GET", "/v1/categories", key, ""), 429, "rate_limited")
	wantError(t, ts.do(t, "GET", "/v1/categories", key, ""), 429, "key_banned")
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(ts.stderr.String(), "store ban; will retry"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed ban write logged within 5s:\n%s", ts.stderr.String())
		}
	}
	unlock()
	s := testStore(t, db, false)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var until sql.NullString
		if err := s.r.QueryRow("SELECT banned_until FROM api_keys WHERE id = 1").Scan(&until); err != nil {
			t.Fatal(err)
		}
		if until.Valid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ban is not in the database 5s after the lock went")
		}
	}
	ts.stop()
	ts = startServerOn(t, db, key, args...)
	wantError(t, ts.do(t, "GET", "/v1/categories", key, ""), 429, "key_banned")
}

// TestStoredBanEndsWhenItsRetryAfterSays checks that a ban read back from
// the database ends at the same instant as the one the limiter imposed, so
// that a client waiting exactly its Retry-After is let in: it was rounded
// up to the next second on its way into the database.
func TestStoredBanEndsWhenItsRetryAfterSays(t *testing.T) {
	s := testStore(t, filepath.Join(t.TempDir(), "b.db"), true)
	if _, err := s.CreateKey(context.Background(), keySpec{Hash: hashKey(newKeySecret("production")), Plan: "free", Env: "production"}); err != nil {
		t.Fatal(err)
	}
	until := time.Date(2026, 11, 22, 3, 0, 0, 123456789, time.UTC)
	if err := s.SetKeyBan(context.Background(), 1, until); err != nil {
		t.Fatal(err)
	}
	keys, err := s.KeysSince(context.Background(), -1)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys: %v, %v", keys, err)
	}
	if got := keys[0].BannedUntil; !got.Equal(until) {
		t.Errorf("stored ban ends %v, imposed %v", got, until)
	}
}

// TestBanStormKeepsEveryBan bans more keys at once than the old 1,024-slot
// queue held, while the database is locked so that none can be written yet:
// every ban must reach the database once the lock goes (and so survive a
// restart), and each must be counted in petstore_bans_total.
func TestBanStormKeepsEveryBan(t *testing.T) {
	const n = 1100
	db := filepath.Join(t.TempDir(), "storm.db")
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "1", "--rpd", "1000")
	s := testStore(t, db, false)
	keys := []string{key}
	for len(keys) < n {
		k := newKeySecret("production")
		if _, err := s.CreateKey(context.Background(), keySpec{Hash: hashKey(k), Plan: "enterprise", RPM: 1, RPD: 1000, Env: "production"}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	ts := startServerOn(t, db, key, "--ban-threshold", "1", "--ban-duration", "15m", "--busy-timeout", "100ms")
	unlock := lockDB(t, db)
	var wg sync.WaitGroup
	next := make(chan string)
	for range 8 {
		wg.Go(func() {
			for k := range next {
				// Allowed, refused, then banned (--ban-threshold 1).
				for _, want := range []string{"", "rate_limited", "key_banned"} {
					r, err := ts.send("GET", "/v1/categories", k, "")
					var e apiError
					switch {
					case err != nil:
						t.Error(err)
					case want == "" && r.status != 200,
						want != "" && (r.status != 429 || json.Unmarshal(r.body, &e) != nil || e.Code != want):
						t.Errorf("want %q: %d %s", want, r.status, r.body)
					}
				}
			}
		})
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	unlock()
	banned := 0
	for deadline := time.Now().Add(20 * time.Second); banned < n; time.Sleep(50 * time.Millisecond) {
		if err := s.r.QueryRow("SELECT count(*) FROM api_keys WHERE banned_until IS NOT NULL").Scan(&banned); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bans in the database 20s after the lock went", banned, n)
		}
	}
	if m := ts.get(t, ts.admin+"/metrics"); !strings.Contains(m, fmt.Sprintf("petstore_bans_total %d\n", n)) {
		i := strings.Index(m, "petstore_bans_total")
		t.Errorf("metrics do not count %d bans: %.40q", n, m[max(i, 0):])
	}
}
