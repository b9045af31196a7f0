// tls_log.go owns what the log and the metrics say of HTTPS: the failed
// handshakes, which net/http reports through the server's ErrorLog, logged
// on the budget of lines anyone can cause and counted; and the TLS
// families of the metrics (certificate expiry, ACME failures).

package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"slices"
	"strings"

	vm "github.com/VictoriaMetrics/metrics"
)

// handshakeErrorPrefix starts the line net/http writes to ErrorLog for
// each failed handshake: "http: TLS handshake error from ADDR: ERR".
const handshakeErrorPrefix = "http: TLS handshake error from "

// handshakeLevel is the level of a failed handshake's line: anyone can
// cause one (plain HTTP to the port, a scanner, a client that refuses the
// certificate), as a 4xx, whose lines are INFO too.
const handshakeLevel = slog.LevelInfo

// tlsErrorLog returns the ErrorLog of the HTTPS server. net/http writes
// one line to it for every failed handshake, which anyone can cause a
// thousand times a second: those are counted in the metrics and logged on
// the budget of logBudgetPerSecond. HTTP/2's lines (one a connection, on
// a client's protocol error) go on the budget too. Its other lines (an
// accept error) go to logger as every server's do (newHTTPServer).
func tlsErrorLog(reqLog *requestLog, m *serverMetrics, logger *slog.Logger) *log.Logger {
	other := slog.NewLogLogger(logger.Handler(), slog.LevelWarn).Writer()
	return log.New(&tlsErrorWriter{reqLog: reqLog, m: m, other: other}, "", 0)
}

// tlsErrorWriter is the writer of tlsErrorLog. log.Logger hands it one
// whole line a Write.
type tlsErrorWriter struct {
	reqLog *requestLog
	m      *serverMetrics
	other  io.Writer
}

func (w *tlsErrorWriter) Write(p []byte) (int, error) {
	if isHTTP2Line(p) {
		// HTTP/2 logs a client's protocol error or GOAWAY once a
		// connection, which anyone can open a thousand times a second: on
		// the budget too (as "http2"), and cut, as a GOAWAY's debug data
		// is the client's.
		if w.reqLog.allow("http2", slog.LevelWarn) {
			w.other.Write([]byte(clipField(strings.TrimSuffix(string(p), "\n"))))
		}
		return len(p), nil
	}
	rest, ok := bytes.CutPrefix(p, []byte(handshakeErrorPrefix))
	if !ok {
		return w.other.Write(p)
	}
	// The address has no ": " in it, not even an IPv6 one ("[::1]:443").
	remote, reason, _ := strings.Cut(strings.TrimSuffix(string(rest), "\n"), ": ")
	w.m.handshakeFailed()
	w.reqLog.handshakeFailed(remote, reason)
	return len(p), nil
}

// isHTTP2Line reports whether p is one of HTTP/2's lines about what a
// client did: most start "http2: ", but a client that sends the preface
// and then no SETTINGS frame (or, with pings on, answers none) gets
// "timeout waiting for SETTINGS frames from ADDR" without the prefix, and
// it too costs the client a connection and 2 s, no more.
func isHTTP2Line(p []byte) bool {
	return bytes.HasPrefix(p, []byte("http2: ")) || bytes.HasPrefix(p, []byte("timeout waiting for "))
}

// handshakeFailed logs a failed handshake from remote, on the budget of
// logBudgetPerSecond (counted as tls_handshake in the line of those left
// out), as slog would write msg="TLS handshake failed" remote=... err=...
// The reason may hold what the client sent (an ALPN protocol, a server
// name): it is escaped and cut as a request's fields are (clipField).
func (l *requestLog) handshakeFailed(remote, reason string) {
	if !l.allow("tls_handshake", handshakeLevel) {
		return
	}
	remote, reason = clipField(remote), clipField(reason)
	t := l.now()
	l.out.mu.Lock()
	b := appendHead(l.out.buf, l.json, &l.stamp, t, handshakeLevel, "TLS handshake failed")
	if l.json {
		b = appendJSONString(append(b, `,"remote":`...), remote)
		b = appendJSONString(append(b, `,"err":`...), reason)
		b = append(b, "}\n"...)
	} else {
		b = appendTextString(append(b, " remote="...), remote)
		b = appendTextString(append(b, " err="...), reason)
		b = append(b, '\n')
	}
	l.out.buf = b
	behind := l.out.filled()
	l.out.mu.Unlock()
	if behind {
		l.out.Flush()
	}
}

// servesTLS adds the metrics of HTTPS from certs: each served
// certificate's expiry, read from certs at each scrape (none while there is
// none), the failed handshakes, and with acme the ACME failures.
func (m *serverMetrics) servesTLS(certs certSource, acme bool) {
	const expiry = "petstore_tls_certificate_expiry_timestamp_seconds"
	m.set.RegisterMetricsWriter(func(w io.Writer) {
		exp := certs.expiries()
		if len(exp) == 0 {
			return
		}
		vm.WriteMetadataIfNeeded(w, expiry, "gauge") // once for the family, not per name
		for _, name := range slices.Sorted(maps.Keys(exp)) {
			fmt.Fprintf(w, "%s{name=%s} %d\n", expiry, promLabelValue(name), exp[name].Unix())
		}
	})
	m.set.RegisterMetricsWriter(func(w io.Writer) {
		vm.WriteCounterUint64(w, "petstore_tls_handshake_errors_total", m.handshakeErrors.Load())
		if acme {
			vm.WriteCounterUint64(w, "petstore_acme_failures_total", m.acmeFailures.Load())
		}
	})
}

// http2Error counts an HTTP/2 error of Go's server by its type, for
// http.HTTP2Config.CountError: a connection or stream it refused or
// reset for breaking the protocol (frame_ping_has_stream, ...). The
// types are a fixed set of net/http's, in lower case, digits and
// underscores, so the label set stays bounded.
func (m *serverMetrics) http2Error(errType string) {
	m.set.GetOrCreateCounter(`petstore_http2_errors_total{type="` + errType + `"}`).Inc()
}

// handshakeFailed counts a failed TLS handshake.
func (m *serverMetrics) handshakeFailed() { m.handshakeErrors.Add(1) }

// acmeFailed counts a failure of the ACME source: an order, a challenge or
// a renewal that failed (each attempt once). It is safe from any
// goroutine, before or after servesTLS, and on a nil m (it counts
// nothing), so that the source may hold a nil one in its own tests.
func (m *serverMetrics) acmeFailed() {
	if m != nil {
		m.acmeFailures.Add(1)
	}
}

// promLabelValue quotes s as a label value of the text format: a
// backslash, a quote and a newline escaped.
func promLabelValue(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
