// listeners_conns.go owns what serve watches of each connection the caps
// let in (listeners_caps.go): the time of its last received byte and
// whether it has made a request, so that an HTTP/2 connection opens its
// first stream within --read-header-timeout of its ClientHello (preface
// or not: Go's own wait for the preface is 10 s, DECISIONS.md section 21)
// and the drain closes at once those that are silent and have made none
// (DECISIONS.md section 17).

package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"slices"
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
	timer *time.Timer // HTTP/2's first stream (from the ClientHello); nil until armed
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
// request came from (through its context), and, from a TLS ClientHello
// that offers h2, that its first stream must open within firstStream. It
// chains srv.TLSConfig's GetConfigForClient, which must be set before.
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
	if srv.TLSConfig == nil {
		return
	}
	prev := srv.TLSConfig.GetConfigForClient
	srv.TLSConfig.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		// The server offers h2 first, so a client that offers it gets it
		// (acme-tls/1, a challenge's, is offered alone).
		if cc, _ := hello.Conn.(*capConn); cc != nil && slices.Contains(hello.SupportedProtos, "h2") {
			c.armFirstStream(cc)
		}
		if prev != nil {
			return prev(hello)
		}
		return nil, nil
	}
}

// armFirstStream arms the first-stream timer of a connection that will
// speak HTTP/2, at its ClientHello: Go's HTTP/2 server waits 10 s for the
// client's preface and says nothing (ConnState) before it has it, so the
// timer is armed here and covers the handshake, the preface and the
// first stream's headers. By the time it fires, net/http's handshake
// deadline (--read-header-timeout too) has passed: a connection whose
// handshake failed is closed already, and the timer with it.
func (c *connCaps) armFirstStream(cc *capConn) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.timer != nil || cc.closed.Load() || cc.served.Load() {
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
