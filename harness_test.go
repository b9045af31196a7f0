package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

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
	return createKeyJSON(t, db, args...).Key
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
// which may carry a clock (clockKey). With --tls-cert in args the server's
// base URL is https, and its client trusts the certificates of that file.
func startServerIn(t *testing.T, parent context.Context, db, key string, args ...string) *testServer {
	t.Helper()
	// --ban-hold 0: a banned key's requests answer at once, so that tests of
	// bans do not wait 100 ms a request; TestBannedKeyWaits sets its own.
	all := append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--db", db, "--ban-hold", "0"}, testRedisArgs(t, db)...)
	all = append(all, args...) // after ours: a test's own --redis wins
	stderr, done, stop := serveInBackground(t, parent, all)
	ts := &testServer{db: db, key: key, stderr: stderr, stop: stop}
	ts.client = contractClient(t, args)
	deadline := time.Now().Add(10 * time.Second)
	scheme := "http://"
	if tlsCertArg(args) != "" {
		scheme = "https://"
	}
	for ts.base == "" {
		if addr := logAddr(listeningRE, stderr.String()); addr != "" {
			ts.base = scheme + addr
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

// serveInBackground runs serve with args (run's context derived from
// parent) until stop, which cancels it and waits up to 15 s for it to
// return nil; the test's cleanup stops it too, and prints its log if the
// test failed. done gets run's result, for a start that fails.
func serveInBackground(t *testing.T, parent context.Context, args []string) (stderr *syncBuffer, done <-chan error, stop func()) {
	t.Helper()
	return serveInBackgroundEnv(t, parent, args, nil)
}

// serveInBackgroundEnv is serveInBackground with env as the environment
// run reads (the OTEL_* variables, say).
func serveInBackgroundEnv(t *testing.T, parent context.Context, args []string, env map[string]string) (stderr *syncBuffer, done <-chan error, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	stderr = &syncBuffer{}
	result := make(chan error, 1)
	go func() { result <- run(ctx, args, envFrom(env), io.Discard, stderr) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-result:
				if err != nil {
					t.Errorf("serve returned %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("serve did not stop within 15s")
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("server log:\n%s", stderr.String())
		}
	})
	return stderr, result, stop
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
	doc, err := openAPIDocument(publicURL, env, apiDocOps())
	if err != nil {
		t.Fatal(err)
	}
	c := contractFor(t, doc)
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	if f := tlsCertArg(args); f != "" {
		tr.TLSClientConfig = &tls.Config{RootCAs: certPool(t, f)}
	}
	ct := &checkingTransport{base: tr, contract: func() *contract { return c }}
	t.Cleanup(func() { ct.report(t) })
	return &http.Client{Transport: ct}
}

// tlsCertArg returns the file of --tls-cert in a server's args, or "".
func tlsCertArg(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--tls-cert" {
			return args[i+1]
		}
	}
	return ""
}

// certPool returns a pool of the certificates in the PEM file: a test's
// self-signed ones, which a client then trusts as roots.
func certPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s holds no certificate", file)
	}
	return pool
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

// get fetches url and returns its body.
func (ts *testServer) get(t *testing.T, url string) string {
	t.Helper()
	resp, err := ts.client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// contract checks HTTP exchanges against the OpenAPI document a server
// serves, with libopenapi-validator: a documented operation's response must
// have a documented status, its required headers and a body that matches
// its schema; a request that names no documented operation must get a JSON
// 404, 405 or (the limiter runs before routing) 429. A HEAD answer has no
// body, and the Content-Type of the GET answer of its status. A CORS
// preflight is no operation and is not checked.
type contract struct {
	mu  sync.Mutex // the validator is not documented as safe for concurrent use
	v   validator.Validator
	ops []docOperation
}

// docOperation is one operation of the document, with its path as a pattern.
type docOperation struct {
	method string
	path   string // as in the router: /v1/pets/{petId}
	re     *regexp.Regexp
	media  map[string][]string // status -> the media types of its body
}

var contracts sync.Map // served document -> *contract

// contractFor returns the checker of a served document, built once per
// distinct document.
func contractFor(t *testing.T, doc []byte) *contract {
	t.Helper()
	if c, ok := contracts.Load(string(doc)); ok {
		return c.(*contract)
	}
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		t.Fatalf("served OpenAPI document: %v", err)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		t.Fatalf("served OpenAPI document: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("served OpenAPI document: %s: %s", e.Message, e.Reason)
		}
		t.FailNow()
	}
	ops, err := documentOperations(doc)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := contracts.LoadOrStore(string(doc), &contract{v: v, ops: ops})
	return c.(*contract)
}

// documentOperations lists a document's operations with their full paths
// under the path of its first server.
func documentOperations(doc []byte) ([]docOperation, error) {
	var d struct {
		Servers []struct{ URL string } `json:"servers"`
		Paths   map[string]map[string]json.RawMessage
	}
	type operation struct {
		Responses map[string]struct {
			Content map[string]json.RawMessage
		}
	}
	doc, err := inlineResponses(doc)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if len(d.Servers) == 0 {
		return nil, fmt.Errorf("the document has no servers")
	}
	base := regexp.MustCompile(`^https?://[^/]+`).ReplaceAllString(d.Servers[0].URL, "")
	var ops []docOperation
	for p, item := range d.Paths {
		full := base + p
		re := regexp.MustCompile("^" + regexp.MustCompile(`\\\{[^/]+\\\}`).ReplaceAllString(regexp.QuoteMeta(full), `[^/]+`) + "$")
		for method, raw := range item {
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}, method) {
				continue
			}
			var o operation
			if err := json.Unmarshal(raw, &o); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, p, err)
			}
			media := map[string][]string{}
			for status, r := range o.Responses {
				for mt := range r.Content {
					media[status] = append(media[status], mt)
				}
			}
			ops = append(ops, docOperation{method: strings.ToUpper(method), path: full, re: re, media: media})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].method+ops[i].path < ops[j].method+ops[j].path })
	return ops, nil
}

// inlineResponses returns doc with each response of an operation that is
// a $ref to components.responses replaced by what it refers to, for the
// tests that read an operation's statuses, headers and bodies. Its numbers
// are kept as written.
func inlineResponses(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var d map[string]any
	if err := dec.Decode(&d); err != nil {
		return nil, err
	}
	components, _ := d["components"].(map[string]any)
	shared, _ := components["responses"].(map[string]any)
	paths, _ := d["paths"].(map[string]any)
	for path, item := range paths {
		item, _ := item.(map[string]any)
		for method, op := range item {
			op, _ := op.(map[string]any)
			responses, _ := op["responses"].(map[string]any)
			for status, r := range responses {
				rm, _ := r.(map[string]any)
				ref, ok := rm["$ref"].(string)
				if !ok {
					continue
				}
				name, found := strings.CutPrefix(ref, "#/components/responses/")
				if !found || shared[name] == nil {
					return nil, fmt.Errorf("%s %s %s: %s is no response of components.responses", method, path, status, ref)
				}
				responses[status] = shared[name]
			}
		}
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// operation returns the operation that method and path name, or nil.
func (c *contract) operation(method, path string) *docOperation {
	for i, op := range c.ops {
		if op.method == method && op.re.MatchString(path) {
			return &c.ops[i]
		}
	}
	return nil
}

// mediaType is resp's Content-Type without its parameters, or "".
func mediaType(resp *http.Response) string {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt
}

// check returns what is wrong with one exchange, if anything.
func (c *contract) check(req *http.Request, resp *http.Response, body []byte) []string {
	path := req.URL.Path
	if path != "/v1" && !strings.HasPrefix(path, "/v1/") {
		return nil // not the API: health checks, metrics
	}
	if req.Method == http.MethodOptions && req.Header.Get("Access-Control-Request-Method") != "" {
		return nil // a CORS preflight: no operation, not in the document (DECISIONS.md section 10)
	}
	where := fmt.Sprintf("%s %s -> %d", req.Method, path, resp.StatusCode)
	head := req.Method == http.MethodHead
	if head && len(body) > 0 {
		return []string{where + ": a HEAD answer with a body: " + string(body)}
	}
	op := c.operation(req.Method, path)
	if op == nil {
		var e apiError
		switch {
		case !slices.Contains([]int{404, 405, 429}, resp.StatusCode):
		case head && mediaType(resp) == "application/json":
			return nil // the body the GET would get, an Error, is not sent
		case !head && json.Unmarshal(body, &e) == nil && e.Status == resp.StatusCode:
			return nil
		}
		return []string{fmt.Sprintf("%s: not a documented operation, yet not a JSON 404, 405 or 429: %s %s",
			where, resp.Header.Get("Content-Type"), body)}
	}
	var out []string
	if head {
		// A HEAD answer carries the Content-Type of the body that the
		// GET of its path gets with its status, and does not send it.
		if get := c.operation(http.MethodGet, path); get == nil {
			out = append(out, where+": a HEAD operation without a GET")
		} else if want := get.media[strconv.Itoa(resp.StatusCode)]; len(want) > 0 && !slices.Contains(want, mediaType(resp)) {
			out = append(out, fmt.Sprintf("%s: Content-Type %q, want that of the GET: %q", where, resp.Header.Get("Content-Type"), want))
		}
	}
	judged := body
	if resp.Header.Get("Content-Encoding") == "gzip" && len(body) > 0 {
		// A client that asked for gzip itself reads it; the schema is of
		// what it decompresses to.
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			judged, err = io.ReadAll(zr)
		}
		if err != nil {
			return append(out, fmt.Sprintf("%s: a gzip body that does not decompress: %v", where, err))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(judged))
	ok, errs := c.v.ValidateHttpResponse(req, resp)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if ok {
		return out
	}
	for _, e := range errs {
		msg := where + ": " + e.Message + ": " + e.Reason
		for _, se := range e.SchemaValidationErrors {
			msg += "; " + se.FieldPath + ": " + se.Reason
		}
		out = append(out, msg)
	}
	return out
}

// checkingTransport hands every exchange to a contract and keeps what it
// finds wrong, for the test to report.
type checkingTransport struct {
	base     http.RoundTripper
	contract func() *contract // nil until the server's document is known

	mu       sync.Mutex
	problems []string
	checked  int
}

func (ct *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := ct.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return resp, nil // a cut-off body is the test's to judge
	}
	if c := ct.contract(); c != nil {
		problems := c.check(req, resp, body)
		ct.mu.Lock()
		ct.checked++
		ct.problems = append(ct.problems, problems...)
		ct.mu.Unlock()
	}
	return resp, nil
}

// report fails t with every problem found so far.
func (ct *checkingTransport) report(t *testing.T) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	for _, p := range ct.problems {
		t.Errorf("contract: %s", p)
	}
	ct.problems = nil
}

// serverProcess is the real program running in a process of its own.
type serverProcess struct {
	cmd       *exec.Cmd
	addr      string // the API's address, once it listens
	stderr    *syncBuffer
	exited    chan error
	listening chan string // the API's address when it logs "listening"
}

// startProcess runs "petstore serve" in a new process (this test binary,
// which TestMain turns into main) and waits until it listens.
func startProcess(t *testing.T, db string, args ...string) *serverProcess {
	t.Helper()
	all := append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off"}, args...)
	cmd := exec.Command(os.Args[0], all...)
	cmd.Env = append(os.Environ(), "PETSTORE_TEST_MAIN=1")
	p := launchProcess(t, cmd)
	p.waitListening(t, 10*time.Second)
	return p
}

// launchProcess starts cmd, which runs the real program (with
// PETSTORE_TEST_MAIN=1 in its environment), and collects its log; it does
// not wait for anything. The process is killed when the test ends.
func launchProcess(t *testing.T, cmd *exec.Cmd) *serverProcess {
	t.Helper()
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serverProcess{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan error, 1), listening: make(chan string, 1)}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			fmt.Fprintln(p.stderr, sc.Text())
			if a := logAddr(listeningRE, sc.Text()); a != "" {
				p.listening <- a
			}
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("server process %d log:\n%s", cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

// waitListening waits until the process listens, and fails the test if it
// exits first or takes longer than within.
func (p *serverProcess) waitListening(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case p.addr = <-p.listening:
	case err := <-p.exited:
		t.Fatalf("the server process exited: %v\n%s", err, p.stderr.String())
	case <-time.After(within):
		t.Fatalf("the server process did not start within %v:\n%s", within, p.stderr.String())
	}
}

// waitLog waits until the process's log says what, and fails the test if
// it exits first or takes longer than within.
func (p *serverProcess) waitLog(t *testing.T, what string, within time.Duration) {
	t.Helper()
	for limit := time.Now().Add(within); !strings.Contains(p.stderr.String(), what); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-p.exited:
			t.Fatalf("process %d exited (%v) before it logged %q:\n%s", p.cmd.Process.Pid, err, what, p.stderr.String())
		default:
		}
		if time.Now().After(limit) {
			t.Fatalf("process %d did not log %q within %v:\n%s", p.cmd.Process.Pid, what, within, p.stderr.String())
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *serverProcess) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case err := <-p.exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("the server process did not exit within %v", within)
		return -1
	}
}

// terminate sends SIGTERM and waits until the listener is closed: the
// server is then draining.
func (p *serverProcess) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the server still accepts connections 5s after SIGTERM")
		}
	}
}

// dialerFrom returns a dialer whose connections come from the loopback
// address local (all of 127.0.0.0/8 is the loopback's), so that one test
// can be several clients, and a proxy listed or not.
func dialerFrom(local string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
}

// clientFrom returns an HTTP client whose connections come from local
// (dialerFrom), speaking HTTPS with tlsConf (nil: the system's roots) and
// following no redirect.
func clientFrom(t *testing.T, local string, tlsConf *tls.Config) *http.Client {
	tr := &http.Transport{DialContext: dialerFrom(local).DialContext, TLSClientConfig: tlsConf}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// testClock is the tests' one injected clock, for a server (through
// context) or a limiter (through now). Until set is called it follows the
// real clock, moved by add: the idempotency tests age answers so. Once set,
// it stands at that moment and moves only by set and add: the limiter and
// key expiry tests need a moment that does not drift.
type testClock struct {
	mu     sync.Mutex
	pinned bool
	at     time.Time     // the moment set, moved by add
	offset time.Duration // added to the real clock until set
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pinned {
		return c.at
	}
	return time.Now().Add(c.offset)
}

func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pinned, c.at = true, t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pinned {
		c.at = c.at.Add(d)
	} else {
		c.offset += d
	}
}

func (c *testClock) addSeconds(s int64) { c.add(time.Duration(s) * time.Second) }

// context carries the clock to run, which serves with it.
func (c *testClock) context() context.Context {
	return context.WithValue(context.Background(), clockKey{}, c.now)
}

// createKeyJSON runs keys create --json with args and returns what it
// printed.
func createKeyJSON(t *testing.T, db string, args ...string) keyView {
	t.Helper()
	out, _, err := runCLI(t, nil, append([]string{"keys", "create", "--db", db, "--json"}, args...)...)
	if err != nil {
		t.Fatalf("keys create %v: %v", args, err)
	}
	var v keyView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("keys create --json printed %q: %v", out, err)
	}
	return v
}

// apiDocOps is the facts of the API's route table as the document takes
// them, for the tests that make the document themselves.
func apiDocOps() map[string]docOp { return docOps(apiRoutes(nil, nil, serveConfig{})) }
