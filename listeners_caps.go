// listeners_caps.go owns what a client may hold of serve's connections
// (DECISIONS.md section 17): the caps per client address and in all, kept
// at accept on the API and plain listeners, before any TLS, and counted
// and logged; and the admin listener's own cap (--admin-max-conns,
// DECISIONS.md section 21), so that it still answers, and the process
// keeps its files, while the API's are full. What serve then watches of
// each connection it let in is in listeners_conns.go.

package main

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// The defaults of --max-conns-per-addr, --max-conns and --admin-max-conns.
const (
	defaultMaxConnsPerAddr = 256
	defaultMaxConnsTotal   = 4096
	defaultAdminMaxConns   = 64
)

// What the database and Redis take of the open files, for --max-conns's
// default (autoMaxConns): SQLite's five connections (the writer and four
// readers) each hold the database and its WAL, beside the shared memory
// and the lock file, rounded up; PostgreSQL's pool takes --db-max-conns
// and the instance keeps two connections outside it (the Idempotency-Key
// locks, the ACME lock) and migrates on two more at start; rueidis pipes
// over up to four connections to Redis and may open a dedicated one.
const (
	sqliteFiles        = 16
	postgresExtraFiles = 4
	redisFiles         = 8
)

// The listeners that the caps cover, as the metrics' listener label names
// them.
const (
	listenerAPI = iota
	listenerPlain
	listenerAdmin
	listenerCount
)

var listenerNames = [listenerCount]string{"api", "plain", "admin"}

// The reasons of a refusal at accept, as the metrics and the log name
// them: the flag whose cap was reached.
const (
	refusedPerAddr = iota
	refusedTotal
	refusedAdmin
	refusedCount
)

var refusedReasons = [refusedCount]string{"max_conns_per_addr", "max_conns", "admin_max_conns"}

// refusalApplies reports whether listener which can refuse for reason:
// the admin listener has only its own cap, the others never that one.
func refusalApplies(which, reason int) bool {
	return (which == listenerAdmin) == (reason == refusedAdmin)
}

// openFileLimit is the process's limit of open files (RLIMIT_NOFILE's
// soft limit, which Go raised to the hard one at start), or MaxUint64
// when it cannot be read or is infinite.
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return math.MaxUint64
	}
	return rl.Cur
}

// autoMaxConns is --max-conns's default for cfg under an open-file limit
// of nofile: defaultMaxConnsTotal, or fileBound when lower (at least 1).
func autoMaxConns(cfg serveConfig, nofile uint64) int {
	return int(max(1, min(fileBound(cfg, nofile), defaultMaxConnsTotal)))
}

// fileBound is the most connections the process can hold under an
// open-file limit of nofile: 80% of it less what the database and Redis
// take and the admin listener's cap. The other 20% are for the
// listeners, the log, the ACME client, and what a connection over the
// cap takes between its accept and its close.
func fileBound(cfg serveConfig, nofile uint64) int64 {
	files := sqliteFiles
	if isPostgresURL(cfg.db) {
		files = cfg.dbMaxConns + postgresExtraFiles
	}
	if cfg.redis != "" {
		files += redisFiles
	}
	if cfg.adminAddr != "" {
		files += cfg.adminMaxConns
	}
	return int64(min(nofile, 1<<40))*8/10 - int64(files)
}

// maxConnsOf is --max-conns as given, or its default under the process's
// open-file limit; one given over fileBound is logged as a warning, as
// the process may then run out of files before it reaches the cap.
func maxConnsOf(cfg serveConfig, logger *slog.Logger) int {
	nofile := openFileLimit()
	if !cfg.maxConnsSet {
		return autoMaxConns(cfg, nofile)
	}
	if bound := fileBound(cfg, nofile); int64(cfg.maxConns) > bound {
		logger.Warn("--max-conns is over 80% of the open-file limit less the database's and Redis's files: the process may run out of files first; raise LimitNOFILE",
			"max_conns", cfg.maxConns, "open_file_limit", nofile, "bound", max(bound, 0))
	}
	return cfg.maxConns
}

// inPrefixes reports whether an address is in one of ps; nil when ps is
// empty.
func inPrefixes(ps []netip.Prefix) func(netip.Addr) bool {
	if len(ps) == 0 {
		return nil
	}
	return func(a netip.Addr) bool {
		a = a.Unmap()
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
}

// connAddrKey is the client that addr counts as: an IPv4 address itself
// (IPv4-mapped IPv6 as IPv4), an IPv6 address its /64, which one host or
// one customer usually holds whole.
func connAddrKey(addr netip.Addr) netip.Addr {
	addr = addr.Unmap().WithZone("")
	if addr.Is4() {
		return addr
	}
	p, _ := addr.Prefix(64)
	return p.Addr()
}

// connCaps keeps the caps of the API and plain listeners together, and the
// connections they let in.
type connCaps struct {
	perAddr     int                   // 0: no cap per address
	total       int                   // --max-conns
	admin       int                   // --admin-max-conns
	exempt      func(netip.Addr) bool // addresses without a cap per address (trusted proxies); nil: none
	firstStream time.Duration         // --read-header-timeout: an HTTP/2 connection's first stream
	start       time.Time             // the base of capConn.lastRead
	// onRefuse logs a connection refused at accept (on the budget).
	onRefuse func(listener, reason string, remote net.Addr)

	mu     sync.Mutex
	byAddr map[netip.Addr]int // open connections by client, capped ones only
	conns  map[*capConn]struct{}
	open   [listenerCount]int

	refused  [listenerCount][refusedCount]atomic.Uint64
	noStream atomic.Uint64 // HTTP/2 connections closed without a first stream
}

func newConnCaps(perAddr, total, admin int, exempt func(netip.Addr) bool, firstStream time.Duration) *connCaps {
	return &connCaps{perAddr: perAddr, total: total, admin: admin, exempt: exempt, firstStream: firstStream, start: time.Now(),
		onRefuse: func(string, string, net.Addr) {},
		byAddr:   map[netip.Addr]int{}, conns: map[*capConn]struct{}{}}
}

// since is the time from c's start, on the monotonic clock.
func (c *connCaps) since() int64 { return int64(time.Since(c.start)) }

// listen returns ln with the caps kept at its accept; which is
// listenerAPI, listenerPlain or listenerAdmin.
func (c *connCaps) listen(ln net.Listener, which int) net.Listener {
	return &capListener{Listener: ln, caps: c, which: which}
}

// capListener is a listener whose Accept keeps the caps: a connection over
// one is closed there, before net/http or TLS sees a byte of it, and
// Accept goes on to the next.
type capListener struct {
	net.Listener
	caps  *connCaps
	which int
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.caps.admit(nc, l.which); c != nil {
			return c, nil
		}
	}
}

// admit returns nc counted as a connection of listener which, or closes
// it and returns nil when it is over a cap.
func (c *connCaps) admit(nc net.Conn, which int) *capConn {
	var key netip.Addr
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok && c.perAddr > 0 && which != listenerAdmin {
		if addr := ta.AddrPort().Addr(); c.exempt == nil || !c.exempt(addr) {
			key = connAddrKey(addr)
		}
	}
	reason := -1
	c.mu.Lock()
	switch {
	case which == listenerAdmin:
		if c.open[listenerAdmin] >= c.admin {
			reason = refusedAdmin
		}
	case key.IsValid() && c.byAddr[key] >= c.perAddr:
		reason = refusedPerAddr
	case c.open[listenerAPI]+c.open[listenerPlain] >= c.total:
		reason = refusedTotal
	}
	if reason < 0 {
		cc := &capConn{Conn: nc, caps: c, which: which, key: key}
		cc.lastRead.Store(c.since())
		if key.IsValid() {
			c.byAddr[key]++
		}
		c.open[which]++
		c.conns[cc] = struct{}{}
		c.mu.Unlock()
		return cc
	}
	c.mu.Unlock()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetLinger(0) // a reset: no FIN_WAIT or TIME_WAIT kept for a refused client
	}
	nc.Close()
	c.refused[which][reason].Add(1)
	c.onRefuse(listenerNames[which], refusedReasons[reason], nc.RemoteAddr())
	return nil
}

// release uncounts cc, once it is closed.
func (c *connCaps) release(cc *capConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc.key.IsValid() {
		if n := c.byAddr[cc.key] - 1; n > 0 {
			c.byAddr[cc.key] = n
		} else {
			delete(c.byAddr, cc.key)
		}
	}
	c.open[cc.which]--
	delete(c.conns, cc)
}

// register adds the caps' metrics to set: the connections open and the
// cap in all, those refused at accept by listener and reason, and the
// HTTP/2 ones closed without a first stream. (Those closed at the drain's
// start are only logged: the admin listener stops with the API.)
func (c *connCaps) register(set *vm.Set) {
	set.RegisterMetricsWriter(func(w io.Writer) {
		c.mu.Lock()
		open := c.open
		c.mu.Unlock()
		vm.WriteMetadataIfNeeded(w, "petstore_connections_open", "gauge")
		for i, name := range listenerNames {
			fmt.Fprintf(w, "petstore_connections_open{listener=%q} %d\n", name, open[i])
		}
		vm.WriteGaugeUint64(w, "petstore_connections_max", uint64(c.total))
		vm.WriteGaugeUint64(w, "petstore_admin_connections_max", uint64(c.admin))
		vm.WriteMetadataIfNeeded(w, "petstore_connections_refused_total", "counter")
		for i, name := range listenerNames {
			for j, reason := range refusedReasons {
				if !refusalApplies(i, j) {
					continue
				}
				fmt.Fprintf(w, "petstore_connections_refused_total{listener=%q,reason=%q} %d\n", name, reason, c.refused[i][j].Load())
			}
		}
		vm.WriteMetadataIfNeeded(w, "petstore_connections_closed_total", "counter")
		fmt.Fprintf(w, "petstore_connections_closed_total{reason=\"http2_no_stream\"} %d\n", c.noStream.Load())
	})
}

// connRefused logs a connection refused at accept, on the budget of
// logBudgetPerSecond (counted as conn_refused in the line of those left
// out), as slog would write msg="connection refused" listener=...
// reason=... remote=...: at INFO for a client over its own cap (anyone can
// cause it), at WARN when the server is full.
func (l *requestLog) connRefused(listener, reason string, remote net.Addr) {
	level := slog.LevelInfo
	if reason != refusedReasons[refusedPerAddr] {
		level = slog.LevelWarn
	}
	if !l.allow("conn_refused", level) {
		return
	}
	t := l.now()
	l.out.mu.Lock()
	b := appendHead(l.out.buf, l.json, &l.stamp, t, level, "connection refused")
	if l.json {
		b = appendJSONString(append(b, `,"listener":`...), listener)
		b = appendJSONString(append(b, `,"reason":`...), reason)
		b = appendJSONString(append(b, `,"remote":`...), remote.String())
		b = append(b, "}\n"...)
	} else {
		b = appendTextString(append(b, " listener="...), listener)
		b = appendTextString(append(b, " reason="...), reason)
		b = appendTextString(append(b, " remote="...), remote.String())
		b = append(b, '\n')
	}
	l.out.buf = b
	behind := l.out.filled()
	l.out.mu.Unlock()
	if behind {
		l.out.Flush()
	}
}
