// postgres_conn.go owns how petstore's connections to PostgreSQL are made
// and let go of, so that it follows a failover (DECISIONS.md section 19):
// the read-write host among several, the connect timeout per host, the
// dialer's TCP keepalives and TCP_USER_TIMEOUT, and the answers after
// which a connection is never used again, in the pool and on the lock
// connections alike.

package main

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"
)

// pgConnectTimeout is how long a connection may take to one host when the
// URL sets no connect_timeout: a listed host that vanished (no answer, no
// reset) costs each new connection that long before the next host is
// tried.
const pgConnectTimeout = 2 * time.Second

// pgTCPUserTimeout bounds how long data sent on a connection may go
// unacknowledged, keepalive probes included, before the kernel ends it:
// a server that vanished is noticed within that, even by a connection
// that waits for an answer with no deadline of its own.
const pgTCPUserTimeout = 10 * time.Second

// pgKeepAlive is the dialer's keepalive: the first probe after Idle, then
// every Interval; TCP_USER_TIMEOUT ends the connection when they go
// unanswered (it overrides Count).
var pgKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 2 * time.Second, Count: 3}

// pgDial dials the pool's and the ACME lock's connections: TCP with pgKeepAlive
// and pgTCPUserTimeout; a Unix socket as it is. The connect timeout is
// the driver's (ConnectTimeout, per host).
func pgDial() pgconn.DialFunc {
	d := &net.Dialer{KeepAliveConfig: pgKeepAlive, Control: pgSetTCPUserTimeout}
	return d.DialContext
}

// pgSetTCPUserTimeout is a net.Dialer's Control that sets TCP_USER_TIMEOUT
// on a TCP socket.
func pgSetTCPUserTimeout(network, _ string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(pgTCPUserTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}

// pgKeepsConn is the connections' OnPgError: it reports false, and the
// driver closes the connection at once, for an error after which the
// connection has nothing more to give: a fatal one (the driver's own
// rule), a read-only answer (25006: a standby, a demoted or fenced
// primary), the server's shutdown or crash (57P01, 57P02, 57P03), and a
// connection error (class 08). A closed connection goes out of the pool
// when released, and the next one is dialled to whichever listed host is
// read-write.
func pgKeepsConn(_ *pgconn.PgConn, pe *pgconn.PgError) bool {
	switch {
	case strings.EqualFold(pe.Severity, "FATAL"), strings.EqualFold(pe.Severity, "PANIC"),
		pe.Code == "25006", pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03",
		strings.HasPrefix(pe.Code, "08"):
		return false
	}
	return true
}

// pgReadOnlyParams are the settings that PostgreSQL 14 and newer report to
// the client whenever they change, and that make a session read-only.
var pgReadOnlyParams = []string{"default_transaction_read_only", "in_hot_standby"}

// pgFollowsPrimary sets up cfg, the pool's configuration read from the URL
// db, to follow a failover; the ACME lock's connection is made from a copy of
// it. Each connection is dialled by pgDial, waits at most pgConnectTimeout
// (or the URL's connect_timeout) for a host, and never more than busy (half
// of it with several hosts), and is closed after the errors of pgKeepsConn;
// when one breaks, every other is dropped too (pgConnReset). With several
// hosts and no target_session_attrs (in the URL or PGTARGETSESSIONATTRS),
// connections are made to a read-write host only, and a pooled one whose
// server turned read-only since (default_transaction_read_only set and
// reloaded: a fenced old primary) is dropped before it is used again.
func pgFollowsPrimary(cfg *pgxpool.Config, db string, busy time.Duration) {
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = pgConnectTimeout
	}
	hosts := pgHostCount(cc)
	// A connection made for a request (the ACME lock's) must reach the
	// next host within the request's busy timeout when the first vanished.
	if hosts > 1 {
		busy /= 2
	}
	cc.ConnectTimeout = min(cc.ConnectTimeout, busy)
	cc.DialFunc = pgDial()
	cc.OnPgError = pgKeepsConn
	cc.Tracer = &pgConnReset{} // openPostgres tells it the pool
	if hosts < 2 || cc.ValidateConnect != nil || pgSessionAttrsGiven(db) {
		return
	}
	cc.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	cfg.PrepareConn = func(_ context.Context, conn *pgx.Conn) (bool, error) {
		for _, p := range pgReadOnlyParams {
			if conn.PgConn().ParameterStatus(p) == "on" {
				return false, nil
			}
		}
		return true, nil
	}
}

// pgHostCount is how many hosts the driver tries, each counted once (it
// tries each twice, with TLS and without, under sslmode=prefer).
func pgHostCount(cc *pgx.ConnConfig) int {
	seen := map[string]bool{net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))): true}
	for _, fb := range cc.Fallbacks {
		seen[net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port)))] = true
	}
	return len(seen)
}

// pgSessionAttrsGiven reports whether the URL db or the environment sets
// target_session_attrs.
func pgSessionAttrsGiven(db string) bool {
	if os.Getenv("PGTARGETSESSIONATTRS") != "" {
		return true
	}
	u, _, err := parseDBURL(db)
	return err == nil && u.Query().Has("target_session_attrs")
}

// pgResetEvery bounds how often pgConnReset drops every connection: a
// database that times out every request under load is not also made to
// take a storm of new connections.
const pgResetEvery = time.Second

// pgConnReset drops every connection of the store's pool when one of them broke during a statement (a cut socket, a busy
// timeout, a server that shut it down or answered read-only: the driver
// closed it), not by the client's hang-up. The others went to the same
// host, and are most likely as dead: a host that vanished without a word
// would otherwise cost each of them a whole busy timeout, one at a time,
// before the first new connection is tried. It is the driver's tracer,
// which sees every statement end, on every connection made from the
// pool's configuration.
type pgConnReset struct {
	pool atomic.Pointer[pgxpool.Pool]
	seen atomic.Pointer[pgServerSeen] // told of the drop: the next connection is a reconnection
	last atomic.Int64                 // when it last dropped them, in Unix nanoseconds
}

func (r *pgConnReset) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (r *pgConnReset) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	r.broke(conn, d.Err)
}

func (r *pgConnReset) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *pgConnReset) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *pgConnReset) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	r.broke(conn, d.Err)
}

// broke drops every connection if conn broke with err, at most once every
// pgResetEvery. Those in use go when they are released.
func (r *pgConnReset) broke(conn *pgx.Conn, err error) {
	if err == nil || !conn.IsClosed() || errors.Is(err, context.Canceled) {
		return
	}
	now, last := time.Now().UnixNano(), r.last.Load()
	if now-last < int64(pgResetEvery) || !r.last.CompareAndSwap(last, now) {
		return
	}
	if p := r.pool.Load(); p != nil {
		go p.Reset() // not on the connection's own call path
	}
	if seen := r.seen.Load(); seen != nil {
		seen.dropped.Store(true)
	}
}
