package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgBinEnv names the variable that turns on the tests that make
// PostgreSQL clusters of their own (a primary and streaming standbys, on
// loopback ports, in directories of their own): the directory of the
// server's binaries, initdb, pg_ctl, pg_basebackup and pg_rewind. The
// machine's own PostgreSQL is never touched.
const pgBinEnv = "PETSTORE_TEST_PG_BIN"

// needPGBin returns PETSTORE_TEST_PG_BIN, or skips the test when it is
// not set. Binaries that are not there fail the test: the variable says
// they should be.
func needPGBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(pgBinEnv)
	if bin == "" {
		t.Skip("set " + pgBinEnv + "=/usr/lib/postgresql/15/bin to run the failover tests")
	}
	for _, tool := range []string{"initdb", "pg_ctl", "pg_basebackup", "pg_rewind", "postgres"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			t.Fatalf("%s is set, but: %v", pgBinEnv, err)
		}
	}
	return bin
}

// pgCluster is a test's PostgreSQL cluster: nodes made from one initdb
// (pgTemplate) on free loopback ports, each in a directory under root,
// every server process run as the postgres user when the tests run as
// root (initdb refuses root). The test's cleanup stops every node and
// removes root.
type pgCluster struct {
	t    *testing.T
	bin  string
	root string
	cred *syscall.Credential // nil: run as ourselves

	mu    sync.Mutex
	nodes []*pgNode
}

// pgNode is one server of a pgCluster.
type pgNode struct {
	c    *pgCluster
	name string
	dir  string // the data directory
	log  string // the server's log file
	port int

	mu      sync.Mutex
	running bool
}

// pgStandbyOptions are how addStandby makes a standby. The zero value is
// a standby that streams and applies at once; syncOn makes it synchronous.
type pgStandbyOptions struct {
	// applyDelay makes a standby that applies the WAL it gets this late
	// (recovery_min_apply_delay): one that reads behind the primary.
	applyDelay time.Duration
}

// pgConf is what every node's postgresql.conf adds to initdb's: TCP on
// loopback only (the port comes on the command line), no Unix socket,
// streaming replication, pg_rewind's hints, WAL kept for a standby that
// rejoins, and a quick retry of a standby's lost stream.
const pgConf = `
listen_addresses = '127.0.0.1,::1'
unix_socket_directories = ''
wal_level = replica
max_wal_senders = 10
wal_log_hints = on
hot_standby = on
wal_keep_size = '256MB'
max_wal_size = '256MB'
shared_buffers = '16MB'
max_connections = 60
wal_retrieve_retry_interval = '200ms'
wal_receiver_status_interval = '1s'
synchronous_commit = on
log_min_messages = warning
log_line_prefix = '%m [%p] '
`

// pgTemplateOnce makes pgTemplate: initdb takes many seconds on a loaded
// machine, a copy of its result one.
var (
	pgTemplateOnce sync.Once
	pgTemplateDir  string
	pgTemplateErr  error
)

// removePGTemplate removes the template a test made, for TestMain.
func removePGTemplate() {
	if pgTemplateDir != "" {
		os.RemoveAll(filepath.Dir(pgTemplateDir))
	}
}

// newPGCluster makes an empty cluster in a directory of its own (not
// t.TempDir(), which the postgres user may not enter).
func newPGCluster(t *testing.T) *pgCluster {
	t.Helper()
	bin := needPGBin(t)
	c := &pgCluster{t: t, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("%s is set, the tests run as root and initdb refuses root, but there is no postgres user: %v", pgBinEnv, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	pgTemplateOnce.Do(func() { pgTemplateDir, pgTemplateErr = c.makeTemplate() })
	if pgTemplateErr != nil {
		t.Fatalf("initdb: %v", pgTemplateErr)
	}
	root, err := c.mkdir("petstore-pg-")
	if err != nil {
		t.Fatal(err)
	}
	c.root = root
	t.Cleanup(func() {
		c.mu.Lock()
		nodes := c.nodes
		c.mu.Unlock()
		for _, n := range nodes {
			n.stopNow()
		}
		if t.Failed() {
			for _, n := range nodes {
				if b, err := os.ReadFile(n.log); err == nil {
					t.Logf("log of %s:\n%s", n.name, pgTail(b, 40))
				}
			}
		}
		os.RemoveAll(root)
	})
	return c
}

// pgTail is the last n lines of b.
func pgTail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// mkdir makes a directory under the system's temporary one that the
// postgres user owns.
func (c *pgCluster) mkdir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// makeTemplate runs initdb once for the test binary (TestMain removes it).
func (c *pgCluster) makeTemplate() (string, error) {
	root, err := c.mkdir("petstore-pgtemplate-")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "data")
	if out, err := c.command("initdb", "-D", dir, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	f, err := os.OpenFile(filepath.Join(dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.WriteString(pgConf)
	return dir, err
}

// command is a command of the server's binaries, run as the postgres
// user when the tests run as root.
func (c *pgCluster) command(tool string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, tool), args...)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=5", "LC_ALL=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = append(cmd.Env, "HOME=/tmp")
	}
	return cmd
}

// run runs a tool and fails the test when it fails.
func (c *pgCluster) run(tool string, args ...string) {
	c.t.Helper()
	if out, err := c.command(tool, args...).CombinedOutput(); err != nil {
		c.t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
}

// newNode returns a node named name on a free port, not yet made.
func (c *pgCluster) newNode(name string) *pgNode {
	c.t.Helper()
	n := &pgNode{c: c, name: name, dir: filepath.Join(c.root, name), log: filepath.Join(c.root, name+".log"), port: pgFreePort(c.t)}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n
}

// pgFreePort returns a port that is free on 127.0.0.1 and on ::1.
func pgFreePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln6, err := net.Listen("tcp", net.JoinHostPort("::1", strconv.Itoa(port)))
		ln.Close()
		if err == nil {
			ln6.Close()
			return port
		}
	}
	t.Fatal("no port free on both 127.0.0.1 and ::1")
	return 0
}

// addPrimary makes a primary from the template, starts it, and creates
// the database petstore.
func (c *pgCluster) addPrimary(name string) *pgNode {
	c.t.Helper()
	n := c.newNode(name)
	if out, err := exec.Command("cp", "-a", pgTemplateDir, n.dir).CombinedOutput(); err != nil {
		c.t.Fatalf("copy the template: %v\n%s", err, out)
	}
	n.start()
	n.exec("CREATE DATABASE petstore")
	return n
}

// addStandby makes a streaming standby of primary (pg_basebackup -R),
// starts it and waits until it streams.
func (c *pgCluster) addStandby(name string, primary *pgNode, o pgStandbyOptions) *pgNode {
	c.t.Helper()
	n := c.newNode(name)
	c.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres", "-D", n.dir,
		"-R", "-X", "stream", "-c", "fast", "--no-sync")
	if o.applyDelay > 0 {
		n.appendConf(fmt.Sprintf("recovery_min_apply_delay = '%dms'\n", o.applyDelay.Milliseconds()))
	}
	n.start()
	primary.waitStreaming(n)
	return n
}

// appendConf adds lines to the node's postgresql.auto.conf, which the
// server reads last.
func (n *pgNode) appendConf(lines string) {
	n.c.t.Helper()
	f, err := os.OpenFile(filepath.Join(n.dir, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		n.c.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(lines); err != nil {
		n.c.t.Fatal(err)
	}
}

// addr is the node's host:port on 127.0.0.1.
func (n *pgNode) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// start starts the node's server and waits until it takes connections.
// Its name is its cluster_name, which a standby's walreceiver gives the
// primary as its application_name (synchronous_standby_names names it).
func (n *pgNode) start(opts ...string) {
	n.c.t.Helper()
	o := fmt.Sprintf("-p %d -c cluster_name=%s %s", n.port, n.name, strings.Join(opts, " "))
	n.c.run("pg_ctl", "-D", n.dir, "-l", n.log, "-w", "-t", "60", "-o", o, "start")
	n.mu.Lock()
	n.running = true
	n.mu.Unlock()
}

// stop stops the node cleanly (a switchover's first step): pg_ctl's fast
// shutdown, which ends the sessions and sends the standbys every WAL
// record before the server exits.
func (n *pgNode) stop() {
	n.c.t.Helper()
	n.c.run("pg_ctl", "-D", n.dir, "-w", "-t", "60", "-m", "fast", "stop")
	n.mu.Lock()
	n.running = false
	n.mu.Unlock()
}

// stopNow stops a running node at once, for the cleanup.
func (n *pgNode) stopNow() {
	n.mu.Lock()
	running := n.running
	n.running = false
	n.mu.Unlock()
	if running {
		n.c.command("pg_ctl", "-D", n.dir, "-w", "-t", "30", "-m", "immediate", "stop").Run()
	}
}

// kill SIGKILLs the node's postmaster and every process it started at
// once, as a machine that dies takes them all, and waits until they are
// gone (reaped).
func (n *pgNode) kill() {
	n.c.t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dir, "postmaster.pid"))
	if err != nil {
		n.c.t.Fatalf("kill %s: %v", n.name, err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		n.c.t.Fatalf("kill %s: postmaster.pid: %v", n.name, err)
	}
	pids := append([]int{pid}, pgChildren(pid)...)
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	n.mu.Lock()
	n.running = false
	n.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range pids {
		for pgAlive(p) {
			if time.Now().After(deadline) {
				n.c.t.Fatalf("kill %s: process %d still there after 20s", n.name, p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// pgChildren returns the processes whose parent is pid.
func pgChildren(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, p)
		}
	}
	return kids
}

// pgAlive reports whether process pid is there, a zombie included: the
// server that starts next in its directory takes one for a postmaster that
// still runs, until whoever adopted it reaps it.
func pgAlive(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return err == nil
}

// promote promotes the standby (pg_ctl promote, which waits until it
// takes writes) and returns when it did. A promoted node's standby is
// gone, so it does not wait for one: synchronous replication is turned
// off on it (as Patroni's synchronous_mode does) until syncOn.
func (n *pgNode) promote() time.Time {
	n.c.t.Helper()
	n.c.run("pg_ctl", "-D", n.dir, "-w", "-t", "60", "promote")
	at := time.Now()
	n.exec("ALTER SYSTEM RESET synchronous_standby_names")
	n.exec("SELECT pg_reload_conf()")
	return at
}

// syncOn makes the node's standbys synchronous (synchronous_standby_names
// names them; one must confirm each commit) and waits until one is.
func (n *pgNode) syncOn(standbys ...*pgNode) {
	n.c.t.Helper()
	var names []string
	for _, s := range standbys {
		names = append(names, `"`+s.name+`"`)
	}
	n.exec(fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (%s)'", strings.Join(names, ", ")))
	n.exec("SELECT pg_reload_conf()")
	n.waitFor("a synchronous standby", "SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync'")
}

// rejoin makes the node, stopped (killed or not), a streaming standby of
// primary again: pg_rewind takes back what it wrote that primary never
// got (after crash recovery of its own, when it was killed), and -R points
// it at primary.
func (n *pgNode) rejoin(primary *pgNode) {
	n.c.t.Helper()
	// pg_rewind reads the source's timeline from its control file, which
	// a promotion updates only at its next checkpoint.
	primary.exec("CHECKPOINT")
	n.c.run("pg_rewind", "-D", n.dir, "--source-server", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres", primary.port), "-R", "--no-sync")
	n.start()
	primary.waitStreaming(n)
}

// waitStreaming waits until standby streams from the node.
func (n *pgNode) waitStreaming(standby *pgNode) {
	n.c.t.Helper()
	n.waitFor(standby.name+" streaming", fmt.Sprintf("SELECT count(*) > 0 FROM pg_stat_replication WHERE application_name = '%s' AND state = 'streaming'", standby.name))
}

// waitFor polls query, which returns one boolean, until it is true, for
// at most 30 s.
func (n *pgNode) waitFor(what, query string) {
	n.c.t.Helper()
	n.waitForIn("postgres", what, query)
}

// waitForIn is waitFor on the node's database db.
func (n *pgNode) waitForIn(db, what, query string) {
	n.c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		err := n.queryRowIn(db, query).Scan(&ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			n.c.t.Fatalf("%s: %s not within 30s (%v)", n.name, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// url is the URL of database db on the node, for the test's own
// connections.
func (n *pgNode) url(db string) string {
	return "postgres://postgres@" + n.addr() + "/" + db + "?sslmode=disable&connect_timeout=5"
}

// exec runs one statement on the node's postgres database.
func (n *pgNode) exec(sql string, args ...any) {
	n.c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.url("postgres"))
	if err != nil {
		n.c.t.Fatalf("%s: %v", n.name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		n.c.t.Fatalf("%s: %s: %v", n.name, sql, err)
	}
}

// pgRow is the one row of a query on a connection of its own.
type pgRow struct {
	err  error
	scan func(dest ...any) error
}

func (r pgRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.scan(dest...)
}

// queryRow runs query on the node's postgres database.
func (n *pgNode) queryRow(query string, args ...any) pgRow {
	return n.queryRowIn("postgres", query, args...)
}

// queryRowIn runs query on the node's database db.
func (n *pgNode) queryRowIn(db, query string, args ...any) pgRow {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	conn, err := pgx.Connect(ctx, n.url(db))
	if err != nil {
		cancel()
		return pgRow{err: err}
	}
	return pgRow{scan: func(dest ...any) error {
		defer cancel()
		defer conn.Close(context.Background())
		return conn.QueryRow(ctx, query, args...).Scan(dest...)
	}}
}

// pgMultiHost is the --db of database petstore on the listed hosts
// (host:port each), in libpq's multi-host form.
func pgMultiHost(hosts ...string) string {
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/petstore?sslmode=disable"
}

// syncOff stops the node waiting for standbys (a standby is about to go).
func (n *pgNode) syncOff() {
	n.c.t.Helper()
	n.exec("ALTER SYSTEM RESET synchronous_standby_names")
	n.exec("SELECT pg_reload_conf()")
}

// cutPetstore ends every petstore session on the node (pg_terminate_backend:
// each gets 57P01), as a restart of the instances' network would.
func (n *pgNode) cutPetstore() {
	n.c.t.Helper()
	n.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'petstore%'")
}
