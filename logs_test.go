package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"regexp"
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
		slog.String("remote", e.remote),
	)
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

// TestRefusedRequestsSampled: of the refused requests (429) of one second,
// the first refusedLinesPerSecond are logged in full and the rest counted
// in one line once the second is over, written by the next line of a later
// second or by the flusher (endSecond); other lines are never held back.
func TestRefusedRequestsSampled(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		out := &logWriter{}
		l := newRequestLog(format, slog.LevelInfo, out)
		s := time.Unix(1_800_000_000, 0).UTC()
		line := func(status int) *requestLine {
			return &requestLine{method: "GET", route: "GET /v1/categories", status: status, requestID: "id", remote: "127.0.0.1:1"}
		}
		count := func(what string) int { return strings.Count(string(out.buf), what) }
		short := regexp.MustCompile(`refused requests not logged\W{1,4}count\W{1,2}(\d+)`)
		shorts := func() (n []int) {
			for _, m := range short.FindAllStringSubmatch(string(out.buf), -1) {
				v, _ := strconv.Atoi(m[1])
				n = append(n, v)
			}
			return n
		}
		for i := range 250 {
			l.write(s.Add(time.Duration(i)*time.Millisecond), line(429))
		}
		l.write(s.Add(300*time.Millisecond), line(200))
		l.write(s.Add(-time.Millisecond), line(429)) // late: counts in the newer second
		l.endSecond(s.Add(900*time.Millisecond), false)
		if got := count("429"); got != refusedLinesPerSecond {
			t.Errorf("%s: %d lines of 429 in the first second, want %d", format, got, refusedLinesPerSecond)
		}
		if count("200") != 1 || len(shorts()) != 0 {
			t.Errorf("%s: the 200 must be logged and no count written within the second:\n%s", format, out.buf)
		}
		l.write(s.Add(1200*time.Millisecond), line(429))
		if got := shorts(); !reflect.DeepEqual(got, []int{151}) || count("429") != refusedLinesPerSecond+1 {
			t.Errorf("%s: a new second's 429: counts %v, %d lines of 429; want [151], %d", format, got, count("429"), refusedLinesPerSecond+1)
		}
		for i := range 150 {
			l.write(s.Add(1300*time.Millisecond+time.Duration(i)), line(429))
		}
		l.endSecond(s.Add(1999*time.Millisecond), false)
		if got := shorts(); len(got) != 1 {
			t.Errorf("%s: counts %v before the second ended", format, got)
		}
		l.endSecond(s.Add(2050*time.Millisecond), false)
		if got := shorts(); !reflect.DeepEqual(got, []int{151, 51}) {
			t.Errorf("%s: counts %v after the flusher's call, want [151 51]", format, got)
		}
		for i := range 101 {
			l.write(s.Add(2100*time.Millisecond+time.Duration(i)), line(429))
		}
		l.endSecond(s.Add(2200*time.Millisecond), true) // the last flush
		if got := shorts(); !reflect.DeepEqual(got, []int{151, 51, 1}) {
			t.Errorf("%s: counts %v after the final flush, want [151 51 1]", format, got)
		}
		for i, ln := range strings.Split(strings.TrimSuffix(string(out.buf), "\n"), "\n") {
			if format == "json" && !json.Valid([]byte(ln)) {
				t.Fatalf("json: line %d is not JSON: %s", i, ln)
			}
		}
	}
}

// TestFloodLogIsSampled floods a free key through the server: every 429 it
// answered is either in the log or in a count of those left out, and no
// second logs more than refusedLinesPerSecond of them.
func TestFloodLogIsSampled(t *testing.T) {
	ts := startServer(t, "--ban-threshold", "1000000000") // no ban: plain refusals, as fast as they come
	free := createKey(t, ts.db, "--plan", "free", "--name", "flood")
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
	logged, left := 0, 0
	for ln := range strings.Lines(log) {
		if strings.Contains(ln, " status=429 ") {
			logged++
			perSecond[ln[:len("time=2006-01-02T15:04:05")]]++
		}
		if _, n, ok := strings.Cut(strings.TrimSpace(ln), `msg="refused requests not logged" count=`); ok {
			v, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("count line %q", ln)
			}
			left += v
		}
	}
	if refused < 500 || logged+left != refused {
		t.Errorf("%d refused; %d logged + %d counted = %d", refused, logged, left, logged+left)
	}
	// 540 refusals in at most a few seconds: some second had more than
	// its 100, unless the flood took longer than 5 s.
	if left == 0 && len(perSecond) < 6 {
		t.Errorf("%d refusals in %d seconds, none left out of the log", refused, len(perSecond))
	}
	for sec, n := range perSecond {
		if n > refusedLinesPerSecond {
			t.Errorf("%s logged %d refusals", sec, n)
		}
	}
}
