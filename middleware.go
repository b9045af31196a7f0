// middleware.go owns the layers every request passes: its id, its log
// line (which gives it its state, reqstate.go), panic recovery, and the
// router that answers unknown paths and methods with a JSON 404 or 405.

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path"
	"runtime/debug"
	"strings"
	"time"
)

// router routes requests to routes, and answers what they do not match
// (404, 405 with Allow, and the redirects of non-canonical paths) with a
// JSON Error instead of the mux's plain text. It names the route of each
// request it routes for the log and the metrics, and tells the limiter
// which route a request it refuses would have matched (routeOf).
type router struct {
	mux   *http.ServeMux    // the routes and a catch-all "/"
	known *http.ServeMux    // the routes alone
	heads map[string]string // the label of a HEAD routed to a GET pattern: "GET /x" -> "HEAD /x"
	facts map[string]*route // each route by its pattern
}

// newRouter returns the router of routes. A request is matched once: a
// catch-all "/" takes what the routes do not, and only then asks a second
// mux, of the routes alone, whether the path exists with other methods.
func newRouter(routes []route) *router {
	rt := &router{mux: http.NewServeMux(), known: http.NewServeMux(), heads: map[string]string{}, facts: map[string]*route{}}
	for i, e := range routes {
		rt.facts[e.pattern] = &routes[i]
		head := e.pattern
		if rest, ok := strings.CutPrefix(e.pattern, "GET "); ok {
			head = "HEAD " + rest
			rt.heads[e.pattern] = head
		}
		rt.known.Handle(e.pattern, e.handler)
		rt.mux.Handle(e.pattern, notePattern(e.pattern, head, e.handler))
	}
	rt.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Only the mux's own 404 and 405 handlers are probed, never a route:
		// a route's pattern would have matched before "/" did.
		h, pattern := rt.known.Handler(r)
		probe := &headerProbe{header: http.Header{}}
		if pattern == "" {
			h.ServeHTTP(probe, r)
		}
		if probe.status == http.StatusMethodNotAllowed {
			allow := probe.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeError(w, r, errorf("method_not_allowed", "method %s is not allowed here; allowed: %s", clipField(r.Method), allow))
			return
		}
		writeError(w, r, errorf("not_found", "no such path: %s", clipField(r.URL.Path)))
	})
	return rt
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isCanonicalPath(r.URL.Path) {
		writeError(w, r, errorf("not_found", "no such path: %s (paths must not contain . or .. segments or empty segments)", clipField(r.URL.Path)))
		return
	}
	rt.mux.ServeHTTP(w, r)
}

// match returns the route that r would be routed to (a HEAD's GET), or
// nil when none takes it (a 404 or a 405). It routes nothing.
func (rt *router) match(r *http.Request) *route {
	if !isCanonicalPath(r.URL.Path) {
		return nil // Handler would name the redirect's target
	}
	_, pattern := rt.known.Handler(r)
	return rt.facts[pattern]
}

// routeOf returns the route label that r would get if it were routed: its
// route's pattern, "HEAD ..." for a HEAD that a GET route takes, and ""
// when no route takes it (a 404 or a 405). It routes nothing.
func (rt *router) routeOf(r *http.Request) string {
	m := rt.match(r)
	if m == nil {
		return ""
	}
	pattern := m.pattern
	if r.Method == http.MethodHead {
		if head, ok := rt.heads[pattern]; ok {
			return head
		}
	}
	return pattern
}

// notePattern tells the log and the metrics which route matched: pattern,
// or head for a HEAD (the mux routes a HEAD to a GET pattern).
func notePattern(pattern, head string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st := stateOf(r); st != nil {
			st.pattern = pattern
			if r.Method == http.MethodHead {
				st.pattern = head
			}
		}
		next.ServeHTTP(w, r)
	})
}

// isCanonicalPath reports whether p is absolute and free of ".", ".." and
// empty segments, which the mux would answer with a redirect.
func isCanonicalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean == p
}

// headerProbe is a ResponseWriter that keeps the status and headers and
// drops the body.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(status int)      { p.status = status }

// nosniff is the value of X-Content-Type-Options, one slice shared by
// every response (no allocation); its capacity is its length, so that an
// Add would copy it, never write into it.
var nosniff = []string{"nosniff"}

// hsts is the value of Strict-Transport-Security on HTTPS answers, shared
// as nosniff is: a year, after which a browser that saw it may ask over
// plain HTTP again. No includeSubDomains: the API's host says nothing of
// its siblings.
var hsts = []string{"max-age=31536000"}

// withRequestID gives every response an X-Request-Id, the client's own
// when it is sane, else a random one; and X-Content-Type-Options:
// nosniff, so that no browser takes a body for HTML (a 404's echoes the
// path). It runs first on both listeners, so every answer has them. An
// HTTPS answer also carries Strict-Transport-Security (DECISIONS.md
// section 13); a plain one never does (RFC 6797 section 7.2).
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !saneRequestID(id) {
			id = newRequestID()
		}
		h := w.Header()
		h["X-Request-Id"] = []string{id}
		h["X-Content-Type-Options"] = nosniff
		if r.TLS != nil {
			h["Strict-Transport-Security"] = hsts
		}
		next.ServeHTTP(w, r)
	})
}

// newRequestID returns 26 characters of the base32 alphabet (A-Z, 2-7),
// like crypto/rand.Text, holding 128 random bits (the last character
// carries 3 of them) from math/rand/v2's generator (a ChaCha8 state per
// thread, randomly seeded): an id must be unique, not unpredictable, and
// this one costs a tenth.
func newRequestID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	var b [26]byte
	hi, lo := rand.Uint64(), rand.Uint64()
	for i := range b {
		b[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(b[:])
}

// saneRequestID accepts 1 to 128 characters of letters, digits and "-_.:",
// but nothing that holds a key's prefix, anywhere (a key after "trace:" is
// still a key): the id is echoed and logged.
func saneRequestID(id string) bool {
	if id == "" || len(id) > 128 || strings.Contains(id, "ps_live_") || strings.Contains(id, "ps_test_") {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:", c) >= 0) {
			return false
		}
	}
	return true
}

// logRequests logs one line per request and counts it in the metrics. It
// gives the request its state, and reads the route, the key and the cause
// of an error from there. It never logs a header or the query, so never a
// key; what it logs of the request is clipped (clipField). The lines of
// answers that requireKey did not let through to an operation spend the
// log's budget (logBudgetPerSecond).
func logRequests(log *requestLog, m *serverMetrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			st := &reqState{rec: recorder{ResponseWriter: w}}
			defer func() {
				end := time.Now()
				var keyID int64
				if st.key != nil {
					keyID = st.key.ID
				}
				sent := st.rec.bytes
				if r.Method == http.MethodHead {
					sent = 0 // net/http drops a HEAD's body, though its Write says it was written
				}
				status, err := st.rec.status, st.err
				if clientGone(r, status) {
					// Whatever failed failed because the client left: not the
					// server's error, and not a database error in the metrics.
					status, err = statusClientClosed, nil
				}
				log.write(log.now(), &requestLine{
					method:    clipField(r.Method),
					route:     st.pattern,
					status:    status,
					duration:  end.Sub(start),
					bytes:     sent,
					key:       keyID,
					requestID: clipField(w.Header().Get("X-Request-Id")),
					trace:     st.trace,
					remote:    r.RemoteAddr,
					err:       err,
					// Every line that a client can make the server write
					// without bound is on the budget: all but a valid key's
					// answers from its operations, and of those every 5xx
					// (ERROR) and 499 too (DECISIONS.md section 21).
					budgeted: !st.served || status >= 500 || status == statusClientClosed,
				})
				m.observe(st.pattern, status, end.Sub(start), err)
			}()
			next.ServeHTTP(&st.rec, withState(r, st))
		})
	}
}

// statusClientClosed is the status that the log and the metrics give a
// request whose client went away before its answer (its context
// cancelled: the connection closed, the HTTP/2 stream reset), as nginx's
// 499 "client closed request": it is not a server error, so never a 500,
// an ERROR line or a 5xx in the metrics, whatever the handler made of
// its cut-off work. Nothing is sent: there is no one to send it to.
const statusClientClosed = 499

// clientGone reports whether r's client went away before its answer was
// given: nothing written yet, or a 5xx that the failure the departure
// caused (a query cancelled) made. An answer already under way keeps its
// status.
func clientGone(r *http.Request, status int) bool {
	return (status == 0 || status >= 500) && r.Context().Err() != nil
}

// recoverPanics turns a panic in a handler into a logged 500. The panic's
// line is on the log's budget: a request that makes a handler panic can
// be sent again and again.
func recoverPanics(reqLog *requestLog, logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				p := recover()
				if p == nil {
					return
				}
				if p == http.ErrAbortHandler {
					panic(p)
				}
				if reqLog == nil || reqLog.allow("panic", slog.LevelError) {
					logger.ErrorContext(r.Context(), "panic", "panic", p, "request_id", w.Header().Get("X-Request-Id"), "stack", string(debug.Stack()))
				}
				if rec := recorderOf(w); rec != nil && rec.status != 0 {
					// The status went out, perhaps part of the body: abort the
					// connection, so that the client sees the answer cut off
					// instead of a short body that looks complete.
					noteError(r, fmt.Errorf("panic after the status was sent: %v", p))
					panic(http.ErrAbortHandler)
				}
				writeError(w, r, errors.New("panic"))
			}()
			next.ServeHTTP(w, r)
		})
	}
}
