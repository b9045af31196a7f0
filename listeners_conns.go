// listeners_conns.go owns what serve watches of each connection the caps
// let in (listeners_caps.go): the time of its last received byte and
// whether it has made a request, so that an HTTP/2 connection opens its
// first stream within --read-header-timeout and the drain closes at once
// those that are silent and have made none (DECISIONS.md section 17).

package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// drainSilence is how long a connection that has made no request must
// have received nothing for the drain to close it at once.
const drainSilence = time.Second

// capConn is a connection the caps let in: counted until it is closed,
// with the time of the last byte read from it and whether a request came.
type capConn struct {
	net.Conn
	caps     *connCaps
	which    int
	key      netip.Addr // the client it counts for; invalid: none (exempt, or no cap)
	lastRead atomic.Int64
	served   atomic.Bool // a handler got a request from it
	closed   atomic.Bool

	mu    sync.Mutex
	timer *time.Timer // HTTP/2's first stream; nil until armed
}

// Read notes when a byte last came, while the connection has made no
// request: only such a connection is ever closed for its silence, so a
// keep-alive connection's reads cost no clock reading.
func (cc *capConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if n > 0 && !cc.served.Load() {
		cc.lastRead.Store(cc.caps.since())
	}
	return n, err
}

// CloseWrite half-closes a TCP connection, as net/http does after an
// answer that ends a plain HTTP/1.1 connection (so that the client reads
// it before the close).
func (cc *capConn) CloseWrite() error {
	if cw, ok := cc.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (cc *capConn) Close() error {
	err := cc.Conn.Close()
	if cc.closed.CompareAndSwap(false, true) {
		cc.mu.Lock()
		if cc.timer != nil {
			cc.timer.Stop()
		}
		cc.mu.Unlock()
		cc.caps.release(cc)
	}
	return err
}

// capConnOf is the capConn under c (a TLS connection's), or nil.
func capConnOf(c net.Conn) *capConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	cc, _ := c.(*capConn)
	return cc
}

// capConnKey is the context key of a request's capConn.
type capConnKey struct{}

// serve makes srv tell the caps what its connections do: which one a
// request came from (through its context), and when HTTP/2 takes one,
// whose first stream must then open within firstStream. It chains srv's
// ConnState, which must be set before.
func (c *connCaps) serve(srv *http.Server) {
	srv.ConnContext = func(ctx context.Context, nc net.Conn) context.Context {
		if cc := capConnOf(nc); cc != nil { // ServeTLS hands over the TLS connection
			return context.WithValue(ctx, capConnKey{}, cc)
		}
		return ctx
	}
	next := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cc, _ := r.Context().Value(capConnKey{}).(*capConn); cc != nil && !cc.served.Load() {
			cc.served.Store(true)
		}
		next.ServeHTTP(w, r)
	})
	state := srv.ConnState
	srv.ConnState = func(nc net.Conn, s http.ConnState) {
		if state != nil {
			state(nc, s)
		}
		if s == http.StateActive {
			c.activeConn(nc)
		}
	}
}

// activeConn arms the first-stream timer of an HTTP/2 connection: Go's
// HTTP/2 server says StateActive once it has read the client's preface
// (and again for each stream), net/http for HTTP/1.1 once a request's
// headers are in. A connection that has made a request, or whose timer is
// armed, is left alone, so the TLS state is read once a connection.
func (c *connCaps) activeConn(nc net.Conn) {
	cc := capConnOf(nc)
	if cc == nil || cc.served.Load() {
		return
	}
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.timer != nil || cc.closed.Load() || tc.ConnectionState().NegotiatedProtocol != "h2" {
		return
	}
	cc.timer = time.AfterFunc(c.firstStream, func() {
		if !cc.served.Load() {
			c.noStream.Add(1)
			cc.Close()
		}
	})
}

// closeSilent closes at once every connection that has made no request
// and has received nothing for drainSilence (since its accept, when it
// sent nothing): a stalled ClientHello, a partial request, an HTTP/2
// connection without a stream. It is the drain's first step; a connection
// still sending keeps the grace of newConns.wait. It returns how many it
// closed.
func (c *connCaps) closeSilent() int {
	before := c.since() - int64(drainSilence)
	var silent []*capConn
	c.mu.Lock()
	for cc := range c.conns {
		if !cc.served.Load() && cc.lastRead.Load() <= before {
			silent = append(silent, cc)
		}
	}
	c.mu.Unlock()
	for _, cc := range silent {
		cc.Close()
	}
	return len(silent)
}
