package main

import (
	"bytes"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// What encodeSpans writes decodes, with OpenTelemetry's definitions, to
// the spans it was given: every field, values of every kind, and lengths
// that take one, two and three bytes (an embedded message moved when its
// length does not fit the byte kept for it).
func TestOTLPEncodeDecodes(t *testing.T) {
	head := newOTLPHead([]attr{{key: "service.name", s: "petstore"}, {key: "big", s: strings.Repeat("r", 300)}}, "petstore", "v1")
	var spans []*span
	for i, n := range []int{0, 1, 100, 127, 128, 200, 16383, 16384, 70000} {
		sp := &span{trace: newTraceID(), id: newSpanID(), name: "s" + strings.Repeat("n", n%300), kind: spanServer,
			start: int64(1e18 + i), end: int64(1e18 + 2*i + 1), sampled: i%2 == 0, remote: i%3 == 0, state: "a=b"}
		if i%2 == 1 {
			sp.parent = newSpanID()
			sp.status = statusError
		}
		sp.tr = &tracer{}
		sp.setString("str", strings.Repeat("v", n))
		sp.setInt("int", -int64(n)-1)
		sp.setBool("bool", i%2 == 0)
		sp.setDouble("double", float64(n)/3)
		sp.setString("empty", "")
		spans = append(spans, sp)
	}
	var data tracepb.TracesData
	if err := proto.Unmarshal(head.encodeSpans(nil, spans), &data); err != nil {
		t.Fatalf("decode: %v", err)
	}
	rs := data.ResourceSpans
	if len(rs) != 1 || len(rs[0].ScopeSpans) != 1 || rs[0].ScopeSpans[0].Scope.Name != "petstore" || rs[0].ScopeSpans[0].Scope.Version != "v1" {
		t.Fatalf("decoded %v", &data)
	}
	if res := attrsOf(rs[0].Resource.Attributes); res["service.name"] != "petstore" || len(res["big"].(string)) != 300 {
		t.Errorf("resource: %v", res)
	}
	got := rs[0].ScopeSpans[0].Spans
	if len(got) != len(spans) {
		t.Fatalf("%d spans decoded, want %d", len(got), len(spans))
	}
	for i, sp := range spans {
		g := got[i]
		wantParent := []byte(nil)
		if sp.parent != (spanID{}) {
			wantParent = sp.parent[:]
		}
		flags := uint32(0x100)
		if sp.sampled {
			flags |= 1
		}
		if sp.remote {
			flags |= 0x200
		}
		if !bytes.Equal(g.TraceId, sp.trace[:]) || !bytes.Equal(g.SpanId, sp.id[:]) || !bytes.Equal(g.ParentSpanId, wantParent) ||
			g.Name != sp.name || g.Kind != tracepb.Span_SPAN_KIND_SERVER || g.StartTimeUnixNano != uint64(sp.start) ||
			g.EndTimeUnixNano != uint64(sp.end) || g.TraceState != "a=b" || g.Flags != flags ||
			(sp.status != 0) != (g.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR) {
			t.Errorf("span %d decoded as %v", i, g)
		}
		kv := attrsOf(g.Attributes)
		if kv["str"] != sp.attrs[0].s || kv["int"] != sp.attrs[1].i || kv["bool"] != (sp.attrs[2].i == 1) || kv["double"] != math.Float64frombits(uint64(sp.attrs[3].i)) || kv["empty"] != "" {
			t.Errorf("span %d's attributes decoded as %v", i, kv)
		}
	}
}

// A traceparent is taken only in W3C Trace Context's form.
func TestParseTraceParent(t *testing.T) {
	const id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, c := range []struct {
		v       string
		ok      bool
		sampled bool
	}{
		{"00-" + id + "-" + parent + "-01", true, true},
		{"00-" + id + "-" + parent + "-00", true, false},
		{"00-" + id + "-" + parent + "-09", true, true},
		{"01-" + id + "-" + parent + "-01-more", true, true}, // a later version may say more
		{"01-" + id + "-" + parent + "-01", true, true},
		{"00-" + id + "-" + parent + "-01-more", false, false}, // version 00 says no more
		{"01-" + id + "-" + parent + "-01x", false, false},
		{"ff-" + id + "-" + parent + "-01", false, false},
		{"00-" + strings.ToUpper(id) + "-" + parent + "-01", false, false},
		{"00-00000000000000000000000000000000-" + parent + "-01", false, false},
		{"00-" + id + "-0000000000000000-01", false, false},
		{"00-" + id + "-" + parent + "-0", false, false},
		{"00_" + id + "-" + parent + "-01", false, false},
		{"00-" + id[:31] + "g-" + parent + "-01", false, false},
		{"", false, false},
	} {
		tp, ok := parseTraceParent(c.v)
		if ok != c.ok || ok && (tp.sampled != c.sampled || hexOf(tp.trace[:]) != id || hexOf(tp.parent[:]) != parent) {
			t.Errorf("parseTraceParent(%q) = %x %x %v, %v; want ok %v, sampled %v", c.v, tp.trace, tp.parent, tp.sampled, ok, c.ok, c.sampled)
		}
	}
	h := http.Header{"Tracestate": {"a=1", "b=2"}}
	if got := traceState(h); got != "a=1,b=2" {
		t.Errorf("tracestate %q, want a=1,b=2", got)
	}
	for _, bad := range []string{strings.Repeat("a", maxTraceState+1), "a=\x01", "a=é"} {
		if got := traceState(http.Header{"Tracestate": {bad}}); got != "" {
			t.Errorf("tracestate %q kept as %q", bad, got)
		}
	}
}

// The ratio sampler keeps about its share of new traces, and decides by
// the trace id alone.
func TestSamplerRatio(t *testing.T) {
	s := sampler{bound: uint64(0.25 * (1 << 63))}
	n := 0
	for range 20000 {
		if s.sample(newTraceID(), false, false) {
			n++
		}
	}
	if n < 4500 || n > 5500 {
		t.Errorf("a 0.25 sampler kept %d of 20000", n)
	}
	if !(sampler{parentBased: true}).sample(newTraceID(), true, true) || (sampler{parentBased: true, bound: 1 << 63}).sample(newTraceID(), true, false) {
		t.Errorf("a parent-based sampler does not follow the parent")
	}
}

// Retry-After is read as seconds or as a date.
func TestOTLPRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": 0, "x": 0, "-1": 0, "0": time.Millisecond, "3": 3 * time.Second, "99999": time.Hour,
		now.Add(7 * time.Second).Format(http.TimeFormat): 7 * time.Second,
	} {
		if got := otlpRetryAfter(v, now); got != want {
			t.Errorf("otlpRetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

// A line that slog writes during a request (a panic's) carries the
// request's trace_id and span_id; one outside a request carries none.
func TestTraceLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger("text", slog.LevelInfo, &buf)
	sp := &span{trace: newTraceID(), id: newSpanID()}
	r := withState(httptest.NewRequest("GET", "/", nil), &reqState{trace: sp})
	log.ErrorContext(r.Context(), "panic")
	log.Info("outside")
	want := "msg=panic trace_id=" + hexOf(sp.trace[:]) + " span_id=" + hexOf(sp.id[:]) + "\n"
	lines := strings.Split(buf.String(), "\n")
	if !strings.HasSuffix(lines[0]+"\n", want) || strings.Contains(lines[1], "trace_id") {
		t.Errorf("log:\n%s\nwant the first line to end %q, the second without ids", buf.String(), want)
	}
}

// A call to the ACME CA makes a client span under its attempt's root span,
// with the method, the host and the status, and nothing of the URL's path.
func TestTraceCA(t *testing.T) {
	ca := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	defer ca.Close()
	tr := &tracer{sampler: sampler{bound: 1 << 63}, exp: &exporter{queue: make(chan *span, 4)}}
	root := tr.acmeSpan("api.example.com")
	client := &http.Client{Transport: traceCA(root, http.DefaultTransport)}
	resp, err := client.Post(ca.URL+"/acme/new-order/secret-looking-id", "application/jose+json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	root.finish()
	call, got := <-tr.exp.queue, <-tr.exp.queue
	if call.parent != root.id || call.trace != root.trace || call.kind != spanClient || got != root || root.parent != (spanID{}) {
		t.Fatalf("the CA call's span is not the child of its attempt's root span")
	}
	var p pbuf
	p.span(1, call)
	if bytes.Contains(p.b, []byte("secret-looking-id")) || bytes.Contains(p.b, []byte("new-order")) {
		t.Errorf("the CA call's span holds the URL's path")
	}
	want := map[string]attr{"http.request.method": {s: "POST"}, "server.address": {s: "127.0.0.1"}, "http.response.status_code": {i: 201}}
	for _, a := range call.attrs {
		if w, ok := want[a.key]; ok && (w.s != a.s || w.i != a.i) {
			t.Errorf("%s = %q %d", a.key, a.s, a.i)
		}
		delete(want, a.key)
	}
	if len(want) > 0 {
		t.Errorf("attributes missing: %v", want)
	}
	if (&tracer{sampler: sampler{}}).acmeSpan("x") != nil || (*tracer)(nil).acmeSpan("x") != nil || traceCA(nil, http.DefaultTransport) != http.DefaultTransport {
		t.Errorf("an attempt the sampler leaves out, or with tracing off, makes a span")
	}
}
