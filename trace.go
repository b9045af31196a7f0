// trace.go owns a request's trace (DECISIONS.md section 24): W3C Trace
// Context in (traceparent, tracestate), the spans petstore makes (the
// request's server span, and the children the store, the limiter and the
// ACME client start under it), the sampler, and the trace ids on the log
// lines of a request. The spans go out through trace_export.go, encoded by
// trace_otlp.go; what turns tracing on is trace_config.go's.

package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type (
	traceID [16]byte
	spanID  [8]byte
)

// Span kinds and status codes, as OTLP numbers them.
const (
	spanInternal = 1
	spanServer   = 2
	spanClient   = 3

	statusError = 2
)

// span is one span. A span with no tracer records nothing: it holds the
// ids alone, for the log (an incoming trace with tracing off, or a request
// the sampler left out). A span belongs to the goroutine that started it
// until finish hands it to the exporter.
type span struct {
	tr      *tracer // nil: not recorded
	trace   traceID
	id      spanID
	parent  spanID // zero: a root
	remote  bool   // the parent came in a traceparent
	sampled bool
	state   string // tracestate, as sent
	name    string
	kind    uint8
	status  uint8
	start   int64 // Unix nanoseconds
	end     int64
	attrs   []attr
	inline  [8]attr // room for a server span's attributes: one allocation a span
}

// attr is one attribute: a string, an int, a bool (i is 0 or 1) or a
// double (i holds its bits), as kind says.
type attr struct {
	_    [0]func() // not comparable: no equality function in the binary
	key  string
	s    string
	i    int64
	kind uint8
}

const (
	attrString = iota
	attrInt
	attrBool
	attrDouble
)

func (sp *span) recording() bool { return sp != nil && sp.tr != nil }

func (sp *span) add(a attr) {
	if sp.recording() {
		if sp.attrs == nil {
			sp.attrs = sp.inline[:0]
		}
		sp.attrs = append(sp.attrs, a)
	}
}

func (sp *span) setString(k, v string) { sp.add(attr{key: k, kind: attrString, s: v}) }
func (sp *span) setInt(k string, v int64) {
	sp.add(attr{key: k, kind: attrInt, i: v})
}
func (sp *span) setBool(k string, v bool) {
	b := int64(0)
	if v {
		b = 1
	}
	sp.add(attr{key: k, kind: attrBool, i: b})
}
func (sp *span) setDouble(k string, v float64) {
	sp.add(attr{key: k, kind: attrDouble, i: int64(math.Float64bits(v))})
}

// replace sets string attribute k to v, in place when it is there.
func (sp *span) replace(k, v string) {
	if !sp.recording() {
		return
	}
	for i := range sp.attrs {
		if sp.attrs[i].key == k {
			sp.attrs[i].s = v
			return
		}
	}
	sp.setString(k, v)
}

// fail marks the span as failed (OTLP's status ERROR), without a message:
// an error's text may quote what a client sent.
func (sp *span) fail() {
	if sp.recording() {
		sp.status = statusError
	}
}

// finish ends the span now and hands it to the exporter; a span that
// records nothing is let go.
func (sp *span) finish() {
	if !sp.recording() {
		return
	}
	sp.end = time.Now().UnixNano()
	sp.tr.exp.enqueue(sp)
}

// tracer makes the spans when tracing is on; a nil *tracer is tracing off.
type tracer struct {
	sampler sampler
	exp     *exporter
}

// sampler decides which new traces are recorded: OTEL_TRACES_SAMPLER's
// always_on, always_off and traceidratio, each parentbased_ or not.
type sampler struct {
	parentBased bool
	bound       uint64 // a root is sampled when its trace id's low 63 bits are below it; 1<<63: always
}

// sample reports whether a span of trace id, whose parent (if remote) came
// sampled or not, is recorded.
func (s sampler) sample(id traceID, hasParent, parentSampled bool) bool {
	if s.parentBased && hasParent {
		return parentSampled
	}
	if s.bound >= 1<<63 {
		return true
	}
	// As OpenTelemetry's TraceIdRatioBased: the trace id's last 8 bytes,
	// so that every service of a trace decides alike.
	return binary.BigEndian.Uint64(id[8:])>>1 < s.bound
}

// newTraceID and newSpanID return random ids, never zero.
func newTraceID() (t traceID) {
	for t == (traceID{}) {
		binary.BigEndian.PutUint64(t[:8], rand.Uint64())
		binary.BigEndian.PutUint64(t[8:], rand.Uint64())
	}
	return t
}

func newSpanID() (s spanID) {
	for s == (spanID{}) {
		binary.BigEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}

// traceParent is what a request's traceparent header says.
type traceParent struct {
	trace   traceID
	parent  spanID
	sampled bool
}

// parseTraceParent reads a traceparent header (W3C Trace Context level 1):
// version-traceid-parentid-flags in lower-case hex. A version above 00 may
// carry more after a "-"; ff, zero ids and anything else are refused.
func parseTraceParent(v string) (tp traceParent, ok bool) {
	if len(v) < 55 || (len(v) > 55 && (v[:2] == "00" || v[55] != '-')) ||
		v[2] != '-' || v[35] != '-' || v[52] != '-' || v[:2] == "ff" {
		return tp, false
	}
	var ver, flags [1]byte
	if !lowerHex(v[:55]) || decodeHex(ver[:], v[:2]) != nil || decodeHex(tp.trace[:], v[3:35]) != nil ||
		decodeHex(tp.parent[:], v[36:52]) != nil || decodeHex(flags[:], v[53:55]) != nil {
		return tp, false
	}
	if tp.trace == (traceID{}) || tp.parent == (spanID{}) {
		return tp, false
	}
	tp.sampled = flags[0]&1 == 1
	return tp, true
}

func decodeHex(dst []byte, s string) error {
	_, err := hex.Decode(dst, []byte(s))
	return err
}

// lowerHex reports whether s is lower-case hex digits and "-" only.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}

// maxTraceState bounds the tracestate kept: W3C's 32 members of at most
// 256 characters would be 8 KB; 512 is what its section 3.3.1.5 lets a
// vendor keep at least.
const maxTraceState = 512

// traceState returns a request's tracestate headers joined, as sent, or
// "" when they are too long or hold what no tracestate may (a control
// character, a non-ASCII byte).
func traceState(h http.Header) string {
	vals := h["Tracestate"]
	if len(vals) == 0 {
		return ""
	}
	v := strings.Join(vals, ",")
	if len(v) > maxTraceState {
		return ""
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return ""
		}
	}
	return v
}

// incoming returns the ids of r's traceparent, as a span that records
// nothing, or nil: what the log carries when tracing is off.
func incoming(r *http.Request) *span {
	vals := r.Header["Traceparent"]
	if len(vals) != 1 {
		return nil
	}
	tp, ok := parseTraceParent(vals[0])
	if !ok {
		return nil
	}
	return &span{trace: tp.trace, id: tp.parent, sampled: tp.sampled}
}

// startServer starts r's server span: a child of r's traceparent when it
// has a valid one, else the root of a new trace. The span records only
// when the sampler says so; its ids are the log's either way.
func (tr *tracer) startServer(r *http.Request) *span {
	sp := &span{kind: spanServer, start: time.Now().UnixNano(), id: newSpanID()}
	hasParent, parentSampled := false, false
	if vals := r.Header["Traceparent"]; len(vals) == 1 {
		if tp, ok := parseTraceParent(vals[0]); ok {
			sp.trace, sp.parent, sp.remote = tp.trace, tp.parent, true
			sp.state = traceState(r.Header)
			hasParent, parentSampled = true, tp.sampled
		}
	}
	if !hasParent {
		sp.trace = newTraceID()
	}
	sp.sampled = tr.sampler.sample(sp.trace, hasParent, parentSampled)
	if sp.sampled {
		sp.tr = tr
	}
	return sp
}

// traceRequests gives each request its trace, in its state, for the log
// and the spans under it: with tracing on, a server span that ends with
// the request's route, status and key id; with it off (tr nil), only the
// ids of an incoming traceparent, for the log. It runs after logRequests,
// which makes the state.
func traceRequests(tr *tracer) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			st := stateOf(r)
			if st == nil {
				next.ServeHTTP(w, r)
				return
			}
			if tr == nil {
				if _, ok := r.Header["Traceparent"]; ok {
					st.trace = incoming(r)
				}
				next.ServeHTTP(w, r)
				return
			}
			sp := tr.startServer(r)
			st.trace = sp
			defer endServer(sp, r, st) // deferred: a panic's abort ends it too
			next.ServeHTTP(w, r)
		})
	}
}

// endServer ends r's server span with OpenTelemetry's HTTP server
// attributes. Nothing of the request's headers goes in but the host it
// asked for: no body, no query, no key (its id only).
func endServer(sp *span, r *http.Request, st *reqState) {
	if !sp.recording() {
		return
	}
	method := r.Method
	switch method {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE":
	default:
		method = "_OTHER" // the semantic conventions' word for the rest: a method is the client's text
	}
	sp.name = method
	sp.setString("http.request.method", method)
	if st.pattern != "" {
		sp.name = st.pattern
		_, route, _ := strings.Cut(st.pattern, " ")
		sp.setString("http.route", route)
	}
	status := st.rec.status
	if clientGone(r, status) {
		status = statusClientClosed // as the log and the metrics say: not a server error
	}
	if status != 0 {
		sp.setInt("http.response.status_code", int64(status))
	}
	if status >= 500 {
		sp.fail()
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	sp.setString("url.scheme", scheme)
	host, port := r.Host, ""
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		host, port = h, p
	}
	if host != "" && len(host) <= 255 {
		sp.setString("server.address", clipField(host))
	}
	if port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err == nil {
			sp.setInt("server.port", int64(n))
		}
	}
	if st.key != nil {
		sp.setInt("petstore.api_key.id", st.key.ID)
	}
	sp.finish()
}

type spanKey struct{}

// spanFrom returns the span that ctx is in: a child's, else its request's
// server span, or nil.
func spanFrom(ctx context.Context) *span {
	if sp, ok := ctx.Value(spanKey{}).(*span); ok {
		return sp
	}
	if st, ok := ctx.Value(reqStateKey{}).(*reqState); ok {
		return st.trace
	}
	return nil
}

// startChild starts a span named name under the span ctx is in, and
// returns ctx with it; when that one records nothing (tracing off, not
// sampled, no request), ctx as it is and nil, which every method of span
// takes.
func startChild(ctx context.Context, name string, kind uint8) (context.Context, *span) {
	parent := spanFrom(ctx)
	if !parent.recording() {
		return ctx, nil
	}
	sp := parent.child(name, kind)
	return context.WithValue(ctx, spanKey{}, sp), sp
}

// child returns a new span of sp's trace under it.
func (sp *span) child(name string, kind uint8) *span {
	return &span{tr: sp.tr, trace: sp.trace, parent: sp.id, id: newSpanID(), sampled: true, state: sp.state,
		name: name, kind: kind, start: time.Now().UnixNano()}
}

// appendTraceIDs appends the trace_id and span_id attributes of a log
// line, as slog's handler of the format writes them (hex needs no quoting).
func appendTraceIDs(b []byte, json bool, sp *span) []byte {
	if json {
		b = hex.AppendEncode(append(b, `,"trace_id":"`...), sp.trace[:])
		return append(hex.AppendEncode(append(b, `","span_id":"`...), sp.id[:]), '"')
	}
	b = hex.AppendEncode(append(b, " trace_id="...), sp.trace[:])
	return hex.AppendEncode(append(b, " span_id="...), sp.id[:])
}

// traceLogHandler adds the trace_id and span_id of the request a record
// is logged in (its context's) to the records of slog's handler h.
type traceLogHandler struct{ slog.Handler }

func (h traceLogHandler) Handle(ctx context.Context, rec slog.Record) error {
	if sp := spanFrom(ctx); sp != nil {
		rec.Add("trace_id", hex.EncodeToString(sp.trace[:]), "span_id", hex.EncodeToString(sp.id[:]))
	}
	return h.Handler.Handle(ctx, rec)
}

func (h traceLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceLogHandler{h.Handler.WithAttrs(as)}
}

func (h traceLogHandler) WithGroup(name string) slog.Handler {
	return traceLogHandler{h.Handler.WithGroup(name)}
}
