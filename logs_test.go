package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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
