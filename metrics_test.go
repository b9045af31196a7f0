package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// promtoolEnv names promtool's path for TestMetricsPassPromtool.
const promtoolEnv = "PETSTORE_TEST_PROMTOOL"

// expoFamily is one metric family of an exposition as a scraper reads it.
type expoFamily struct {
	help, typ         string
	hasHelp, hasType  bool
	samples           []expoSample
	metadataAfterData bool // a HELP or TYPE line came after a sample of the family
}

// expoSample is one sample line: its name (with a histogram's or a
// summary's suffix), labels and value.
type expoSample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseExposition reads the Prometheus text format as a scraper does:
// "# HELP" and "# TYPE" lines, and samples, each assigned to its family (a
// histogram's _bucket, _sum and _count to the histogram). It fails the
// test on a line it cannot read, a family's HELP or TYPE given twice, and
// a sample of no declared family.
func parseExposition(t *testing.T, text string) map[string]*expoFamily {
	t.Helper()
	fams := map[string]*expoFamily{}
	fam := func(name string) *expoFamily {
		if fams[name] == nil {
			fams[name] = &expoFamily{}
		}
		return fams[name]
	}
	for n, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if kind, rest, ok := strings.Cut(line, " "); ok && kind == "#" {
			kind, rest, _ = strings.Cut(rest, " ")
			name, value, _ := strings.Cut(rest, " ")
			f := fam(name)
			if len(f.samples) > 0 {
				f.metadataAfterData = true
			}
			switch kind {
			case "HELP":
				if f.hasHelp {
					t.Errorf("line %d: a second HELP for %s", n+1, name)
				}
				f.help, f.hasHelp = value, true
			case "TYPE":
				if f.hasType {
					t.Errorf("line %d: a second TYPE for %s", n+1, name)
				}
				f.typ, f.hasType = value, true
			}
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			t.Fatalf("line %d %q: %v", n+1, line, err)
		}
		family := s.name
		if fams[family] == nil || !fams[family].hasType {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(s.name, suffix); ok && fams[base] != nil {
					if typ := fams[base].typ; typ == "histogram" || typ == "summary" && suffix != "_bucket" {
						family = base
					}
				}
			}
		}
		f := fams[family]
		if f == nil || !f.hasType {
			t.Errorf("line %d: sample %s of no family with a TYPE before it", n+1, s.name)
			f = fam(family)
		}
		f.samples = append(f.samples, s)
	}
	return fams
}

// parseSample reads `name{label="value",...} value`.
func parseSample(line string) (expoSample, error) {
	s := expoSample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("no metric name")
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			k, rest, ok := strings.Cut(line, `="`)
			if !ok {
				return s, fmt.Errorf("bad labels")
			}
			var v strings.Builder
			for j := 0; ; j++ {
				if j >= len(rest) {
					return s, fmt.Errorf("unterminated label value")
				}
				if c := rest[j]; c == '\\' && j+1 < len(rest) {
					j++
					if rest[j] == 'n' {
						v.WriteByte('\n')
					} else {
						v.WriteByte(rest[j]) // \\ and \"
					}
				} else if c == '"' {
					rest = rest[j+1:]
					break
				} else {
					v.WriteByte(c)
				}
			}
			s.labels[k] = v.String()
			line = strings.TrimPrefix(rest, ",")
		}
	}
	value, ok := strings.CutPrefix(line, " ")
	if !ok || strings.Contains(value, " ") { // no timestamps: the library writes none
		return s, fmt.Errorf("bad value %q", line)
	}
	v, err := strconv.ParseFloat(value, 64)
	s.value = v
	return s, err
}

// metricsTraffic starts a server whose exposition has every family of
// petstore's, the Redis limiter's included (through PETSTORE_TEST_REDIS
// when it is set; otherwise through a --redis where nothing listens, so
// that the instance limits on its own and says so), and sends it requests
// of each kind: 200, 201, 401, 404 on a route and off any, 405, HEAD, and
// 429s on routes and off any. It returns the server and how many requests
// each route label had.
func metricsTraffic(t *testing.T) (*testServer, map[string]int) {
	t.Helper()
	args := []string{"--anon-rpm", "3"}
	if os.Getenv(redisEnv) == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		args = append(args, "--redis", "redis://"+closed+"/0", "--redis-timeout", "20ms")
	}
	ts := startServer(t, args...)
	routes := map[string]int{}
	for _, r := range []struct {
		method, path, key, body, route string
		status                         int
	}{
		{"GET", "/v1/categories", ts.key, "", "GET /v1/categories", 200},
		{"POST", "/v1/categories", ts.key, `{"name":"Dog"}`, "POST /v1/categories", 201},
		{"GET", "/v1/categories", ts.key, "", "GET /v1/categories", 200},
		{"GET", "/v1/categories", ts.key, "", "GET /v1/categories", 200},
		{"GET", "/v1/pets/987654", ts.key, "", "GET /v1/pets/{petId}", 404},
		{"HEAD", "/v1/categories", ts.key, "", "HEAD /v1/categories", 200},
		{"DELETE", "/v1/categories", ts.key, "", "unmatched", 405},
		// Without a key, three a minute from one address.
		{"GET", "/v1/nowhere", "", "", "unmatched", 404},
		{"GET", "/v1/categories", "", "", "GET /v1/categories", 401},
		{"GET", "/v1/categories", "", "", "GET /v1/categories", 401},
		// Refused before routing, each labelled with the route it would
		// have matched: none for a 404's path or a 405's method.
		{"GET", "/v1/categories", "", "", "GET /v1/categories", 429},
		{"HEAD", "/v1/categories", "", "", "HEAD /v1/categories", 429},
		{"POST", "/v1/categories", "", `{"name":"Cat"}`, "POST /v1/categories", 429},
		{"GET", "/v1/pets/1", "", "", "GET /v1/pets/{petId}", 429},
		{"DELETE", "/v1/categories", "", "", "unmatched", 429},
		{"GET", "/v1/nowhere", "", "", "unmatched", 429},
	} {
		got := ts.do(t, r.method, r.path, r.key, r.body)
		if got.status != r.status {
			t.Fatalf("%s %s: %d %s, want %d", r.method, r.path, got.status, got.body, r.status)
		}
		routes[r.route]++
	}
	return ts, routes
}

// TestMetricsExposition reads a real scrape as Prometheus does: every
// family has a HELP text and a TYPE before its samples; what ends in
// _total is a counter and every counter ends in _total; no gauge borrows a
// histogram's suffix; and the request-duration histogram has le buckets up
// to +Inf, cumulative, whose +Inf and _count are the requests made on each
// route, as petstore_http_requests_total counts them.
func TestMetricsExposition(t *testing.T) {
	ts, routes := metricsTraffic(t)
	fams := parseExposition(t, ts.get(t, ts.admin+"/metrics"))

	for _, name := range []string{
		"petstore_http_requests_total", "petstore_http_request_duration_seconds", "petstore_ratelimit_refusals_total",
		"petstore_bans_total", "petstore_db_errors_total", "petstore_group_commit_batches_total",
		"petstore_group_commit_writes_total", "petstore_category_list_reads_total", "petstore_limiter_tracked_keys",
		"petstore_limiter_tracked_addrs", "petstore_build_info", "petstore_ratelimit_backend_up",
		"petstore_redis_calls_total", "petstore_redis_failures_total", "petstore_log_bytes_dropped_total",
		"petstore_traces_dropped_total",
		"process_resident_memory_bytes", "process_open_fds", "go_goroutines", "go_cgo_calls_total",
	} {
		if f := fams[name]; f == nil || len(f.samples) == 0 {
			t.Errorf("no family %s", name)
		}
	}
	for name, was := range map[string]string{"go_cgo_calls_count": "go_cgo_calls_total", "go_gc_forced_count": "go_gc_forced_total", "go_cpu_count": "go_cpus"} {
		if fams[name] != nil {
			t.Errorf("%s is still there; it is %s now", name, was)
		}
	}
	for name, f := range fams {
		switch {
		case len(f.samples) == 0:
			t.Errorf("%s: HELP or TYPE but no sample", name)
		case !f.hasHelp || strings.TrimSpace(f.help) == "":
			t.Errorf("%s: no help text", name)
		case !slices.Contains([]string{"counter", "gauge", "histogram", "summary"}, f.typ):
			t.Errorf("%s: TYPE %q", name, f.typ)
		case f.metadataAfterData:
			t.Errorf("%s: HELP or TYPE after its samples", name)
		}
		if strings.HasPrefix(name, "petstore_") && f.help != families[name].help {
			t.Errorf("%s: help text %q, not the one families gives", name, f.help)
		}
		if strings.HasSuffix(name, "_total") != (f.typ == "counter") {
			t.Errorf("%s: TYPE %s; a counter, and only a counter, ends in _total", name, f.typ)
		}
		if f.typ == "histogram" {
			checkHistogram(t, name, f)
		}
		if f.typ == "counter" || f.typ == "gauge" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if strings.HasSuffix(name, suffix) {
					t.Errorf("%s: a %s named like a histogram's %s", name, f.typ, suffix)
				}
			}
		}
	}

	// The request-duration histogram, route by route.
	requests := map[string]float64{}
	if f := fams["petstore_http_requests_total"]; f != nil {
		for _, s := range f.samples {
			requests[s.labels["route"]] += s.value
		}
	}
	h := fams["petstore_http_request_duration_seconds"]
	if h == nil || h.typ != "histogram" {
		t.Fatalf("petstore_http_request_duration_seconds is not a histogram: %+v", h)
	}
	type series struct {
		les           []string
		counts        []float64
		sum, count    float64
		hasSum, hasCt bool
	}
	byRoute := map[string]*series{}
	for _, s := range h.samples {
		route := s.labels["route"]
		if byRoute[route] == nil {
			byRoute[route] = &series{}
		}
		r := byRoute[route]
		switch s.name {
		case "petstore_http_request_duration_seconds_bucket":
			r.les = append(r.les, s.labels["le"])
			r.counts = append(r.counts, s.value)
		case "petstore_http_request_duration_seconds_sum":
			r.sum, r.hasSum = s.value, true
		case "petstore_http_request_duration_seconds_count":
			r.count, r.hasCt = s.value, true
		default:
			t.Errorf("%s in the histogram", s.name)
		}
	}
	wantLEs := []string{}
	for _, b := range latencyBuckets {
		wantLEs = append(wantLEs, strconv.FormatFloat(b, 'g', -1, 64))
	}
	wantLEs = append(wantLEs, "+Inf")
	made := routes
	for route, n := range made {
		if byRoute[route] == nil {
			t.Errorf("route %q: %d requests, no latency histogram", route, n)
		}
	}
	for route, r := range byRoute {
		les := []string{}
		for _, le := range r.les {
			if v, err := strconv.ParseFloat(le, 64); err == nil && le != "+Inf" {
				le = strconv.FormatFloat(v, 'g', -1, 64)
			} else if le != "+Inf" {
				t.Errorf("route %q: le %q", route, le)
			}
			les = append(les, le)
		}
		if !slices.Equal(les, wantLEs) {
			t.Errorf("route %q: le buckets %v, want %v", route, r.les, wantLEs)
		}
		if !slices.IsSorted(r.counts) {
			t.Errorf("route %q: bucket counts %v are not cumulative", route, r.counts)
		}
		if !r.hasSum || !r.hasCt {
			t.Errorf("route %q: _sum %v, _count %v", route, r.hasSum, r.hasCt)
		}
		inf := math.NaN()
		if len(r.counts) > 0 {
			inf = r.counts[len(r.counts)-1]
		}
		n, ok := made[route]
		if !ok && route == "GET /healthz" {
			n = int(r.count) // startServer's polls until the server answers
		} else if !ok {
			t.Errorf("a latency histogram for %q, where no request went", route)
		}
		if inf != float64(n) || r.count != float64(n) || requests[route] != float64(n) {
			t.Errorf("route %q: +Inf bucket %v, _count %v, petstore_http_requests_total %v; %d requests were made",
				route, inf, r.count, requests[route], n)
		}
		if r.sum <= 0 || r.sum > float64(n)*10 {
			t.Errorf("route %q: _sum %v s for %d requests", route, r.sum, n)
		}
	}
}

// checkHistogram fails t unless each series of the histogram family name
// (its samples less the le label) has a +Inf bucket, a _count equal to it,
// and a _sum, except the Go runtime's, whose runtime/metrics source keeps
// no sum (families marks them).
func checkHistogram(t *testing.T, name string, f *expoFamily) {
	t.Helper()
	type series struct {
		inf, count     float64
		hasInf, hasCt  bool
		hasSum, series bool
	}
	all := map[string]*series{}
	for _, s := range f.samples {
		var id []string
		for k, v := range s.labels {
			if k != "le" {
				id = append(id, k+"="+v)
			}
		}
		slices.Sort(id)
		key := strings.Join(id, ",")
		if all[key] == nil {
			all[key] = &series{}
		}
		sr := all[key]
		switch s.name {
		case name + "_bucket":
			if s.labels["le"] == "+Inf" {
				sr.inf, sr.hasInf = s.value, true
			}
		case name + "_count":
			sr.count, sr.hasCt = s.value, true
		case name + "_sum":
			sr.hasSum = true
		}
	}
	for key, sr := range all {
		switch {
		case !sr.hasInf:
			t.Errorf("histogram %s{%s}: no +Inf bucket", name, key)
		case !sr.hasCt:
			t.Errorf("histogram %s{%s}: no _count", name, key)
		case sr.count != sr.inf:
			t.Errorf("histogram %s{%s}: _count %v, +Inf bucket %v", name, key, sr.count, sr.inf)
		}
		if !sr.hasSum && !families[name].countOnly {
			t.Errorf("histogram %s{%s}: no _sum", name, key)
		}
	}
}

// TestMetricsPassPromtool runs Prometheus's own linter, `promtool check
// metrics`, on a real scrape taken after requests of every kind (a 404, a
// 429) with the Redis limiter's families present: it must find nothing.
// It needs promtool's path in PETSTORE_TEST_PROMTOOL (Debian: the
// prometheus package, /usr/bin/promtool).
func TestMetricsPassPromtool(t *testing.T) {
	promtool := os.Getenv(promtoolEnv)
	if promtool == "" {
		t.Skip(promtoolEnv + " (the path of promtool) is not set")
	}
	ts, _ := metricsTraffic(t)
	scrape := ts.get(t, ts.admin+"/metrics")
	for _, want := range []string{`status="429"`, `status="404"`, "\npetstore_redis_calls_total ", `petstore_http_request_duration_seconds_bucket{route="GET /v1/pets/{petId}",le="+Inf"} 2`, "\ngo_gc_pauses_seconds_count "} {
		if !strings.Contains(scrape, want) {
			t.Fatalf("the scrape lacks %q:\n%s", want, scrape)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("%s check metrics: %v\n%s\nthe scrape:\n%s", promtool, err, out, scrape)
	}
}

// TestMendExposition: help texts filled in, the library's texts kept,
// types and names of families applied to the HELP, the TYPE and the
// samples, a runtime histogram's _count added, other lines untouched.
func TestMendExposition(t *testing.T) {
	in := "# HELP petstore_bans_total\n# TYPE petstore_bans_total counter\npetstore_bans_total 2\n" +
		"# HELP go_cgo_calls_count\n# TYPE go_cgo_calls_count counter\ngo_cgo_calls_count 7\n" +
		"# HELP process_io_read_bytes_total\n# TYPE process_io_read_bytes_total gauge\nprocess_io_read_bytes_total 5\n" +
		"# HELP go_new_thing_bytes\n# TYPE go_new_thing_bytes gauge\ngo_new_thing_bytes{a=\"b c\"} 1\n" +
		"# HELP x_with_text Its own text.\n# TYPE x_with_text gauge\nx_with_text 1\n" +
		"# HELP go_gc_pauses_seconds\n# TYPE go_gc_pauses_seconds histogram\ngo_gc_pauses_seconds_bucket{le=\"1e-05\"} 3\ngo_gc_pauses_seconds_bucket{le=\"+Inf\"} 5\n"
	want := "# HELP petstore_bans_total " + families["petstore_bans_total"].help + "\n# TYPE petstore_bans_total counter\npetstore_bans_total 2\n" +
		"# HELP go_cgo_calls_total " + families["go_cgo_calls_count"].help + "\n# TYPE go_cgo_calls_total counter\ngo_cgo_calls_total 7\n" +
		"# HELP process_io_read_bytes_total " + families["process_io_read_bytes_total"].help + "\n# TYPE process_io_read_bytes_total counter\nprocess_io_read_bytes_total 5\n" +
		"# HELP go_new_thing_bytes " + genericHelp("go_") + "\n# TYPE go_new_thing_bytes gauge\ngo_new_thing_bytes{a=\"b c\"} 1\n" +
		"# HELP x_with_text Its own text.\n# TYPE x_with_text gauge\nx_with_text 1\n" +
		"# HELP go_gc_pauses_seconds " + families["go_gc_pauses_seconds"].help + "\n# TYPE go_gc_pauses_seconds histogram\n" +
		"go_gc_pauses_seconds_bucket{le=\"1e-05\"} 3\ngo_gc_pauses_seconds_bucket{le=\"+Inf\"} 5\ngo_gc_pauses_seconds_count 5\n"
	if got := string(mendExposition(nil, []byte(in))); got != want {
		t.Errorf("mendExposition:\n%s\nwant\n%s", got, want)
	}
}

// BenchmarkObserve is the metrics' cost on the request path: one request
// counted with its route, status and latency.
func BenchmarkObserve(b *testing.B) {
	m := newServerMetrics(newLimiter(limiterConfig{Now: time.Now}), nil)
	b.ReportAllocs()
	for b.Loop() {
		m.observe("GET /v1/categories", 200, 1200*time.Microsecond, nil)
	}
}

// BenchmarkObserveParallel is BenchmarkObserve from every core at once,
// on one route: the contention of its histogram and counter.
func BenchmarkObserveParallel(b *testing.B) {
	m := newServerMetrics(newLimiter(limiterConfig{Now: time.Now}), nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.observe("GET /v1/categories", 200, 1200*time.Microsecond, nil)
		}
	})
}

// BenchmarkMetricsScrape is one scrape of /metrics with ten routes seen:
// the library's writing plus the help texts filled in.
func BenchmarkMetricsScrape(b *testing.B) {
	store := testStore(b, filepath.Join(b.TempDir(), "scrape.db"), true)
	b.Cleanup(func() { store.Close() })
	m := newServerMetrics(newLimiter(limiterConfig{Now: time.Now}), store)
	for i := range 10 {
		for _, status := range []int{200, 401, 404} {
			m.observe(fmt.Sprintf("GET /v1/route%d", i), status, time.Duration(i)*time.Millisecond, nil)
		}
	}
	h := handleMetrics(m)
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
	}
}

// TestRouteLabelOfRefusalsAndHeads: a 429 is counted, and logged, under
// the route its request would have matched; a HEAD under its own HEAD
// label, answered or refused; a 405, and a 429 of a path no route has,
// under "unmatched".
func TestRouteLabelOfRefusalsAndHeads(t *testing.T) {
	ts := startServer(t, "--anon-rpm", "1", "--log-format", "json")
	for _, r := range []struct {
		method, path, key string
		status            int
		route             string
	}{
		{"HEAD", "/v1/categories", ts.key, 200, "HEAD /v1/categories"},
		{"DELETE", "/v1/categories", ts.key, 405, "unmatched"},
		{"GET", "/v1/categories", "", 401, "GET /v1/categories"},
		{"GET", "/v1/categories", "", 429, "GET /v1/categories"},
		{"HEAD", "/v1/categories", "", 429, "HEAD /v1/categories"},
		{"HEAD", "/v1/pets/7", "", 429, "HEAD /v1/pets/{petId}"},
		{"DELETE", "/v1/categories", "", 429, "unmatched"},
	} {
		got := ts.do(t, r.method, r.path, r.key, "", "X-Request-Id", "label-"+strconv.Itoa(r.status)+"-"+r.method+"-"+strings.ReplaceAll(r.path, "/", "."))
		if got.status != r.status {
			t.Fatalf("%s %s: %d %s, want %d", r.method, r.path, got.status, got.body, r.status)
		}
	}
	scrape := ts.get(t, ts.admin+"/metrics")
	for _, want := range []string{
		`petstore_http_requests_total{route="HEAD /v1/categories",status="200"} 1`,
		`petstore_http_requests_total{route="unmatched",status="405"} 1`,
		`petstore_http_requests_total{route="GET /v1/categories",status="401"} 1`,
		`petstore_http_requests_total{route="GET /v1/categories",status="429"} 1`,
		`petstore_http_requests_total{route="HEAD /v1/categories",status="429"} 1`,
		`petstore_http_requests_total{route="HEAD /v1/pets/{petId}",status="429"} 1`,
		`petstore_http_requests_total{route="unmatched",status="429"} 1`,
		`petstore_http_request_duration_seconds_count{route="HEAD /v1/categories"} 2`,
	} {
		if !strings.Contains(scrape, want+"\n") {
			t.Errorf("the scrape lacks %s", want)
		}
	}

	ts.stop()
	routes := map[string]string{} // request id -> route
	for line := range strings.SplitSeq(strings.TrimSpace(ts.stderr.String()), "\n") {
		var rec struct {
			Msg       string `json:"msg"`
			Route     string `json:"route"`
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err == nil && rec.Msg == "request" {
			routes[rec.RequestID] = rec.Route
		}
	}
	for id, want := range map[string]string{
		"label-200-HEAD-.v1.categories":   "HEAD /v1/categories",
		"label-405-DELETE-.v1.categories": "",
		"label-429-GET-.v1.categories":    "GET /v1/categories",
		"label-429-HEAD-.v1.categories":   "HEAD /v1/categories",
		"label-429-HEAD-.v1.pets.7":       "HEAD /v1/pets/{petId}",
		"label-429-DELETE-.v1.categories": "",
	} {
		if got, ok := routes[id]; !ok || got != want {
			t.Errorf("the log line of %s: route %q (logged: %v), want %q", id, got, ok, want)
		}
	}
}

func TestMetricsCountRequests(t *testing.T) {
	ts := startServer(t)
	for range 3 {
		ts.do(t, "GET", "/v1/categories", ts.key, "")
	}
	ts.do(t, "GET", "/v1/categories", "", "")
	ts.do(t, "GET", "/v1/nowhere", "", "")
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"x"}`)
	metrics := ts.get(t, ts.admin+"/metrics")
	for _, want := range []string{
		`petstore_http_requests_total{route="GET /v1/categories",status="200"} 3`,
		`petstore_http_requests_total{route="GET /v1/categories",status="401"} 1`,
		`petstore_http_requests_total{route="POST /v1/categories",status="201"} 1`,
		`petstore_http_requests_total{route="unmatched",status="404"} 1`,
		`petstore_http_request_duration_seconds_count{route="GET /v1/categories"} 4`,
		`petstore_db_errors_total 0`,
		"petstore_group_commit_batches_total 1\n",
		"petstore_group_commit_writes_total 1\n",
		`petstore_build_info{version="`,
		`process_resident_memory_bytes`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if r := ts.do(t, "GET", "/metrics", "", ""); r.status != 404 {
		t.Errorf("/metrics on the public listener: %d, want 404", r.status)
	}
}
