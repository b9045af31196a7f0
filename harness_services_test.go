package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/rueidis"
)

// postgresEnv names the variable that points the tests at a PostgreSQL
// database (postgres://postgres@127.0.0.1:5432/test): every test that
// starts a server then runs on a fresh schema of it, and the tests of
// PostgreSQL alone run. Unset, they run on SQLite, and those skip.
const postgresEnv = "PETSTORE_TEST_POSTGRES"

// needPostgres returns the database of PETSTORE_TEST_POSTGRES, or skips
// the test when it is not set.
func needPostgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv(postgresEnv)
	if base == "" {
		t.Skip("set " + postgresEnv + "=postgres://... to run the PostgreSQL tests")
	}
	return base
}

// testDB returns the --db of a fresh database for one test: a new schema
// in PETSTORE_TEST_POSTGRES's database, dropped when the test ends, or a
// SQLite file in a temporary directory when the variable is not set.
func testDB(t testing.TB) string {
	t.Helper()
	if os.Getenv(postgresEnv) == "" {
		return filepath.Join(t.TempDir(), "petstore.db")
	}
	return postgresSchema(t, needPostgres(t))
}

// postgresSchema creates a schema of its own for the test in base's
// database and returns base with search_path set to it. A database that
// does not answer fails the test: the variable says it should.
func postgresSchema(t testing.TB, base string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("%s is set, but its database does not answer: %v", postgresEnv, err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	schema := "petstore_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", postgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// openTestStore opens the database db (either kind), migrated, and closes
// it when the test ends.
func openTestStore(t testing.TB, db string) Store {
	t.Helper()
	s, err := openStore(context.Background(), db, storeOptions{migrate: true, now: time.Now, busy: defaultBusyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// redisEnv names the variable that turns on the tests that need Redis: a
// redis:// URL of a server they may write to (each under a key prefix of
// its own).
const redisEnv = "PETSTORE_TEST_REDIS"

// needRedis returns PETSTORE_TEST_REDIS, or skips the test when it is not
// set. A Redis that does not answer fails the test: the variable says it
// should.
func needRedis(t testing.TB) string {
	t.Helper()
	u := os.Getenv(redisEnv)
	if u == "" {
		t.Skip("set " + redisEnv + "=redis://127.0.0.1:6379/0 to run the Redis tests")
	}
	c := redisTestClient(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("%s is set but Redis does not answer: %v", redisEnv, err)
	}
	return u
}

// redisTestClient returns a client of u, closed when the test ends.
func redisTestClient(t testing.TB, u string) rueidis.Client {
	t.Helper()
	opt, err := parseRedisURL(u)
	if err != nil {
		t.Fatal(err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("%s is set but Redis does not answer: %v", redisEnv, err)
	}
	t.Cleanup(c.Close)
	return c
}

// redisTestPrefix returns a key prefix of the test's own in u's database,
// whose keys are deleted when the test ends.
func redisTestPrefix(t testing.TB, u string) string {
	t.Helper()
	// Only letters, digits and _ of the test's name: SCAN's MATCH reads
	// [ ] * ? \ as a pattern.
	name := strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			return c
		}
		return '_'
	}, t.Name())
	prefix := fmt.Sprintf("petstore-test:%s:%x:", name, mrand.Uint64())
	c := redisTestClient(t, u)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, k := range redisTestKeys(t, c, prefix) {
			c.Do(ctx, c.B().Unlink().Key(k).Build())
		}
	})
	return prefix
}

// redisTestKeys lists the keys that begin with prefix.
func redisTestKeys(t testing.TB, c rueidis.Client, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var keys []string
	for cursor := uint64(0); ; {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Errorf("scan %s*: %v", prefix, err)
			return keys
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return keys
		}
	}
}

// rmRedis is a redis-server of the test's own, which it may kill.
type rmRedis struct {
	t     *testing.T
	bin   string
	port  int
	dir   string
	out   *syncBuffer
	conf  string   // a sentinel's configuration file; "" for a plain Redis
	extra []string // configuration beyond rmStartRedis's own
	cmd   *exec.Cmd
	done  chan struct{}
}

// rmStartRedis starts a redis-server without persistence on a free
// loopback port, with the extra configuration given (e.g. "--requirepass",
// "pw"), and kills it when the test ends. Without redis-server in PATH the
// test skips, but fails when PETSTORE_TEST_REDIS says Redis is there.
func rmStartRedis(t *testing.T, extra ...string) *rmRedis {
	t.Helper()
	return rmStartRedisConf(t, "", extra...)
}

// rmStartRedisConf is rmStartRedis with a Sentinel's configuration file
// (rmStartSentinels'): with one, the server runs as a Sentinel, which
// rewrites the file as it learns; "" starts a plain Redis.
func rmStartRedisConf(t *testing.T, conf string, extra ...string) *rmRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil && os.Getenv(redisEnv) != "" {
		t.Fatalf("%s is set but redis-server is not in PATH: this test runs a Redis of its own", redisEnv)
	}
	if err != nil {
		t.Skip("redis-server is not in PATH: this test runs a Redis of its own")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &rmRedis{t: t, bin: bin, port: port, dir: t.TempDir(), out: &syncBuffer{}, conf: conf, extra: extra}
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("redis-server output:\n%s", s.out.String())
		}
	})
	s.start()
	return s
}

func (s *rmRedis) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *rmRedis) url() string { return "redis://" + s.addr() }

// start starts redis-server, empty, and waits until it answers PING.
func (s *rmRedis) start() {
	s.t.Helper()
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir}
	if s.conf != "" {
		args = append([]string{s.conf, "--sentinel"}, args...)
	}
	cmd := exec.Command(s.bin, append(args, s.extra...)...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := rmPing(s.addr())
		if err == nil {
			return
		}
		select {
		case <-done:
			s.t.Fatalf("redis-server on port %d exited at its start:\n%s", s.port, s.out.String())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d does not answer PING within 10s: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill kills redis-server with SIGKILL, as a crash does, and waits for it
// to end.
func (s *rmRedis) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// rmPing sends PING to the Redis at addr and wants PONG, or NOAUTH from
// a Redis with a password: it answers.
func rmPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	b, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if b != "+PONG\r\n" && !strings.HasPrefix(b, "-NOAUTH ") {
		return fmt.Errorf("PING answered %q", b)
	}
	return nil
}

// rmSentinel is a Redis Sentinel of the test's own (redis-server
// --sentinel) that watches one master under a name.
type rmSentinel struct {
	*rmRedis
	name   string
	client rueidis.Client
}

// rmStartSentinels starts n Sentinels on free loopback ports that watch
// master as name, with a quorum of a majority of them, and password the
// master's and its replicas' ("" for none). They call a master down after
// a second without an answer (Sentinel's default is 30 s; less risks a
// failover that no kill caused on a busy machine). It waits until each
// Sentinel knows the others and sees each of replicas connected to the
// master, and kills them when the test ends.
func rmStartSentinels(t *testing.T, n int, name string, master *rmRedis, password string, replicas ...*rmRedis) []*rmSentinel {
	t.Helper()
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n", name, master.port, n/2+1)
	if password != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\n", name, password)
	}
	var all []*rmSentinel
	for range n {
		file := filepath.Join(t.TempDir(), "sentinel.conf")
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &rmSentinel{rmRedis: rmStartRedisConf(t, file), name: name}
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.addr()}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatalf("Sentinel on port %d: %v", s.port, err)
		}
		t.Cleanup(c.Close)
		s.client = c
		all = append(all, s)
	}
	// Sentinels find each other through the master, every 2 s.
	for _, s := range all {
		var seen []map[string]string
		if took, ok := rmWaitFor(10*time.Second, func() bool {
			seen = s.replicas()
			for _, r := range replicas {
				if !slices.ContainsFunc(seen, func(m map[string]string) bool {
					return m["port"] == strconv.Itoa(r.port) && m["flags"] == "slave" && m["master-link-status"] == "ok"
				}) {
					return false
				}
			}
			return s.others() == n-1
		}); !ok {
			t.Fatalf("the Sentinel on port %d knows %d others and sees the replicas as %v, %v after its start:\n%s",
				s.port, s.others(), seen, took.Round(time.Millisecond), s.out.String())
		}
	}
	return all
}

// others returns how many other Sentinels the Sentinel knows (SENTINEL
// SENTINELS), -1 when it does not answer.
func (s *rmSentinel) others() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := s.client.Do(ctx, s.client.B().SentinelSentinels().Master(s.name).Build()).ToArray()
	if err != nil {
		return -1
	}
	return len(v)
}

// replicas returns what the Sentinel knows of the master's replicas
// (SENTINEL REPLICAS), nil when it does not answer.
func (s *rmSentinel) replicas() []map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := s.client.Do(ctx, s.client.B().SentinelReplicas().Master(s.name).Build()).ToArray()
	if err != nil {
		return nil
	}
	var all []map[string]string
	for _, r := range v {
		if m, err := r.AsStrMap(); err == nil {
			all = append(all, m)
		}
	}
	return all
}

// master returns the port of the master that the Sentinel names
// (SENTINEL GET-MASTER-ADDR-BY-NAME), 0 when it does not answer.
func (s *rmSentinel) master() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := s.client.Do(ctx, s.client.B().SentinelGetMasterAddrByName().Master(s.name).Build()).AsStrSlice()
	if err != nil || len(v) != 2 {
		return 0
	}
	port, _ := strconv.Atoi(v[1])
	return port
}

// pmPropagation is how late DECISIONS.md section 8 allows new and revoked
// keys to take effect on the other instances.
const pmPropagation = 2 * time.Second

// pmStart starts n instances on db, each with key as its testServer.key.
func pmStart(t *testing.T, db, key string, n int, args ...string) []*testServer {
	t.Helper()
	servers := make([]*testServer, n)
	for i := range servers {
		servers[i] = startServerOn(t, db, key, args...)
	}
	pmCloseIdleFirst(t, servers)
	return servers
}

// pmCloseIdleFirst makes the test's clients close their idle connections
// before the servers stop (cleanups run last first). A connection that a
// client dialled but never used is new to its server, and http.Server's
// Shutdown waits up to 5 s for such a connection to send a request.
func pmCloseIdleFirst(t *testing.T, servers []*testServer) {
	t.Cleanup(func() {
		for _, ts := range servers {
			if ct, ok := ts.client.Transport.(*checkingTransport); ok {
				if tr, ok := ct.base.(interface{ CloseIdleConnections() }); ok {
					tr.CloseIdleConnections()
				}
			}
		}
	})
}

// pmBigKey creates an enterprise key whose limits no test here comes near,
// so that the minute buckets (one per instance) never get in the way.
func pmBigKey(t *testing.T, db string) string {
	t.Helper()
	key := createKeyJSON(t, db, "--plan", "enterprise", "--rpm", "10000000", "--rpd", "1000000000", "--name", "big").Key
	return key
}

// pmSend is ts.send with a client timeout, so that a server that hangs
// fails the test instead of stalling it; it returns how long the answer
// took. Safe in any goroutine.
func pmSend(ts *testServer, timeout time.Duration, method, path, key, body string, header ...string) (response, time.Duration, error) {
	client := &http.Client{Transport: ts.client.Transport, Timeout: timeout}
	start := time.Now()
	r, err := ts.sendVia(client, method, path, key, body, header...)
	return r, time.Since(start), err
}

// pmErrorCode returns the code of an Error body, or "".
func pmErrorCode(body []byte) string {
	var e apiError
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Code
}

// pmConnect connects straight to the test's schema (db is postgresSchema's
// URL, with its search_path) and closes the connection when the test ends.
func pmConnect(t *testing.T, db string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatalf("connect to the test schema: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// pmUsage returns the day count of key id stored for today (UTC).
func pmUsage(t *testing.T, conn *pgx.Conn, id int64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int64
	err := conn.QueryRow(ctx, "SELECT coalesce(sum(count), 0) FROM usage WHERE key_id = $1 AND day = $2::text::date",
		id, time.Now().UTC().Format(time.DateOnly)).Scan(&n)
	if err != nil {
		t.Fatalf("read usage: %v", err)
	}
	return n
}

// pmWaitUsage polls the stored day count of key id until it is want, for
// at most within.
func pmWaitUsage(t *testing.T, conn *pgx.Conn, id, want int64, within time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		n := pmUsage(t, conn, id)
		if n == want {
			t.Logf("key %d: the database counts %d requests %v after the last", id, n, time.Since(start).Round(time.Millisecond))
			return
		}
		if n > want || time.Since(start) > within {
			t.Fatalf("key %d: the database counts %d requests after %v, want %d", id, n, time.Since(start).Round(time.Millisecond), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pmProxy is a TCP proxy to PostgreSQL that the test can break in two
// ways. cut closes every connection through it and closes every new one at
// once, as a database that went away does. stall lets nothing through,
// either way, while keeping every connection open and accepting new ones
// without answering, as a network that drops packets does; what was sent
// meanwhile is delivered on restore, as TCP's retransmissions would.
// restore lets connections through again.
//
// It forwards to its targets in turn (route changes them), and counts the
// connections each got.
type pmProxy struct {
	ln net.Listener

	mu      sync.Mutex
	targets []string
	next    int
	hits    map[string]int
	cutOff  bool
	flowing chan struct{} // closed while data flows; open while stalled
	closed  chan struct{} // closed by the test's cleanup
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func pmStartProxy(t *testing.T, targets ...string) *pmProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pmProxy{ln: ln, targets: targets, hits: map[string]int{}, conns: map[net.Conn]struct{}{},
		flowing: make(chan struct{}), closed: make(chan struct{})}
	close(p.flowing)
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		close(p.closed)
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *pmProxy) addr() string { return p.ln.Addr().String() }

// route makes the proxy forward to targets, in turn, from the next
// connection on.
func (p *pmProxy) route(targets ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets, p.next = targets, 0
}

// pick returns the next target and counts its connection; "" when there
// is none.
func (p *pmProxy) pick() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.targets) == 0 {
		return ""
	}
	target := p.targets[p.next%len(p.targets)]
	p.next++
	p.hits[target]++
	return target
}

// hitsOf returns how many connections went to target.
func (p *pmProxy) hitsOf(target string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[target]
}

// open returns how many connections are through the proxy now, stalled
// ones included.
func (p *pmProxy) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *pmProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.cutOff {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.forward(c) })
	}
}

// gate returns a channel that is closed while data may flow.
func (p *pmProxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flowing
}

// wait blocks while the proxy is stalled; it reports false when done was
// closed (or the proxy) meanwhile.
func (p *pmProxy) wait(done chan struct{}) bool {
	select {
	case <-p.gate():
		return true
	case <-done:
		return false
	case <-p.closed:
		return false
	}
}

func (p *pmProxy) forward(c net.Conn) {
	done := make(chan struct{})
	var up net.Conn
	var once sync.Once
	closeAll := func() {
		once.Do(func() {
			close(done)
			p.mu.Lock()
			delete(p.conns, c)
			if up != nil {
				delete(p.conns, up)
			}
			p.mu.Unlock()
			c.Close()
			if up != nil {
				up.Close()
			}
		})
	}
	// A client that gives up while the proxy stalls is noticed once it
	// flows again: the copy then reads the end of its connection.
	if !p.wait(done) {
		closeAll()
		return
	}
	target := p.pick()
	if target == "" {
		closeAll()
		return
	}
	conn, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		closeAll()
		return
	}
	p.mu.Lock()
	if p.cutOff { // cut while dialling
		p.mu.Unlock()
		conn.Close()
		closeAll()
		return
	}
	up = conn
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(up, c, done); closeAll() })
	wg.Go(func() { p.copy(c, up, done); closeAll() })
	wg.Wait()
}

// copy copies from src to dst, holding what it read while the proxy
// stalls.
func (p *pmProxy) copy(dst, src net.Conn, done chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait(done) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes every connection through the proxy, and makes it close new
// ones at once, until restore.
func (p *pmProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = true
	for c := range p.conns {
		c.Close()
	}
}

// stall stops all data through the proxy, until restore.
func (p *pmProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default: // stalled already
	}
}

func (p *pmProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = false
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// pmTarget returns the host:port of the database URL db.
func pmTarget(t *testing.T, db string) string {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() == "" || strings.HasPrefix(u.Hostname(), "/") {
		t.Skipf("%s names no TCP host: the outage test needs TCP to put its proxy in between", postgresEnv)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "5432")
	}
	return u.Host
}

// pmViaProxy returns db with its host and port replaced by addr.
func pmViaProxy(t *testing.T, db, addr string) string {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}
