package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // TestRequestLogTimeCache needs a zone with a summer time
)

// The request line is written by hand for speed; it must be exactly what
// slog's handlers write for the same attributes, in both formats.
func TestRequestLogMatchesSlog(t *testing.T) {
	strs := []string{
		"", "GET", "POST /v1/categories", "a=b", `say "hi"`, `back\slash`, "tab\there", "new\nline",
		"\x00\x1f\x7f", "a\x7fb", "école", "日本", "\u2028\u2029", "\xff\xfe", "a\u00a0b", "\u200b", "<&>", "127.0.0.1:8080", "[::1]:443",
	}
	for b := range 256 { // every byte, alone in a string
		strs = append(strs, "a"+string([]byte{byte(b)})+"b")
	}
	for _, r := range []rune{0x85, 0xa0, 0xad, 0x200b, 0x200e, 0x2028, 0x3000, 0xfeff, 0xfffd, 0x10ffff, 0x1f436} {
		strs = append(strs, "a"+string(r)+"b")
	}
	zones := []*time.Location{time.UTC, time.FixedZone("X", -(3*3600 + 30*60))}
	for _, format := range []string{"text", "json"} {
		for i, s := range strs {
			line := requestLine{
				method: s, route: strs[(i+1)%len(strs)], status: []int{200, 201, 404, 500, 503}[i%5],
				duration: time.Duration(i*i*i*977 + i), bytes: int64(i * 1000), key: int64(i),
				requestID: strs[(i+2)%len(strs)], remote: strs[(i+3)%len(strs)],
			}
			if i%2 == 1 {
				line.err = errors.New(strs[(i+4)%len(strs)])
			}
			if i%3 == 0 {
				line.trace = &span{trace: newTraceID(), id: newSpanID()}
			}
			at := time.Date(2026, 11, 22, 1, 2, 3, i*123456789%1e9, zones[i%2])
			want := slogLine(t, format, at, &line)
			out := &logWriter{}
			newRequestLog(format, slog.LevelInfo, out).write(at, &line)
			if got := string(out.buf); got != want {
				t.Errorf("%s, case %d:\n got %s\nwant %s", format, i, got, want)
			}
		}
	}
}

func slogLine(t *testing.T, format string, at time.Time, e *requestLine) string {
	t.Helper()
	var buf bytes.Buffer
	level := slog.LevelInfo
	if e.status >= 500 {
		level = slog.LevelError
	}
	rec := slog.NewRecord(at, level, "request", 0)
	rec.AddAttrs(
		slog.String("method", e.method),
		slog.String("route", e.route),
		slog.Int("status", e.status),
		slog.Duration("duration", e.duration),
		slog.Int64("bytes", e.bytes),
		slog.Int64("key", e.key),
		slog.String("request_id", e.requestID),
	)
	if e.trace != nil {
		rec.AddAttrs(slog.String("trace_id", hex.EncodeToString(e.trace.trace[:])), slog.String("span_id", hex.EncodeToString(e.trace.id[:])))
	}
	rec.AddAttrs(slog.String("remote", e.remote))
	if e.err != nil {
		rec.AddAttrs(slog.String("err", e.err.Error()))
	}
	if err := newLogger(format, slog.LevelInfo, &buf).Handler().Handle(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// A 5xx is logged at ERROR, everything else at INFO, and the level set
// with --log-level holds back what is below it.
func TestRequestLogLevels(t *testing.T) {
	for _, tt := range []struct {
		min    slog.Level
		status int
		logged bool
	}{
		{slog.LevelInfo, 200, true},
		{slog.LevelInfo, 500, true},
		{slog.LevelWarn, 404, false},
		{slog.LevelWarn, 503, true},
		{slog.LevelError + 1, 503, false},
	} {
		out := &logWriter{}
		newRequestLog("text", tt.min, out).write(time.Now(), &requestLine{status: tt.status})
		if logged := len(out.buf) > 0; logged != tt.logged {
			t.Errorf("level %v, status %d: logged %v, want %v", tt.min, tt.status, logged, tt.logged)
		}
	}
}

// gateWriter holds every Write until gate is closed.
type gateWriter struct {
	gate chan struct{}
	mu   sync.Mutex
	b    bytes.Buffer
}

func (g *gateWriter) Write(p []byte) (int, error) {
	<-g.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.b.Write(p)
}

// A request never waits for the log output: with stderr stuck, 2,000 lines
// (well past the 64 KiB that wakes the flusher) are logged at once, and
// every one comes out, in order, when the output moves again.
func TestRequestLogDoesNotWaitForOutput(t *testing.T) {
	out := &gateWriter{gate: make(chan struct{})}
	logs := newLogWriter(out)
	ctx, cancel := context.WithCancel(context.Background())
	flushed := make(chan struct{})
	go func() { logs.flushEvery(ctx, time.Hour); close(flushed) }()
	rl := newRequestLog("text", slog.LevelInfo, logs)

	const n = 2000
	done := make(chan struct{})
	go func() {
		for i := range n {
			rl.write(time.Now(), &requestLine{method: "GET", route: "GET /v1/categories", status: 200, key: int64(i), requestID: strings.Repeat("r", 100)})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("logging waited for the stuck output")
	}
	close(out.gate)
	cancel()
	<-flushed
	lines := strings.Split(strings.TrimSuffix(out.b.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines came out, want %d", len(lines), n)
	}
	for i, line := range lines {
		if !strings.Contains(line, " key="+strconv.Itoa(i)+" ") {
			t.Fatalf("line %d is out of order: %s", i, line)
		}
	}
}

// failingWriter fails its writes while broken, as a file on a full disk
// does (ENOSPC, perhaps after a partial write): it takes 1/part of each, or
// nothing with part 0. Then it takes everything.
type failingWriter struct {
	mu     sync.Mutex
	broken bool
	part   int
	b      bytes.Buffer
}

func (f *failingWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken {
		n := 0
		if f.part > 0 {
			n = len(p) / f.part
		}
		f.b.Write(p[:n])
		return n, errors.New("no space left on device")
	}
	return f.b.Write(p)
}

func (f *failingWriter) set(broken bool) {
	f.mu.Lock()
	f.broken = broken
	f.mu.Unlock()
}

// checkLines checks that out holds request lines in ascending order of
// key, no two run together, and returns how many are whole. Cut lines (the
// head of a line whose rest was dropped) are allowed only with cut.
func checkLines(t *testing.T, out string, cut bool) int {
	t.Helper()
	whole, last := 0, int64(-1)
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if strings.Count(l, "time=") != 1 || !strings.HasPrefix(l, "time=") {
			t.Fatalf("lines run together: %q", l)
		}
		if !strings.HasSuffix(l, "remote=x") {
			if !cut {
				t.Fatalf("a cut line: %q", l)
			}
			continue
		}
		var key int64
		fmt.Sscanf(l[strings.Index(l, " key="):], " key=%d", &key)
		if key <= last {
			t.Fatalf("key %d after %d", key, last)
		}
		last = key
		whole++
	}
	return whole
}

// TestLogWriterKeepsWhatAFailedWriteLeft checks that a write that fails
// halfway loses nothing once the output recovers, and splices no two lines.
func TestLogWriterKeepsWhatAFailedWriteLeft(t *testing.T) {
	out := &failingWriter{broken: true, part: 2}
	logs := newLogWriter(out)
	rl := newRequestLog("text", slog.LevelInfo, logs)
	line := func(i int) *requestLine {
		return &requestLine{method: "GET", route: "r", status: 200, key: int64(i), requestID: "id", remote: "x"}
	}
	for i := range 100 {
		rl.write(time.Now(), line(i))
	}
	logs.Flush() // fails halfway
	logs.Flush() // and again, on what the first one left
	out.set(false)
	for i := 100; i < 110; i++ {
		rl.write(time.Now(), line(i))
	}
	logs.Flush()
	if n := checkLines(t, out.b.String(), false); n != 110 || logs.lost.Load() != 0 {
		t.Errorf("%d of 110 lines came out, %d bytes lost", n, logs.lost.Load())
	}
}

// TestLogWriterDropsPastItsBound checks that an output that keeps failing
// costs bounded memory: past logBufferMax the oldest unwritten bytes are
// dropped and counted, and no two lines run together: a line the output
// took only the head of is ended there.
func TestLogWriterDropsPastItsBound(t *testing.T) {
	out := &failingWriter{broken: true, part: 1000}
	logs := newLogWriter(out)
	rl := newRequestLog("text", slog.LevelInfo, logs)
	pad := strings.Repeat("p", 1000)
	n := 3 * logBufferMax / len(pad)
	for i := range n {
		rl.write(time.Now(), &requestLine{method: "GET", route: "r", status: 200, key: int64(i), requestID: pad, remote: "x"})
		logs.mu.Lock()
		size := len(logs.buf)
		logs.mu.Unlock()
		if size > logBufferMax+2*len(pad) {
			t.Fatalf("after %d lines the log buffer holds %d bytes, past its bound of %d", i+1, size, logBufferMax)
		}
	}
	if logs.lost.Load() == 0 {
		t.Fatal("nothing counted as lost after 12 MiB to an output that always fails")
	}
	out.set(false)
	logs.Flush()
	if lines := checkLines(t, out.b.String(), true); lines >= n {
		t.Errorf("%d lines came out of %d, with %d bytes lost", lines, n, logs.lost.Load())
	}
}

type panickyError struct{}

func (panickyError) Error() string { panic("Error panics") }

// TestRequestLogSurvivesPanickingError checks that an error whose Error
// method panics (net/http recovers a handler's panic) does not leave the
// log locked for every later line.
func TestRequestLogSurvivesPanickingError(t *testing.T) {
	var out syncBuffer
	logs := newLogWriter(&out)
	rl := newRequestLog("text", slog.LevelInfo, logs)
	func() {
		defer func() { recover() }()
		rl.write(time.Now(), &requestLine{status: 500, err: panickyError{}})
	}()
	done := make(chan struct{})
	go func() {
		rl.write(time.Now(), &requestLine{status: 200, remote: "x"})
		logs.Flush()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the next log line waited 5s: the log was left locked")
	}
	if !strings.Contains(out.String(), "status=200") {
		t.Errorf("the next line is missing: %q", out.String())
	}
}

// TestRequestLogTimeCache writes many lines through one requestLog, so
// that its cached second and zone carry from line to line: nanoseconds with
// and without trailing zeros, zero, a new second, and the same instant in
// another zone must each come out as slog writes them.
func TestRequestLogTimeCache(t *testing.T) {
	east := time.FixedZone("E", 5*3600+45*60)
	base := time.Date(2026, 3, 29, 0, 59, 59, 0, time.UTC)
	var times []time.Time
	for _, ns := range []int{0, 1, 10, 100_000, 120_000_000, 999_999_999, 500_000_000, 0} {
		times = append(times, base.Add(time.Duration(ns)))
	}
	times = append(times, base.Add(time.Second), base.Add(time.Second).In(east), base.Add(time.Second+7).In(east),
		base.Add(time.Second+7), base.Add(2*time.Second-1), base.Add(-time.Second))
	// Berlin leaves CET for CEST at 01:00:00 UTC on 2026-03-29 (base + 1 s):
	// the same location, its offset changing between two lines.
	if berlin, err := time.LoadLocation("Europe/Berlin"); err == nil {
		times = append(times, base.Add(500*time.Millisecond).In(berlin), base.Add(time.Second).In(berlin),
			base.Add(1500*time.Millisecond).In(berlin))
	} else {
		t.Fatalf("time zone data: %v", err)
	}
	for _, format := range []string{"text", "json"} {
		out := &logWriter{}
		l := newRequestLog(format, slog.LevelInfo, out)
		for i, at := range times {
			line := requestLine{method: "GET", route: "GET /v1/categories", status: 200, requestID: "id", remote: "127.0.0.1:1"}
			want := slogLine(t, format, at, &line)
			out.buf = out.buf[:0]
			l.write(at, &line)
			if got := string(out.buf); got != want {
				t.Errorf("%s, time %d (%v):\n got %s\nwant %s", format, i, at, got, want)
			}
		}
	}
}

// TestLogBudget: of the lines that spend the budget in one second,
// whatever their status, the first logBudgetPerSecond are written and the
// rest counted, by status, in one line once the second is over, written by
// the next line of a later second or by the flusher (endSecond); a valid
// key's lines of its operations' answers are never held back and spend
// nothing; allow spends the same budget for lines written elsewhere.
func TestLogBudget(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		out := &logWriter{}
		l := newRequestLog(format, slog.LevelInfo, out)
		s := time.Unix(1_800_000_000, 0).UTC()
		line := func(status int, budgeted bool) *requestLine {
			return &requestLine{method: "GET", route: "GET /v1/categories", status: status, requestID: "id", remote: "127.0.0.1:1", budgeted: budgeted}
		}
		lines := func(status int) int {
			n := 0
			for ln := range strings.Lines(string(out.buf)) {
				if strings.Contains(ln, "status=") && strings.Contains(ln, "status="+strconv.Itoa(status)) ||
					strings.Contains(ln, `"status":`+strconv.Itoa(status)+",") {
					n++
				}
			}
			return n
		}
		want := func(when string, wantCounts ...map[string]int64) {
			t.Helper()
			if got := logCounts(t, format, string(out.buf)); !reflect.DeepEqual(got, wantCounts) && len(got)+len(wantCounts) > 0 {
				t.Errorf("%s: %s: count lines %v, want %v", format, when, got, wantCounts)
			}
		}
		for i := range 250 {
			l.write(s.Add(time.Duration(i)*time.Millisecond), line([]int{404, 429}[i%2], true))
			if i >= 100 && i < 250 {
				l.write(s.Add(time.Duration(i)*time.Millisecond), line(200, false))
			}
		}
		l.write(s.Add(-time.Millisecond), line(429, true)) // late: counts in the newer second
		l.endSecond(s.Add(900*time.Millisecond), false)
		if lines(404)+lines(429) != logBudgetPerSecond || lines(404) != 50 || lines(200) != 150 {
			t.Errorf("%s: the first second wrote %d lines of 404, %d of 429, %d of 200; want 50, 50 and every one of the 150",
				format, lines(404), lines(429), lines(200))
		}
		want("within the second")
		l.write(s.Add(1200*time.Millisecond), line(405, true))
		want("a new second's line", map[string]int64{"count": 151, "status_404": 75, "status_429": 76})
		if lines(405) != 1 {
			t.Errorf("%s: the new second's line is missing", format)
		}
		for i := range 150 {
			l.write(s.Add(1300*time.Millisecond+time.Duration(i)), line(401, true))
		}
		l.endSecond(s.Add(1999*time.Millisecond), false)
		want("before the second ended", map[string]int64{"count": 151, "status_404": 75, "status_429": 76})
		l.endSecond(s.Add(2050*time.Millisecond), false)
		want("after the flusher's call", map[string]int64{"count": 151, "status_404": 75, "status_429": 76},
			map[string]int64{"count": 51, "status_401": 51})
		if lines(401) != logBudgetPerSecond-1 {
			t.Errorf("%s: %d lines of 401 in a second that had written a 405, want %d", format, lines(401), logBudgetPerSecond-1)
		}
		for i := range 101 {
			l.write(s.Add(2100*time.Millisecond+time.Duration(i)), line(204, true))
		}
		l.write(s.Add(2150*time.Millisecond), line(503, true))
		l.endSecond(s.Add(2200*time.Millisecond), true) // the last flush
		want("after the final flush", map[string]int64{"count": 151, "status_404": 75, "status_429": 76},
			map[string]int64{"count": 51, "status_401": 51}, map[string]int64{"count": 2, "status_204": 1, "status_503": 1})
		if last := string(out.buf[strings.LastIndex(strings.TrimSuffix(string(out.buf), "\n"), "\n")+1:]); !strings.Contains(last, "ERROR") {
			t.Errorf("%s: a count of a 5xx line is not at ERROR: %s", format, last)
		}

		l.now = func() time.Time { return s.Add(5 * time.Second) }
		allowed := 0
		for range logBudgetPerSecond + 2 {
			if l.allow("tls_handshake", slog.LevelInfo) {
				allowed++
			}
		}
		l.write(s.Add(5*time.Second), line(404, true))
		l.write(s.Add(5*time.Second), line(200, false))
		l.endSecond(s.Add(6*time.Second), false)
		if allowed != logBudgetPerSecond {
			t.Errorf("%s: allow let %d through, want %d", format, allowed, logBudgetPerSecond)
		}
		want("after allow", map[string]int64{"count": 151, "status_404": 75, "status_429": 76},
			map[string]int64{"count": 51, "status_401": 51}, map[string]int64{"count": 2, "status_204": 1, "status_503": 1},
			map[string]int64{"count": 3, "status_404": 1, "tls_handshake": 2})
		if lines(200) != 151 {
			t.Errorf("%s: %d lines of the valid key, want 151", format, lines(200))
		}
		for i, ln := range strings.Split(strings.TrimSuffix(string(out.buf), "\n"), "\n") {
			if format == "json" && !json.Valid([]byte(ln)) {
				t.Fatalf("json: line %d is not JSON: %s", i, ln)
			}
		}
	}
}

// logCounts returns the attributes of each count line in log ("requests
// not logged"): count, and the counts by status or kind.
func logCounts(t *testing.T, format, log string) (counts []map[string]int64) {
	t.Helper()
	for ln := range strings.Lines(log) {
		if !strings.Contains(ln, "requests not logged") {
			continue
		}
		m := map[string]int64{}
		if format == "json" {
			var v map[string]any
			if err := json.Unmarshal([]byte(ln), &v); err != nil {
				t.Fatalf("count line %q: %v", ln, err)
			}
			for name, x := range v {
				if f, ok := x.(float64); ok {
					m[name] = int64(f)
				}
			}
		} else {
			_, attrs, _ := strings.Cut(ln, `msg="requests not logged" `)
			for _, f := range strings.Fields(attrs) {
				name, v, _ := strings.Cut(f, "=")
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("count line %q: %s", ln, f)
				}
				m[name] = n
			}
		}
		counts = append(counts, m)
	}
	return counts
}

// TestFloodLogIsSampled floods a free key through the server: every 429 it
// answered is either in the log or counted under status_429, and no second
// logs more than logBudgetPerSecond lines that spend the budget.
func TestFloodLogIsSampled(t *testing.T) {
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "test")
	free := createKey(t, db, "--plan", "free", "--name", "flood")    // known from the start: no 401s
	ts := startServerOn(t, db, key, "--ban-threshold", "1000000000") // no ban: plain refusals, as fast as they come
	var mu sync.Mutex
	refused := 0
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 150 {
				r, err := ts.send("GET", "/v1/categories", free, "")
				if err == nil && r.status == http.StatusTooManyRequests {
					mu.Lock()
					refused++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	ts.stop()
	log := ts.stderr.String()
	perSecond := map[string]int{}
	logged, left := 0, int64(0)
	for ln := range strings.Lines(log) {
		if strings.Contains(ln, " status=429 ") {
			logged++
		}
		if strings.Contains(ln, " msg=request ") && !strings.Contains(ln, " status=200 ") {
			perSecond[ln[:len("time=2006-01-02T15:04:05")]]++
		}
	}
	for _, c := range logCounts(t, "text", log) {
		left += c["status_429"]
	}
	if refused < 500 || int64(logged)+left != int64(refused) {
		t.Errorf("%d refused; %d logged + %d counted = %d", refused, logged, left, int64(logged)+left)
	}
	// 540 refusals in at most a few seconds: some second had more than
	// its 100, unless the flood took longer than 5 s.
	if left == 0 && len(perSecond) < 6 {
		t.Errorf("%d refusals in %d seconds, none left out of the log", refused, len(perSecond))
	}
	for sec, n := range perSecond {
		if n > logBudgetPerSecond {
			t.Errorf("%s logged %d lines that spend the budget", sec, n)
		}
	}
}

// TestLogFloodIsBounded floods the server, without a valid key, with
// requests whose method, path, user agent and request id are kilobytes
// long (405 on /healthz, 404, preflights, 401s and the 429s they turn
// into, /healthz itself), in three seconds of an injected clock, while a
// valid key sends its own requests. Measured in the log: no second holds
// more than logBudgetPerSecond of the flood's lines and one count line; no
// line is longer than 2 KiB, so the log is at most seconds x budget x
// 2 KiB; the counts add up, status by status, to the answers not logged;
// and every line of the valid key's answers is there.
func TestLogFloodIsBounded(t *testing.T) {
	const origin = "https://app.example"
	clock := &testClock{}
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clock.set(start)
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "flood")
	ts := startServerIn(t, clock.context(), db, key, "--cors-origins", origin)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	t.Cleanup(client.CloseIdleConnections)

	huge := strings.Repeat("A", 8000)
	hugePath := "/nothere/" + strings.Repeat("x%0a%00", 1000)
	flood := []func() (*http.Request, error){
		func() (*http.Request, error) { return http.NewRequest(huge, ts.base+"/healthz", nil) }, // 405
		func() (*http.Request, error) { return http.NewRequest("GET", ts.base+hugePath, nil) },  // 404
		func() (*http.Request, error) { // preflight, 204
			r, err := http.NewRequest("OPTIONS", ts.base+"/v1/categories?"+huge, nil)
			if err == nil {
				r.Header.Set("Origin", origin)
				r.Header.Set("Access-Control-Request-Method", "POST")
			}
			return r, err
		},
		func() (*http.Request, error) { return http.NewRequest("GET", ts.base+"/v1/categories?q="+huge, nil) }, // 401, then 429
		func() (*http.Request, error) { return http.NewRequest("GET", ts.base+"/readyz", nil) },                // 200
	}
	const windows, perWindow, workers = 3, 800, 4
	sent := map[int]int{} // the flood's answers, by status
	validSent := map[int]int{}
	var mu sync.Mutex
	for w := range windows {
		clock.set(start.Add(time.Duration(w) * time.Second))
		var wg sync.WaitGroup
		for g := range workers {
			wg.Go(func() {
				for i := range perWindow / workers {
					req, err := flood[(g+i)%len(flood)]()
					if err != nil {
						t.Error(err)
						return
					}
					req.Header.Set("User-Agent", huge)
					req.Header.Set("X-Request-Id", huge)
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mu.Lock()
					sent[resp.StatusCode]++
					mu.Unlock()
				}
			})
		}
		wg.Go(func() { // the valid key, meanwhile: its 200s and a handler's 400s
			for i := range 20 {
				path := "/v1/categories"
				if i%4 == 0 {
					path += "?limit=x"
				}
				r, err := ts.send("GET", path, key, "")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				validSent[r.status]++
				mu.Unlock()
			}
		})
		wg.Wait()
	}
	clock.set(start.Add(windows * time.Second)) // the last second's count comes in the next
	ts.stop()
	log := ts.stderr.String()

	logged := map[int]int{}       // the flood's lines, by status
	left := map[int]int{}         // counted in a count line, by status
	perSecond := map[string]int{} // the flood's lines and count lines, by second
	validLogged := map[int]int{}
	total, countLines, long := 0, 0, 0
	for ln := range strings.Lines(log) {
		if len(ln) > 2048 {
			if long++; long == 1 {
				t.Errorf("a line of %d bytes: %.300s...", len(ln), ln)
			}
		}
		if !strings.Contains(ln, " msg=request ") && !strings.Contains(ln, "requests not logged") {
			continue
		}
		sec := ln[:len("time=2006-01-02T15:04:05")]
		var status int
		if _, s, ok := strings.Cut(ln, " status="); ok {
			status, _ = strconv.Atoi(s[:3])
		}
		switch {
		case strings.Contains(ln, ` msg="requests not logged" `):
			countLines++
			perSecond[sec]++
			total += len(ln)
			var sum, count int
			for _, f := range strings.Fields(ln) {
				name, v, _ := strings.Cut(f, "=")
				n, err := strconv.Atoi(v)
				switch {
				case name == "count" && err == nil:
					count = n
				case strings.HasPrefix(name, "status_") && err == nil:
					st, _ := strconv.Atoi(strings.TrimPrefix(name, "status_"))
					left[st] += n
					sum += n
				}
			}
			if count == 0 || count != sum {
				t.Errorf("count line: count=%d, its statuses add up to %d: %s", count, sum, ln)
			}
		case strings.Contains(ln, `route="GET /healthz"`):
			// startServerIn's probe, first in its second: always written
			perSecond[sec]++
		case strings.Contains(ln, " key=0 "):
			logged[status]++
			perSecond[sec]++
			total += len(ln)
		default:
			validLogged[status]++
		}
	}
	if long > 0 {
		t.Errorf("%d lines longer than 2 KiB", long)
	}
	for sec, n := range perSecond {
		if n > logBudgetPerSecond+1 {
			t.Errorf("%s: %d lines of the flood and its counts, want at most %d", sec, n, logBudgetPerSecond+1)
		}
	}
	for status, n := range sent {
		if logged[status]+left[status] != n {
			t.Errorf("status %d: %d answered, %d logged + %d counted", status, n, logged[status], left[status])
		}
	}
	for status, n := range left {
		if sent[status] == 0 {
			t.Errorf("status %d: %d counted, none answered", status, n)
		}
	}
	if countLines == 0 {
		t.Errorf("%v answered in %d seconds, and no count line", sent, windows)
	}
	if !reflect.DeepEqual(validLogged, validSent) || validSent[200] == 0 || validSent[400] == 0 {
		t.Errorf("the valid key's lines by status: %v, its answers %v", validLogged, validSent)
	}
	// The count of the last second comes with the final flush: windows + 1
	// stamps at most.
	if limit := (windows + 1) * (logBudgetPerSecond + 1) * 2048; total > limit {
		t.Errorf("the flood wrote %d bytes of log, more than %d", total, limit)
	}
}

func TestLogsNeverContainKeys(t *testing.T) {
	db := filepath.Join(t.TempDir(), "logs.db")
	key := createKey(t, db, "--plan", "pro")
	revoked := createKey(t, db, "--plan", "free")
	staging := createKey(t, db, "--plan", "free", "--env", "staging")
	if _, _, err := runCLI(t, nil, "keys", "revoke", "2", "--db", db); err != nil {
		t.Fatal(err)
	}
	ts := startServerOn(t, db, key, "--log-format", "json", "--log-level", "debug")
	invalid := "ps_live_" + strings.Repeat("Q", 40)
	for _, k := range []string{key, revoked, staging, invalid, key + "x"} {
		ts.do(t, "GET", "/v1/categories", k, "")
		ts.do(t, "POST", "/v1/categories", k, `{"name":"`+k+`"}`)
		ts.do(t, "GET", "/v1/"+k, k, "")
		ts.do(t, "GET", "/v1/categories?api_key="+k, "", "", "X-Request-Id", k)
	}
	ts.stop()
	logs := ts.stderr.String()
	for _, k := range []string{key, revoked, staging, invalid} {
		if strings.Contains(logs, k[len("ps_live_"):]) {
			t.Errorf("the log contains key %s...", k[:12])
		}
	}
	// Every request line is JSON with the fields an operator needs.
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		if rec["msg"] != "request" {
			continue
		}
		lines++
		for _, f := range []string{"method", "route", "status", "duration", "bytes", "key", "request_id", "remote"} {
			if _, ok := rec[f]; !ok {
				t.Errorf("request log line lacks %q: %s", f, line)
			}
		}
	}
	if lines < 20 {
		t.Errorf("%d request lines logged, want one per request (20)", lines)
	}
}

// TestHeadLogsNoBody: the request line of a HEAD says bytes=0, the body it
// did not send; the GET of the same resource says the bytes it sent.
func TestHeadLogsNoBody(t *testing.T) {
	ts := startServer(t)
	get := ts.do(t, "GET", "/v1/categories", ts.key, "", "X-Request-Id", "get-with-body")
	head := ts.do(t, "HEAD", "/v1/categories", ts.key, "", "X-Request-Id", "head-without-body")
	if get.status != 200 || head.status != 200 || len(get.body) == 0 || len(head.body) != 0 {
		t.Fatalf("GET %d (%d bytes), HEAD %d (%d bytes)", get.status, len(get.body), head.status, len(head.body))
	}
	lineOf := func(id string) string {
		for line := range strings.SplitSeq(ts.stderr.String(), "\n") {
			if strings.Contains(line, "request_id="+id) {
				return line
			}
		}
		return ""
	}
	waitFor(t, 5*time.Second, "the request lines", func() bool { return lineOf("get-with-body") != "" && lineOf("head-without-body") != "" })
	if want := fmt.Sprintf(" bytes=%d ", len(get.body)); !strings.Contains(lineOf("get-with-body"), want) {
		t.Errorf("the GET's line does not say%s:\n%s", want, lineOf("get-with-body"))
	}
	if !strings.Contains(lineOf("head-without-body"), " bytes=0 ") {
		t.Errorf("the HEAD's line does not say bytes=0:\n%s", lineOf("head-without-body"))
	}
}
