// listeners.go owns serve's listening sockets: the API's (--addr), the
// plain listener's (--http-addr) and the admin listener's (--admin-addr),
// bound here unless systemd passed them (listeners_systemd.go); and how
// serve stops accepting on them at shutdown (newConns).

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// serveListeners are the sockets serve accepts on; http and admin are nil
// when off.
type serveListeners struct {
	api, http, admin net.Listener
	fromSystemd      []string // the roles (api, http, admin) of those systemd passed
}

// close closes every listener that is open.
func (l serveListeners) close() {
	for _, ln := range []net.Listener{l.api, l.http, l.admin} {
		if ln != nil {
			ln.Close()
		}
	}
}

// openListeners binds the addresses cfg names for the listeners that
// systemd did not pass (in passed): its addresses are ignored for those.
func openListeners(cfg serveConfig, passed serveListeners) (serveListeners, error) {
	l := passed
	for _, b := range []struct {
		ln   *net.Listener
		addr string
		flag string
	}{{&l.api, cfg.addr, ""}, {&l.http, cfg.httpAddr, " (--http-addr)"}, {&l.admin, cfg.adminAddr, " (--admin-addr)"}} {
		if b.addr == "" || *b.ln != nil {
			continue
		}
		ln, err := net.Listen("tcp", b.addr)
		if err != nil {
			l.close()
			return serveListeners{}, fmt.Errorf("listen on %s%s: %w", b.addr, b.flag, unwrapOpError(err))
		}
		*b.ln = ln
	}
	return l, nil
}

// closeOnce is a listener that serve closes itself at shutdown, before
// http.Server's Shutdown closes it again: the second Close returns the
// first's result, not an error that Shutdown would report as its own.
type closeOnce struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *closeOnce) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// newConnGrace is how long after its accept net/http's Shutdown waits for
// a connection's first request (Server.closeIdleConns) before it closes
// the connection as idle.
const newConnGrace = 5 * time.Second

// newConns tracks the connections whose first request has not been read
// yet (http.StateNew), for http.Server.ConnState. http.Server's Shutdown
// reads such a request when it comes and closes the connection without an
// answer. On a fresh connection no client sends the request again, and in
// a restart these are the clients that connected just before SIGTERM (one
// without keep-alive, or in its TLS handshake). So serve stops accepting,
// waits for them (their first request is served as any other), and only
// then calls Shutdown.
type newConns struct {
	mu       sync.Mutex
	accepted map[net.Conn]time.Time
}

func (n *newConns) track(c net.Conn, state http.ConnState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.accepted == nil {
		n.accepted = make(map[net.Conn]time.Time)
	}
	if state == http.StateNew {
		n.accepted[c] = time.Now()
		return
	}
	delete(n.accepted, c) // active (HTTP/2 says so too), idle, hijacked or closed
}

// wait returns once no connection waits for its first request but those
// that Shutdown would close as idle anyway (accepted newConnGrace ago or
// more; --read-header-timeout closes a silent one sooner), or when ctx
// ends.
func (n *newConns) wait(ctx context.Context) {
	for {
		n.mu.Lock()
		waiting := false
		for _, at := range n.accepted {
			waiting = waiting || time.Since(at) < newConnGrace
		}
		n.mu.Unlock()
		if !waiting {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}
