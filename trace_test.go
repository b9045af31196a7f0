package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// testCollector is an OTLP/HTTP collector: it decodes what petstore sends
// with OpenTelemetry's own definitions (TracesData is the wire form of
// ExportTraceServiceRequest) and keeps the spans and the raw bodies. answer,
// when set, chooses each request's status (0: decode and take it).
type testCollector struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	raw      [][]byte
	res      []*tracepb.ResourceSpans
	answer   func(n int, w http.ResponseWriter) int
	problems []string
	token    string // the last request's X-Token header
}

func newTestCollector(t *testing.T, answer func(n int, w http.ResponseWriter) int) *testCollector {
	c := &testCollector{answer: answer}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.requests++
		n := c.requests
		c.token = r.Header.Get("X-Token")
		c.mu.Unlock()
		if c.answer != nil {
			if status := c.answer(n, w); status != 0 {
				w.WriteHeader(status)
				return
			}
		}
		var problem string
		defer func() {
			if problem != "" {
				c.mu.Lock()
				c.problems = append(c.problems, problem)
				c.mu.Unlock()
				w.WriteHeader(http.StatusBadRequest)
			}
		}()
		if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("Content-Encoding") != "gzip" {
			problem = fmt.Sprintf("%s %s, Content-Type %q, Content-Encoding %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Content-Encoding"))
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			problem = err.Error()
			return
		}
		body, err := io.ReadAll(zr)
		if err != nil {
			problem = err.Error()
			return
		}
		var data tracepb.TracesData
		if err := proto.Unmarshal(body, &data); err != nil {
			problem = "decode: " + err.Error()
			return
		}
		c.mu.Lock()
		c.raw = append(c.raw, body)
		c.res = append(c.res, data.ResourceSpans...)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(func() {
		c.CloseClientConnections()
		c.Close()
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.problems {
			t.Errorf("collector: %s", p)
		}
	})
	return c
}

// spans returns the spans taken so far.
func (c *testCollector) spans() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, rs := range c.res {
		for _, ss := range rs.ScopeSpans {
			out = append(out, ss.Spans...)
		}
	}
	return out
}

// waitSpan waits up to 10 s for a span that match accepts.
func (c *testCollector) waitSpan(t *testing.T, what string, match func(*tracepb.Span) bool) *tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, sp := range c.spans() {
			if match(sp) {
				return sp
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %s within 10s; got %d spans", what, len(c.spans()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startTraced starts serve as startServerIn does, with env as its
// environment (the OTEL_* variables).
func startTraced(t *testing.T, env map[string]string, args ...string) (ts *testServer, keyID int64) {
	t.Helper()
	db := testDB(t)
	kv := createKeyJSON(t, db, "--plan", "business", "--name", "test")
	all := append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--db", db}, testRedisArgs(t, db)...)
	all = append(all, args...)
	stderr, done, stop := serveInBackgroundEnv(t, context.Background(), all, env)
	ts = &testServer{db: db, key: kv.Key, stderr: stderr, stop: stop, client: &http.Client{Timeout: 10 * time.Second}}
	deadline := time.Now().Add(10 * time.Second)
	for ts.base == "" {
		if addr := logAddr(listeningRE, stderr.String()); addr != "" {
			ts.base, ts.admin = "http://"+addr, "http://"+logAddr(adminRE, stderr.String())
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start within 10s:\n%s", stderr.String())
		}
	}
	return ts, kv.ID
}

func attrsOf(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = v.IntValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = v.BoolValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = v.DoubleValue
		}
	}
	return m
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }

// A request with a traceparent gets a server span that is the child of
// the caller's, with the HTTP attributes and the key's id, whose children
// are the database's operations (and Redis's, with PETSTORE_TEST_REDIS);
// the log line carries the ids; and no span holds the key or its hash.
func TestTraceSpans(t *testing.T) {
	col := newTestCollector(t, nil)
	ts, keyID := startTraced(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": col.URL + "/", // the path is appended to it
		"OTEL_BSP_SCHEDULE_DELAY":     "20",
		"OTEL_SERVICE_NAME":           "petstore-test",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment.name=test%20a,service.name=ignored",
		"OTEL_EXPORTER_OTLP_HEADERS":  "X-Token=s3cret%20t,X-Other=1",
	})
	const trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dogs"}`,
		"Traceparent", "00-"+trace+"-"+parent+"-01", "Tracestate", "rojo=00f067aa0ba902b7", "Tracestate", "congo=t61rcWkgMzE")
	if r.status != http.StatusCreated {
		t.Fatalf("create: status = %d, want 201: %s", r.status, r.body)
	}
	server := col.waitSpan(t, "of the create", func(sp *tracepb.Span) bool {
		return hexOf(sp.TraceId) == trace && sp.Kind == tracepb.Span_SPAN_KIND_SERVER
	})
	if got := hexOf(server.ParentSpanId); got != parent {
		t.Errorf("server span's parent = %s, want %s", got, parent)
	}
	if server.Name != "POST /v1/categories" || server.TraceState != "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE" {
		t.Errorf("server span: name %q, tracestate %q", server.Name, server.TraceState)
	}
	if server.Flags != 0x301 {
		t.Errorf("server span's flags = %#x, want 0x301 (sampled, remote parent)", server.Flags)
	}
	if server.EndTimeUnixNano < server.StartTimeUnixNano || server.StartTimeUnixNano == 0 {
		t.Errorf("server span runs from %d to %d", server.StartTimeUnixNano, server.EndTimeUnixNano)
	}
	kv := attrsOf(server.Attributes)
	want := map[string]any{"http.request.method": "POST", "http.route": "/v1/categories", "http.response.status_code": int64(201),
		"url.scheme": "http", "server.address": "127.0.0.1", "petstore.api_key.id": keyID}
	for k, v := range want {
		if kv[k] != v {
			t.Errorf("server span's %s = %v, want %v", k, kv[k], v)
		}
	}
	system := "sqlite"
	if os.Getenv(postgresEnv) != "" {
		system = "postgresql"
	}
	db := col.waitSpan(t, "of the INSERT", func(sp *tracepb.Span) bool {
		return bytes.Equal(sp.ParentSpanId, server.SpanId) && sp.Name == "INSERT categories"
	})
	dkv := attrsOf(db.Attributes)
	if dkv["db.system.name"] != system || dkv["db.operation.name"] != "INSERT" || dkv["petstore.db.server"] != "primary" || db.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("database span: %v, kind %v", dkv, db.Kind)
	}
	if w, ok := dkv["petstore.db.group_commit.wait_ms"].(float64); !ok || w <= 0 {
		t.Errorf("database span's group commit wait = %v, want a positive number", dkv["petstore.db.group_commit.wait_ms"])
	}
	if os.Getenv(redisEnv) != "" {
		col.waitSpan(t, "of Redis", func(sp *tracepb.Span) bool {
			return bytes.Equal(sp.ParentSpanId, server.SpanId) && attrsOf(sp.Attributes)["db.system.name"] == "redis"
		})
	}
	// A request without a traceparent starts a trace of its own.
	ts.do(t, "GET", "/v1/categories", ts.key, "")
	list := col.waitSpan(t, "of the list", func(sp *tracepb.Span) bool { return sp.Name == "GET /v1/categories" })
	if hexOf(list.TraceId) == trace || len(list.ParentSpanId) != 0 || list.Flags != 0x101 {
		t.Errorf("a request without traceparent: trace %x, parent %x, flags %#x; want a new root", list.TraceId, list.ParentSpanId, list.Flags)
	}
	col.waitSpan(t, "of the list's SELECT", func(sp *tracepb.Span) bool { return bytes.Equal(sp.ParentSpanId, list.SpanId) })

	col.mu.Lock()
	res := attrsOf(col.res[0].Resource.Attributes)
	raw := bytes.Join(col.raw, nil)
	col.mu.Unlock()
	if res["service.name"] != "petstore-test" || res["deployment.environment.name"] != "test a" {
		t.Errorf("resource = %v", res)
	}
	col.mu.Lock()
	token := col.token
	col.mu.Unlock()
	if token != "s3cret t" || strings.Contains(ts.stderr.String(), "s3cret") {
		t.Errorf("the collector got X-Token %q, want the one of OTEL_EXPORTER_OTLP_HEADERS; it must never be logged", token)
	}
	hash := hashKey(ts.key)
	for _, secret := range [][]byte{[]byte(ts.key), []byte(ts.key[len(ts.key)-12:]), hash[:], []byte(hex.EncodeToString(hash[:]))} {
		if bytes.Contains(raw, secret) {
			t.Errorf("the spans hold the key or its hash (%q)", secret)
		}
	}
	line := waitLog(t, ts, regexp.MustCompile(`msg=request method=POST route="POST /v1/categories" .* trace_id=(\w+) span_id=(\w+)`))
	if line[1] != trace || line[2] != hexOf(server.SpanId) {
		t.Errorf("the create's log line has %q, want trace_id=%s span_id=%x", line, trace, server.SpanId)
	}
}

// waitLog waits up to 10 s for ts's log to match re (the log is written
// every 100 ms), and returns the match.
func waitLog(t *testing.T, ts *testServer, re *regexp.Regexp) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if m := re.FindStringSubmatch(ts.stderr.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line matches %s within 10s", re)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The sampler's settings are honoured, a flag winning over its variable:
// parentbased_traceidratio with a ratio of 0 records a request whose
// caller sampled it, and neither one whose caller did not nor a new trace;
// the log lines of all three carry their ids.
func TestTraceSampler(t *testing.T) {
	col := newTestCollector(t, nil)
	ts, _ := startTraced(t, map[string]string{
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.URL + "/v1/traces",
		"OTEL_BSP_SCHEDULE_DELAY":            "20",
		"OTEL_TRACES_SAMPLER":                "always_on",
		"OTEL_TRACES_SAMPLER_ARG":            "1",
	}, "--trace-sampler", "parentbased_traceidratio", "--trace-sampler-arg", "0")
	const unsampled, sampled = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"
	ts.do(t, "GET", "/v1/categories", ts.key, "", "Traceparent", "00-"+unsampled+"-b7ad6b7169203331-00")
	ts.do(t, "GET", "/v1/pets", ts.key, "")
	ts.do(t, "GET", "/v1/store/inventory", ts.key, "", "Traceparent", "00-"+sampled+"-b7ad6b7169203331-01")
	col.waitSpan(t, "of the sampled request", func(sp *tracepb.Span) bool { return hexOf(sp.TraceId) == sampled })
	for _, sp := range col.spans() {
		if hexOf(sp.TraceId) != sampled {
			t.Errorf("span %q of trace %x recorded; the sampler should have left it out", sp.Name, sp.TraceId)
		}
	}
	waitLog(t, ts, regexp.MustCompile(`route="GET /v1/categories" .* trace_id=`+unsampled+` span_id=[0-9a-f]{16} `))
	waitLog(t, ts, regexp.MustCompile(`route="GET /v1/pets" .* trace_id=[0-9a-f]{32} span_id=[0-9a-f]{16} `))
}

// With tracing off, an incoming trace is still in the log (its trace id,
// and the caller's span id), and a request without one has no ids.
func TestTraceOffLogsIncoming(t *testing.T) {
	ts, _ := startTraced(t, map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, "--log-format", "json")
	const trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ts.do(t, "GET", "/v1/categories", ts.key, "", "Traceparent", "00-"+trace+"-"+parent+"-01")
	ts.do(t, "GET", "/v1/pets", ts.key, "", "Traceparent", "00-"+trace+"-0000000000000000-01") // a zero parent: no trace
	waitLog(t, ts, regexp.MustCompile(`"route":"GET /v1/categories",.*"trace_id":"`+trace+`","span_id":"`+parent+`"`))
	pets := waitLog(t, ts, regexp.MustCompile(`"route":"GET /v1/pets".*\n`))
	if strings.Contains(pets[0], "trace_id") {
		t.Errorf("a request with an invalid traceparent has ids in its log line: %s", pets[0])
	}
	if strings.Contains(ts.stderr.String(), "otlp_endpoint") {
		t.Errorf("OTEL_SDK_DISABLED=true, yet serve says it exports")
	}
}

// A collector that answers 503, or does not answer, costs the requests
// nothing: each is answered while the exporter waits, and the spans the
// full queue cannot take are counted in petstore_traces_dropped_total. A
// 503 is retried, after its Retry-After.
func TestTraceCollectorDown(t *testing.T) {
	for _, mode := range []string{"503", "hang"} {
		t.Run(mode, func(t *testing.T) {
			release := make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			col := newTestCollector(t, func(n int, w http.ResponseWriter) int {
				if mode == "hang" {
					<-release
					return http.StatusServiceUnavailable
				}
				w.Header().Set("Retry-After", "0")
				return http.StatusServiceUnavailable
			})
			ts, _ := startTraced(t, map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT":    col.URL,
				"OTEL_BSP_SCHEDULE_DELAY":        "1",
				"OTEL_BSP_MAX_QUEUE_SIZE":        "2",
				"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1",
				"OTEL_EXPORTER_OTLP_TIMEOUT":     "60000",
			})
			t.Cleanup(free) // before the collector closes: it waits for its handlers
			for i := range 40 {
				r, err := ts.send("GET", "/v1/categories", ts.key, "")
				if err != nil || r.status != http.StatusOK {
					t.Fatalf("request %d: %v, status %d", i, err, r.status)
				}
			}
			for deadline := time.Now().Add(10 * time.Second); ; {
				dropped := regexp.MustCompile(`(?m)^petstore_traces_dropped_total (\d+)$`).FindString(ts.get(t, ts.admin+"/metrics"))
				col.mu.Lock()
				tries := col.requests
				col.mu.Unlock()
				if dropped != "" && dropped != "petstore_traces_dropped_total 0" && (mode == "hang" || tries >= 2) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("metrics: %q, the collector asked %d times; want spans dropped, and a 503 retried", dropped, tries)
				}
				time.Sleep(10 * time.Millisecond)
			}
			free()
			ts.stop() // the last spans' attempt, bounded: serve stops
		})
	}
}

// A protocol other than http/protobuf, and other mistakes, stop serve at
// its start with a usage error that names what is wrong, never a header's
// value.
func TestTraceConfigErrors(t *testing.T) {
	db := testDB(t)
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, nil, `OTEL_EXPORTER_OTLP_PROTOCOL is "grpc": petstore exports traces over http/protobuf only`},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, []string{"--otlp-endpoint", "http://127.0.0.1:4318/v1/traces"}, `http/protobuf only`},
		{nil, []string{"--otlp-endpoint", "http://127.0.0.1:4318/v1/traces", "--otlp-protocol", "grpc"}, `--otlp-protocol is "grpc"`},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, nil, "OTEL_EXPORTER_OTLP_ENDPOINT must be an http or https URL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_SAMPLER": "jaeger_remote"}, nil, "OTEL_TRACES_SAMPLER must be always_on"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, nil, "OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20s3cret,broken"}, nil, "OTEL_EXPORTER_OTLP_HEADERS must be a list of key=value"},
	} {
		_, stderr, err := runCLI(t, c.env, append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", ""}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err, io.Discard) != 2 {
			t.Errorf("%v %v: err = %v (exit %d), want a usage error with %q", c.env, c.args, err, exitCode(err, io.Discard), c.want)
		}
		if err != nil && strings.Contains(err.Error()+stderr, "s3cret") {
			t.Errorf("the error shows a header's value: %v", err)
		}
	}
}

// A client that hangs up while its create waits for the database is 499
// in its span, as in the log and the metrics (middleware.go's
// clientGone): neither the server span nor the database's is an error.
func TestTraceClientGone(t *testing.T) {
	col := newTestCollector(t, nil)
	ts, _ := startTraced(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": col.URL,
		"OTEL_BSP_SCHEDULE_DELAY":     "20",
	}, "--busy-timeout", "1s")
	release := holdWriteLock(t, ts.db)
	const trace = "5bf92f3577b34da6a3ce929d0e0e4736"
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.base+"/v1/categories", strings.NewReader(`{"name":"Gone"}`))
	req.Header.Set("Authorization", "Bearer "+ts.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("answered %d before the client left", resp.StatusCode)
	}
	server := col.waitSpan(t, "of the hang-up", func(sp *tracepb.Span) bool {
		return hexOf(sp.TraceId) == trace && sp.Kind == tracepb.Span_SPAN_KIND_SERVER
	})
	release()
	if got := attrsOf(server.Attributes)["http.response.status_code"]; got != int64(499) {
		t.Errorf("server span's status code = %v, want 499", got)
	}
	for _, sp := range col.spans() {
		if hexOf(sp.TraceId) == trace && sp.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("span %q is an error: the client left, the server did not fail", sp.Name)
		}
	}
}

// A collector that redirects to another host gets no second request: the
// OTLP headers (a vendor's key) never leave for a host that was not
// configured; the batch counts as dropped.
func TestTraceRedirectElsewhere(t *testing.T) {
	other := newTestCollector(t, nil)
	col := newTestCollector(t, func(n int, w http.ResponseWriter) int {
		w.Header().Set("Location", other.URL+"/v1/traces")
		return http.StatusTemporaryRedirect
	})
	ts, _ := startTraced(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": col.URL,
		"OTEL_BSP_SCHEDULE_DELAY":     "1",
		"OTEL_EXPORTER_OTLP_HEADERS":  "X-Token=s3cret",
	})
	ts.do(t, "GET", "/v1/categories", ts.key, "")
	for deadline := time.Now().Add(10 * time.Second); ; {
		m := regexp.MustCompile(`(?m)^petstore_traces_dropped_total (\d+)$`).FindStringSubmatch(ts.get(t, ts.admin+"/metrics"))
		if m != nil && m[1] != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span dropped within 10s after a redirect elsewhere: %v", m)
		}
		time.Sleep(10 * time.Millisecond)
	}
	other.mu.Lock()
	defer other.mu.Unlock()
	if other.requests != 0 || other.token != "" {
		t.Errorf("the host redirected to got %d requests (X-Token %q), want none", other.requests, other.token)
	}
}
