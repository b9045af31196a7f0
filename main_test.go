package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testVariables are the variables that let more tests run, as the
// README's table lists them; a test that needs one skips without it.
var testVariables = []struct{ name, what string }{
	{postgresEnv, "PostgreSQL"},
	{redisEnv, "Redis"},
	{browserEnv, "Chromium"},
	{promtoolEnv, "promtool"},
	{codegenEnv, "the client generators"},
}

// TestMain lets a test re-run this binary as the real petstore process
// (for kill tests): with PETSTORE_TEST_MAIN=1 it is main. Otherwise it
// first says, in one line on stderr, which test variables are unset: go
// test shows it in local directory mode (the README's command) and with
// -v, where a skipped test's own line shows only with -v.
func TestMain(m *testing.M) {
	if os.Getenv("PETSTORE_TEST_MAIN") == "1" {
		main()
		return
	}
	if path := os.Getenv("PETSTORE_TEST_LOCK"); path != "" {
		lockDatabase(path)
	}
	var unset []string
	for _, v := range testVariables {
		if os.Getenv(v.name) == "" {
			unset = append(unset, v.name+" ("+v.what+")")
		}
	}
	if len(unset) > 0 {
		fmt.Fprintf(os.Stderr, "petstore tests: not set, so the tests that need them skip: %s; see the README's Quick start\n", strings.Join(unset, ", "))
	}
	os.Exit(m.Run())
}

// testStore opens the database at path (migrating it when migrateUp is
// set) and closes it when the test ends.
func testStore(tb testing.TB, path string, migrateUp bool) *sqliteStore {
	tb.Helper()
	s, err := openSQLite(context.Background(), path, migrateUp, time.Now, defaultBusyTimeout)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// syncBuffer is a bytes.Buffer safe for a server writing and a test reading.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func envFrom(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// runCLI runs one petstore command to completion and returns its output.
func runCLI(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run(ctx, args, envFrom(env), &out, &errOut)
	return out.String(), errOut.String(), err
}

// createKey makes a key with the keys command and returns the secret.
func createKey(t *testing.T, db string, args ...string) string {
	t.Helper()
	out, errOut, err := runCLI(t, nil, append([]string{"keys", "create", "--db", db}, args...)...)
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, errOut)
	}
	return strings.TrimSpace(out)
}

type testServer struct {
	client *http.Client // checks every exchange against the OpenAPI document
	base   string
	admin  string // base URL of the admin listener
	db     string
	key    string
	stderr *syncBuffer
	stop   func()
}

var (
	listeningRE = regexp.MustCompile(`msg=listening addr=(\S+)|"msg":"listening","addr":"([^"]+)"`)
	adminRE     = regexp.MustCompile(`msg=listening .*admin_addr=(\S+)|"msg":"listening".*"admin_addr":"([^"]+)"`)
)

// logAddr returns the address that re's first match in log names, or "".
func logAddr(re *regexp.Regexp, log string) string {
	m := re.FindStringSubmatch(log)
	if m == nil {
		return ""
	}
	return m[1] + m[2]
}

// testRedisPrefixes holds the Redis key prefix of each database a test
// server ran on, so that servers on one database share their limits, as
// instances of one deployment do, and a restarted one finds them again.
var testRedisPrefixes sync.Map

// testRedisArgs returns the flags that put a test server's rate limits in
// Redis when PETSTORE_TEST_REDIS is set (under a prefix of the database's
// own), and none when it is not. The timeout is wide: under the race
// detector, with tests in parallel, 50 ms is not always enough, and a test
// that fell back to local limits would count differently.
func testRedisArgs(t *testing.T, db string) []string {
	t.Helper()
	if os.Getenv(redisEnv) == "" {
		return nil
	}
	u := needRedis(t)
	prefix, ok := testRedisPrefixes.Load(db)
	if !ok {
		prefix, _ = testRedisPrefixes.LoadOrStore(db, redisTestPrefix(t, u))
	}
	return []string{"--redis", u, "--redis-prefix", prefix.(string), "--redis-timeout", "5s"}
}

// startServer runs "petstore serve" through run on a random loopback port
// with a fresh database (testDB: SQLite, or PostgreSQL when
// PETSTORE_TEST_POSTGRES is set; limits in Redis when PETSTORE_TEST_REDIS
// is) and a business key, and waits until it answers /healthz.
func startServer(t *testing.T, args ...string) *testServer {
	t.Helper()
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "test")
	return startServerOn(t, db, key, args...)
}

func startServerOn(t *testing.T, db, key string, args ...string) *testServer {
	t.Helper()
	return startServerIn(t, context.Background(), db, key, args...)
}

// startServerIn is startServerOn with run's context derived from parent,
// which may carry a clock (clockKey).
func startServerIn(t *testing.T, parent context.Context, db, key string, args ...string) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	stderr := &syncBuffer{}
	done := make(chan error, 1)
	// --ban-hold 0: a banned key's requests answer at once, so that tests of
	// bans do not wait 100 ms a request; TestBannedKeyWaits sets its own.
	all := append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--db", db, "--ban-hold", "0"}, testRedisArgs(t, db)...)
	all = append(all, args...) // after ours: a test's own --redis wins
	go func() { done <- run(ctx, all, envFrom(nil), io.Discard, stderr) }()
	ts := &testServer{db: db, key: key, stderr: stderr}
	ts.client = contractClient(t, args)
	var once sync.Once
	ts.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve returned %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("serve did not stop within 15s")
			}
		})
	}
	t.Cleanup(func() {
		ts.stop()
		if t.Failed() {
			t.Logf("server log:\n%s", stderr.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for ts.base == "" {
		if addr := logAddr(listeningRE, stderr.String()); addr != "" {
			ts.base = "http://" + addr
			if admin := logAddr(adminRE, stderr.String()); admin != "" {
				ts.admin = "http://" + admin
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start within 10s:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		resp, err := ts.client.Get(ts.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return ts
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz not ready within 10s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// contractClient returns a client whose every exchange is checked against
// the OpenAPI document that a server started with args serves; the test
// fails at its end for each problem found.
func contractClient(t *testing.T, args []string) *http.Client {
	t.Helper()
	publicURL, env := "http://localhost:8080/v1", "production"
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--public-url":
			publicURL = strings.TrimRight(args[i+1], "/") // as serve takes it
		case "--env":
			env = args[i+1]
		}
	}
	doc, err := openAPIDocument(publicURL, env)
	if err != nil {
		t.Fatal(err)
	}
	c := contractFor(t, doc)
	ct := &checkingTransport{base: &http.Transport{MaxIdleConnsPerHost: 16}, contract: func() *contract { return c }}
	t.Cleanup(func() { ct.report(t) })
	return &http.Client{Transport: ct}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request; key "" sends no Authorization header, and a body
// is sent as application/json unless header overrides it.
func (ts *testServer) do(t *testing.T, method, path, key, body string, header ...string) response {
	t.Helper()
	r, err := ts.send(method, path, key, body, header...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// send is do without the test: it returns what failed, for goroutines
// other than the test's, where t.Fatal must not be called.
func (ts *testServer) send(method, path, key, body string, header ...string) (response, error) {
	return ts.sendVia(ts.client, method, path, key, body, header...)
}

// sendVia is send through client.
func (ts *testServer) sendVia(client *http.Client, method, path, key, body string, header ...string) (response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.base+path, rd)
	if err != nil {
		return response{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	set := map[string]bool{} // a name given twice is sent as two lines
	for i := 0; i+1 < len(header); i += 2 {
		if set[header[i]] {
			req.Header.Add(header[i], header[i+1])
		} else {
			req.Header.Set(header[i], header[i+1])
			set[header[i]] = true
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("read body: %w", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// wantError checks that r is a JSON Error with the given status and code.
func wantError(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var e apiError
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("body %q is not an Error: %v", r.body, err)
	}
	if e.Status != status || e.Code != code || e.Message == "" {
		t.Errorf("error = %+v, want status %d code %q and a message", e, status, code)
	}
}

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
	return v
}

func TestCategoriesCreateAndList(t *testing.T) {
	ts := startServer(t)
	r := ts.do(t, "GET", "/v1/categories", ts.key, "")
	if r.status != 200 || string(r.body) != "[]\n" {
		t.Fatalf("empty list: status %d body %q, want 200 []", r.status, r.body)
	}

	r = ts.do(t, "POST", "/v1/categories", ts.key, `{"name": "  Dog\t", "description": "Loyal"}`)
	if r.status != 201 {
		t.Fatalf("status = %d, want 201; %s", r.status, r.body)
	}
	if got := string(r.body); got != `{"id":1,"name":"Dog","description":"Loyal"}`+"\n" {
		t.Errorf("created body = %s", got)
	}
	if loc := r.header.Get("Location"); loc != "" {
		t.Errorf("Location = %q, want none", loc)
	}
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name": "Cat"}`)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name": "Rabbit", "description": ""}`)

	r = ts.do(t, "GET", "/v1/categories", ts.key, "")
	want := `[{"id":1,"name":"Dog","description":"Loyal"},{"id":2,"name":"Cat"},{"id":3,"name":"Rabbit","description":""}]` + "\n"
	if r.status != 200 || string(r.body) != want {
		t.Errorf("list: status %d body %s, want %s", r.status, r.body, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
}

func TestCategoryValidation(t *testing.T) {
	ts := startServer(t)
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"dog"}`); r.status != 201 {
		t.Fatalf("seed: status %d", r.status)
	}
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"école"}`); r.status != 201 {
		t.Fatalf("seed: status %d", r.status)
	}
	long := strings.Repeat("x", 101)
	tests := []struct {
		name       string
		body       string
		header     []string
		wantStatus int
		wantCode   string
	}{
		{"missing name", `{"description":"x"}`, nil, 400, "validation_failed"},
		{"null name", `{"name":null}`, nil, 400, "validation_failed"},
		{"empty name", `{"name":""}`, nil, 400, "validation_failed"},
		{"blank name", `{"name":" \t\n "}`, nil, 400, "validation_failed"},
		{"101 characters", `{"name":"` + long + `"}`, nil, 400, "validation_failed"},
		{"101 code points", `{"name":"` + strings.Repeat("é", 101) + `"}`, nil, 400, "validation_failed"},
		{"control character", `{"name":"a\u0007b"}`, nil, 400, "validation_failed"},
		{"NUL", `{"name":"a\u0000b"}`, nil, 400, "validation_failed"},
		{"newline inside", `{"name":"a\nb"}`, nil, 400, "validation_failed"},
		{"DEL", `{"name":"a\u007fb"}`, nil, 400, "validation_failed"},
		{"name number", `{"name":5}`, nil, 400, "validation_failed"},
		{"name object", `{"name":{}}`, nil, 400, "validation_failed"},
		{"description number", `{"name":"n1","description":5}`, nil, 400, "validation_failed"},
		{"description 1001", `{"name":"n2","description":"` + strings.Repeat("d", 1001) + `"}`, nil, 400, "validation_failed"},
		{"unknown field", `{"name":"n3","colour":"red"}`, nil, 400, "validation_failed"},
		{"duplicate", `{"name":"dog"}`, nil, 409, "conflict"},
		{"duplicate other case", `{"name":"DOG"}`, nil, 409, "conflict"},
		{"duplicate after trim", `{"name":"  Dog  "}`, nil, 409, "conflict"},
		{"duplicate accented upper", `{"name":"ÉCOLE"}`, nil, 409, "conflict"},
		{"trailing data", `{"name":"n4"} {}`, nil, 400, "invalid_json"},
		{"trailing garbage", `{"name":"n4"}x`, nil, 400, "invalid_json"},
		{"array", `[{"name":"n5"}]`, nil, 400, "invalid_json"},
		{"string", `"n6"`, nil, 400, "invalid_json"},
		{"null", `null`, nil, 400, "invalid_json"},
		{"malformed", `{"name":}`, nil, 400, "invalid_json"},
		{"truncated", `{"name":"n7"`, nil, 400, "invalid_json"},
		{"empty body", ``, []string{"Content-Type", "application/json"}, 400, "invalid_json"},
		{"invalid UTF-8", "{\"name\":\"a\xffb\"}", nil, 400, "invalid_json"},
		{"no content type", `{"name":"n8"}`, []string{"Content-Type", ""}, 415, "unsupported_media_type"},
		{"text/plain", `{"name":"n8"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"too large", `{"name":"n9","description":"` + strings.Repeat("d", 70000) + `"}`, nil, 413, "payload_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/categories", ts.key, tt.body, tt.header...)
			wantError(t, r, tt.wantStatus, tt.wantCode)
		})
	}

	valid := []struct{ name, body string }{
		{"100 characters", `{"name":"` + strings.Repeat("y", 100) + `"}`},
		{"100 code points", `{"name":"` + strings.Repeat("ü", 100) + `"}`},
		{"1000 description", `{"name":"d1000","description":"` + strings.Repeat("d", 1000) + `"}`},
		{"charset parameter", `{"name":"charset"}`},
		{"description with newline", `{"name":"nl","description":"two\nlines"}`},
		{"null description", `{"name":"nulldesc","description":null}`},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/categories", ts.key, tt.body, "Content-Type", "application/json; charset=utf-8")
			if r.status != 201 {
				t.Fatalf("status = %d, want 201; %s", r.status, r.body)
			}
		})
	}
}

func TestAuthentication(t *testing.T) {
	ts := startServer(t)
	staging := createKey(t, ts.db, "--plan", "free", "--env", "staging")
	revoked := createKey(t, ts.db, "--plan", "free")
	if _, _, err := runCLI(t, nil, "keys", "revoke", "3", "--db", ts.db); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		auth       string
		wantStatus int
	}{
		{"no header", "", 401},
		{"valid", "Bearer " + ts.key, 200},
		{"lower-case scheme", "bearer " + ts.key, 200},
		{"upper-case scheme", "BEARER " + ts.key, 200},
		{"basic scheme", "Basic " + ts.key, 401},
		{"no scheme", ts.key, 401},
		{"scheme only", "Bearer", 401},
		{"two spaces", "Bearer  " + ts.key, 401},
		{"one character changed", "Bearer " + ts.key[:len(ts.key)-1] + flip(ts.key[len(ts.key)-1]), 401},
		{"upper-cased key", "Bearer " + strings.ToUpper(ts.key), 401},
		{"key with suffix", "Bearer " + ts.key + "x", 401},
		{"key with a no-break space", "Bearer " + ts.key + "\u00a0", 401},
		{"key with a leading space", "Bearer  " + ts.key, 401},
		{"truncated key", "Bearer " + ts.key[:len(ts.key)-1], 401},
		{"staging key on production", "Bearer " + staging, 401},
		{"revoked key", "Bearer " + revoked, 401},
		{"unknown well-formed key", "Bearer ps_live_" + strings.Repeat("A", 40), 401},
	}
	var messages []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.auth != "" {
				hdr = []string{"Authorization", tt.auth}
			}
			r := ts.do(t, "GET", "/v1/categories", "", "", hdr...)
			if tt.wantStatus == 200 {
				if r.status != 200 {
					t.Fatalf("status = %d, want 200; %s", r.status, r.body)
				}
				return
			}
			wantError(t, r, 401, "unauthorized")
			if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="petstore"` {
				t.Errorf("WWW-Authenticate = %q", got)
			}
			messages = append(messages, string(r.body))
			if strings.Contains(string(r.body), "ps_") {
				t.Errorf("error body mentions a key: %s", r.body)
			}
		})
	}
	for _, m := range messages[1:] {
		if m != messages[0] {
			t.Errorf("401 bodies differ, revealing why: %s vs %s", m, messages[0])
		}
	}
	// POST is refused before its body is looked at.
	wantError(t, ts.do(t, "POST", "/v1/categories", "", `{"name":"x"}`), 401, "unauthorized")
}

func flip(c byte) string {
	if c == 'a' {
		return "b"
	}
	return "a"
}

func TestKeysAreHashedAtRest(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db")
	key := createKey(t, db, "--plan", "pro")
	ts := startServerOn(t, db, key)
	if r := ts.do(t, "GET", "/v1/categories", key, ""); r.status != 200 {
		t.Fatalf("status = %d", r.status)
	}
	ts.stop()
	secret := strings.TrimPrefix(key, "ps_live_")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(db + suffix)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the key in clear", db+suffix)
		}
	}
	if strings.Contains(ts.stderr.String(), secret) {
		t.Errorf("the server log holds the key")
	}
}

func TestKeyChangesReachRunningServer(t *testing.T) {
	ts := startServer(t)
	fresh := createKey(t, ts.db, "--plan", "free")
	waitStatus(t, ts, fresh, 200)
	if _, _, err := runCLI(t, nil, "keys", "revoke", "2", "--db", ts.db); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ts, fresh, 401)
}

// clearOfMidnight waits, if the next 00:00 UTC is less than span away, until
// it has passed, so that a test which counts requests for today and takes
// less than span starts and ends on the same day. The server's day follows
// the wall clock, which a test in another process cannot inject; the wait is
// bounded by span and happens only in the last span of a day.
func clearOfMidnight(t *testing.T, span time.Duration) {
	t.Helper()
	now := time.Now().UTC()
	midnight := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if left := midnight.Sub(now); left < span {
		t.Logf("waiting %v for 00:00 UTC to pass", left.Round(time.Millisecond))
		time.Sleep(left + 100*time.Millisecond)
	}
}

// waitStatus polls GET /v1/categories with key until it answers want, and
// fails if that takes more than the 2 seconds that DECISIONS.md allows.
func waitStatus(t *testing.T, ts *testServer, key string, want int) {
	t.Helper()
	start := time.Now()
	for {
		r := ts.do(t, "GET", "/v1/categories", key, "")
		if r.status == want {
			return
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("status still %d after %v, want %d", r.status, time.Since(start), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRoutingErrors(t *testing.T) {
	ts := startServer(t)
	tests := []struct {
		name, method, path, key string
		wantStatus              int
		wantCode, wantAllow     string
	}{
		{"unknown path", "GET", "/v1/dogs", "", 404, "not_found", ""},
		{"unknown path with key", "GET", "/v1/dogs", ts.key, 404, "not_found", ""},
		{"root", "GET", "/", "", 404, "not_found", ""},
		{"trailing slash", "GET", "/v1/categories/", ts.key, 404, "not_found", ""},
		{"dot-dot", "GET", "/v1/x/../categories", ts.key, 404, "not_found", ""},
		{"wrong method", "DELETE", "/v1/categories", "", 405, "method_not_allowed", "GET, HEAD, POST"},
		{"wrong method with key", "PUT", "/v1/categories", ts.key, 405, "method_not_allowed", "GET, HEAD, POST"},
		{"post to openapi", "POST", "/v1/openapi.json", "", 405, "method_not_allowed", "GET, HEAD"},
		{"no key", "GET", "/v1/categories", "", 401, "unauthorized", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.base+tt.path, nil)
			req.URL.Opaque = tt.path // send the path as written
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key)
			}
			resp, err := ts.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r := response{status: resp.StatusCode, header: resp.Header, body: body}
			wantError(t, r, tt.wantStatus, tt.wantCode)
			if got := r.header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
			if r.header.Get("X-Request-Id") == "" {
				t.Errorf("no X-Request-Id")
			}
		})
	}
}

func TestRequestID(t *testing.T) {
	ts := startServer(t)
	r := ts.do(t, "GET", "/healthz", "", "", "X-Request-Id", "client-id.42:x_y")
	if got := r.header.Get("X-Request-Id"); got != "client-id.42:x_y" {
		t.Errorf("sane id: X-Request-Id = %q, want it echoed", got)
	}
	for _, bad := range []string{"has space", strings.Repeat("a", 129), "semi;colon", "<script>"} {
		r := ts.do(t, "GET", "/v1/categories", ts.key, "", "X-Request-Id", bad)
		if got := r.header.Get("X-Request-Id"); got == "" || got == bad {
			t.Errorf("id %q: X-Request-Id = %q, want a fresh one", bad, got)
		}
	}
	a := ts.do(t, "GET", "/nowhere", "", "").header.Get("X-Request-Id")
	b := ts.do(t, "GET", "/nowhere", "", "").header.Get("X-Request-Id")
	if a == "" || a == b {
		t.Errorf("generated ids %q and %q, want distinct", a, b)
	}
}

func TestHealthReadyAndOpenAPI(t *testing.T) {
	ts := startServer(t, "--public-url", "https://api.example.test/v1", "--env", "production")
	r := ts.do(t, "GET", "/healthz", "", "")
	if h := decode[map[string]string](t, r); r.status != 200 || h["status"] != "ok" || h["env"] != "production" {
		t.Errorf("/healthz: %d %s", r.status, r.body)
	}
	r = ts.do(t, "GET", "/readyz", "", "")
	if r.status != 200 {
		t.Errorf("/readyz: %d %s", r.status, r.body)
	}
	r = ts.do(t, "GET", "/v1/openapi.json", "", "")
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("/v1/openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Info    struct{ Version string }  `json:"info"`
		Servers []struct{ URL string }    `json:"servers"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Info.Version != "1.0.0" {
		t.Errorf("openapi %q version %q", doc.OpenAPI, doc.Info.Version)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "https://api.example.test/v1" {
		t.Errorf("servers = %+v, want the --public-url", doc.Servers)
	}
	// The contract checker validates against openAPIDocument's output: it
	// must be what the server serves, to the byte.
	if want, _ := openAPIDocument("https://api.example.test/v1", "production"); !bytes.Equal(r.body, want) {
		t.Errorf("served document differs from openAPIDocument's")
	}
	for _, op := range []string{"get", "post"} {
		if _, ok := doc.Paths["/categories"][op]; !ok {
			t.Errorf("no %s /categories in the document", op)
		}
	}
}

func TestConcurrentCreates(t *testing.T) {
	ts := startServer(t)
	const n = 200
	var wg sync.WaitGroup
	ids := make([]int64, n)
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"name":"cat-%03d"}`, i)
			req, _ := http.NewRequest("POST", ts.base+"/v1/categories", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+ts.key)
			resp, err := ts.client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var c Category
			if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 201 {
				errs <- fmt.Errorf("create %d: status %d, %v", i, resp.StatusCode, err)
				return
			}
			ids[i] = c.ID
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list := decode[[]Category](t, ts.do(t, "GET", "/v1/categories", ts.key, ""))
	if len(list) != n {
		t.Fatalf("listed %d categories, want %d", len(list), n)
	}
	seen := map[string]int64{}
	for i, c := range list {
		if i > 0 && c.ID <= list[i-1].ID {
			t.Errorf("ids not ascending at %d: %d after %d", i, c.ID, list[i-1].ID)
		}
		if _, dup := seen[c.Name]; dup {
			t.Errorf("%s listed twice", c.Name)
		}
		seen[c.Name] = c.ID
	}
	for i := range n {
		if got := seen[fmt.Sprintf("cat-%03d", i)]; got != ids[i] {
			t.Errorf("cat-%03d: listed with id %d, created with id %d", i, got, ids[i])
		}
	}
}

func TestBackupWhileWriting(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db") // backup is SQLite's
	ts := startServerOn(t, db, createKey(t, db, "--plan", "business"))
	stop := make(chan struct{})
	var created sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	created.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := ts.do(t, "POST", "/v1/categories", ts.key, fmt.Sprintf(`{"name":"b%d"}`, i))
			if r.status != 201 {
				t.Errorf("create during backup: %d %s", r.status, r.body)
				return
			}
			mu.Lock()
			acked++
			mu.Unlock()
		}
	})
	// Let some writes land before and during the backup.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := acked
		mu.Unlock()
		if n >= 20 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	before := acked
	mu.Unlock()
	dest := filepath.Join(t.TempDir(), "copy.db")
	out, errOut, err := runCLI(t, nil, "backup", "--db", ts.db, dest)
	close(stop)
	created.Wait()
	if err != nil {
		t.Fatalf("backup: %v %s", err, errOut)
	}
	if !strings.Contains(out, dest) {
		t.Errorf("backup printed %q", out)
	}
	if st, err := os.Stat(dest); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v, mode %v, want 0600", err, st.Mode())
	}
	if _, _, err := runCLI(t, nil, "backup", "--db", ts.db, dest); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second backup to the same file: %v, want a refusal", err)
	}

	copySrv := startServerOn(t, dest, ts.key)
	list := decode[[]Category](t, copySrv.do(t, "GET", "/v1/categories", ts.key, ""))
	if len(list) < before {
		t.Errorf("backup holds %d categories, want at least the %d acknowledged before it started", len(list), before)
	}
	for i, c := range list {
		if c.Name != fmt.Sprintf("b%d", i) {
			t.Fatalf("backup row %d is %q: the copy is not a consistent prefix", i, c.Name)
		}
	}
}

func TestFirstRunKey(t *testing.T) {
	db := filepath.Join(t.TempDir(), "new.db")
	ts := startServerOn(t, db, "")
	m := regexp.MustCompile(`(?m)^(ps_live_[0-9A-Za-z]{40})$`).FindStringSubmatch(ts.stderr.String())
	if m == nil {
		t.Fatalf("no first-run key printed:\n%s", ts.stderr.String())
	}
	if r := ts.do(t, "GET", "/v1/categories", m[1], ""); r.status != 200 {
		t.Errorf("first-run key: status %d", r.status)
	}
	out, _, err := runCLI(t, nil, "keys", "list", "--json", "--db", db)
	if err != nil {
		t.Fatal(err)
	}
	keys := decode[[]map[string]any](t, response{body: []byte(out)})
	if len(keys) != 1 || keys[0]["plan"] != "free" || keys[0]["env"] != "production" {
		t.Errorf("keys after first run: %s", out)
	}
	ts.stop()

	again := startServerOn(t, db, "")
	if strings.Contains(again.stderr.String(), "ps_live_") {
		t.Errorf("second start printed a key again")
	}
}

func TestSchemaMatchesMigrations(t *testing.T) {
	db := filepath.Join(t.TempDir(), "m.db")
	if _, _, err := runCLI(t, nil, "migrate", "--db", db); err != nil {
		t.Fatal(err)
	}
	migrated := testStore(t, db, false)
	fromMigrations := schemaOf(t, migrated)

	ref := testStore(t, filepath.Join(t.TempDir(), "ref.db"), true)
	sch, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.w.Exec("DROP TABLE deployment"); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.w.Exec("DROP TABLE idempotency; DROP TABLE orders; DROP TABLE pets; DROP TABLE usage; DROP TABLE categories; DROP TABLE api_keys; DROP TABLE schema_migrations;"); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.w.Exec(string(sch)); err != nil {
		t.Fatalf("schema.sql: %v", err)
	}
	fromSchema := schemaOf(t, ref)
	if fromSchema != fromMigrations {
		t.Errorf("schema.sql differs from the migrations:\nschema.sql:\n%s\nmigrations:\n%s", fromSchema, fromMigrations)
	}
}

// schemaOf lists a database's tables, indexes and triggers, normalised.
func schemaOf(t *testing.T, s *sqliteStore) string {
	t.Helper()
	rows, err := s.r.Query(`SELECT type, name, coalesce(sql, '') FROM sqlite_schema
		WHERE name NOT LIKE 'sqlite_%' AND name NOT IN ('schema_migrations', 'version_unique') ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	space := regexp.MustCompile(`\s+`)
	comment := regexp.MustCompile(`--[^\n]*`)
	renamed := regexp.MustCompile(`^CREATE TABLE "(\w+)"`) // SQLite quotes the name ALTER TABLE ... RENAME TO gives
	for rows.Next() {
		var typ, name, sql string
		if err := rows.Scan(&typ, &name, &sql); err != nil {
			t.Fatal(err)
		}
		sql = renamed.ReplaceAllString(sql, "CREATE TABLE $1")
		sql = space.ReplaceAllString(comment.ReplaceAllString(sql, ""), " ")
		// ALTER TABLE ... ADD COLUMN appends ", col TYPE" after the last
		// column's text, before the newline that closed it.
		sql = strings.ReplaceAll(strings.ReplaceAll(sql, " ,", ","), " )", ")")
		fmt.Fprintf(&b, "%s %s: %s\n", typ, name, sql)
	}
	return b.String()
}

func TestCategoryListCacheAndPages(t *testing.T) {
	// A trailing slash on --public-url must not give the Link an empty segment.
	ts := startServer(t, "--public-url", "https://api.example.net/v1/")
	for i := range 5 {
		ts.do(t, "POST", "/v1/categories", ts.key, fmt.Sprintf(`{"name":"c%d"}`, i))
	}
	r := ts.do(t, "GET", "/v1/categories", ts.key, "")
	etag := r.header.Get("ETag")
	if r.status != 200 || etag == "" || len(decode[[]Category](t, r)) != 5 {
		t.Fatalf("list: %d, ETag %q", r.status, etag)
	}
	r = ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", etag)
	if r.status != 304 || len(r.body) != 0 || r.header.Get("ETag") != etag {
		t.Errorf("If-None-Match with the current tag: %d %q", r.status, r.body)
	}
	// If-None-Match in two lines is one list (RFC 9110): the second names it.
	r = ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", `"other"`, "If-None-Match", etag)
	if r.status != 304 {
		t.Errorf("If-None-Match with the current tag on its second line: %d", r.status)
	}
	// A write makes the cached list stale.
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"c5"}`)
	r = ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", etag)
	if r.status != 200 || r.header.Get("ETag") == etag || len(decode[[]Category](t, r)) != 6 {
		t.Errorf("after a write: %d, ETag %q (was %q), body %s", r.status, r.header.Get("ETag"), etag, r.body)
	}

	r = ts.do(t, "GET", "/v1/categories?limit=4", ts.key, "")
	page := decode[[]Category](t, r)
	if len(page) != 4 || page[0].ID != 1 || page[3].ID != 4 {
		t.Fatalf("first page: %s", r.body)
	}
	if got, want := r.header.Get("Link"), `<https://api.example.net/v1/categories?limit=4&after_id=4>; rel="next"`; got != want {
		t.Errorf("Link = %q, want %q", got, want)
	}
	r = ts.do(t, "GET", "/v1/categories?limit=4&after_id=4", ts.key, "")
	if page := decode[[]Category](t, r); len(page) != 2 || page[0].ID != 5 || r.header.Get("Link") != "" {
		t.Errorf("last page: %s, Link %q", r.body, r.header.Get("Link"))
	}
	if r := ts.do(t, "GET", "/v1/categories?after_id=6", ts.key, ""); string(r.body) != "[]\n" {
		t.Errorf("past the end: %s", r.body)
	}
	// Pages are cached: a full page stays as it is (ids only grow), a page
	// at the end of the list sees the next write, and both have ETags.
	first := ts.do(t, "GET", "/v1/categories?limit=4", ts.key, "")
	if tag := first.header.Get("ETag"); tag == "" || ts.do(t, "GET", "/v1/categories?limit=4", ts.key, "", "If-None-Match", tag).status != 304 {
		t.Errorf("first page: ETag %q, not answered with 304 when the client has it", tag)
	}
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"c6"}`)
	if r := ts.do(t, "GET", "/v1/categories?limit=4", ts.key, ""); string(r.body) != string(first.body) || r.header.Get("ETag") != first.header.Get("ETag") {
		t.Errorf("first page changed after a write past it: %s", r.body)
	}
	r = ts.do(t, "GET", "/v1/categories?limit=4&after_id=4", ts.key, "")
	if page := decode[[]Category](t, r); len(page) != 3 || page[2].Name != "c6" {
		t.Errorf("last page after a write: %s (stale?)", r.body)
	}
	if page := decode[[]Category](t, ts.do(t, "GET", "/v1/categories?after_id=6", ts.key, "")); len(page) != 1 || page[0].Name != "c6" {
		t.Errorf("the page that was past the end, after a write: %v", page)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after_id=-1", "after_id=1.5"} {
		wantError(t, ts.do(t, "GET", "/v1/categories?"+q, ts.key, ""), 400, "validation_failed")
	}
}

func TestLargeListIsStreamed(t *testing.T) {
	db := filepath.Join(t.TempDir(), "large.db")
	key := createKey(t, db, "--plan", "business")
	s := testStore(t, db, true)
	_, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
		INSERT INTO categories (name, fold, description) SELECT printf('category %06d', i), printf('category %06d', i), printf('%0100d', i) FROM n`)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	ts := startServerOn(t, db, key)
	r := ts.do(t, "GET", "/v1/categories", key, "")
	list := decode[[]Category](t, r)
	if r.status != 200 || len(list) != 20000 || list[19999].Name != "category 020000" {
		t.Fatalf("large list: %d, %d rows", r.status, len(list))
	}
	if r.header.Get("ETag") != "" || len(r.body) < maxCachedList {
		t.Errorf("a %d-byte list got ETag %q: it should be streamed, not cached", len(r.body), r.header.Get("ETag"))
	}
}

// TestTooLargeListIsNotReadTwice checks that once the list outgrew the
// cache, a request streams it straight away, instead of first reading and
// serializing a cache's worth of it to find out again, and that the stream
// still sees new rows.
func TestTooLargeListIsNotReadTwice(t *testing.T) {
	s := testStore(t, filepath.Join(t.TempDir(), "big.db"), true)
	h := handleCategoryList(s, "http://127.0.0.1/v1", defaultBusyTimeout).(*categoryLists)
	get := func() []Category {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/categories", nil))
		var list []Category
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || w.Code != 200 {
			t.Fatalf("list: %d, %v", w.Code, err)
		}
		return list
	}
	if _, err := s.CreateCategory(context.Background(), Category{Name: "small"}, "small", nil); err != nil {
		t.Fatal(err)
	}
	if list := get(); len(list) != 1 || h.cached.Load() == nil {
		t.Fatalf("a one-row list: %d rows, cached %v", len(list), h.cached.Load() != nil)
	}
	if _, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
		INSERT INTO categories (name, fold, description) SELECT printf('c%06d', i), printf('c%06d', i), printf('%0100d', i) FROM n`); err != nil {
		t.Fatal(err)
	}
	s.categoriesGen.Add(1) // as a create through the API would
	if list := get(); len(list) != 20001 || !h.tooLarge.Load() || h.cached.Load() != nil {
		t.Fatalf("the large list: %d rows, too large %v, an old copy kept %v", len(list), h.tooLarge.Load(), h.cached.Load() != nil)
	}
	if _, err := s.CreateCategory(context.Background(), Category{Name: "last"}, "last", nil); err != nil {
		t.Fatal(err)
	}
	if list := get(); len(list) != 20002 || list[20001].Name != "last" {
		t.Errorf("after a create: %d rows", len(list))
	}
}

// TestListReadOnceAfterWrite checks that the GETs in flight after a write
// share one read of the list: each used to read and serialize it on its
// own, all 32 of them here, because each found the cached copy stale.
func TestListReadOnceAfterWrite(t *testing.T) {
	db := filepath.Join(t.TempDir(), "herd.db")
	key := createKey(t, db, "--plan", "business")
	s := testStore(t, db, true)
	// 5,000 rows, about 400 KB of JSON: cached, and long enough to read
	// that the GETs below overlap.
	if _, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
		INSERT INTO categories (name, fold, description) SELECT printf('category %06d', i), printf('category %06d', i), printf('%060d', i) FROM n`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ts := startServerOn(t, db, key)
	reads := func() int {
		m := ts.get(t, ts.admin+"/metrics")
		_, v, ok := strings.Cut(m, "\npetstore_category_list_reads_total ")
		n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(v, "\n", 2)[0]))
		if !ok || err != nil {
			t.Fatalf("no petstore_category_list_reads_total in the metrics")
		}
		return n
	}
	if r := ts.do(t, "POST", "/v1/categories", key, `{"name":"newest"}`); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	before := reads()
	start := make(chan struct{})
	etags := make([]string, 32)
	var wg sync.WaitGroup
	for i := range etags {
		wg.Go(func() {
			<-start
			r, err := ts.send("GET", "/v1/categories", key, "")
			if err != nil || r.status != 200 || !bytes.Contains(r.body, []byte(`"name":"newest"`)) {
				t.Errorf("GET: %d %v, without the new category", r.status, err)
			}
			etags[i] = r.header.Get("ETag")
		})
	}
	close(start)
	wg.Wait()
	if n := reads() - before; n != 1 {
		t.Errorf("32 GETs after a write read the list %d times, want 1", n)
	}
	for _, e := range etags {
		if e != etags[0] {
			t.Errorf("ETags differ: %q, %q", e, etags[0])
		}
	}
}
