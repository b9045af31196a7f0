// logs.go owns the log: the buffered writer that keeps requests from
// waiting on stderr, and the server's slog logger. The request line is in
// requestlog.go.

package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// logWriter buffers the log so that a request does not wait for a write to
// stderr: a request only appends to the buffer, and flushEvery writes it out
// every 100 ms, as soon as 64 KiB have gathered, and on exit. Only when the
// output falls behind by logBufferMax does a request write the buffer out
// itself, so that memory stays bounded and no line is lost while the output
// works (putBack says what happens when it fails). A crash loses at most the
// last 100 ms of log, never a write to the database.
type logWriter struct {
	mu      sync.Mutex // guards buf
	buf     []byte
	spare   []byte       // the buffer being written out, reused for the next one
	lost    atomic.Int64 // bytes dropped because the output failed (a metric)
	failing atomic.Bool  // the last write failed: retry on the ticker only

	wmu  sync.Mutex // serializes writes to w
	w    io.Writer
	full chan struct{} // wakes flushEvery early; nil when nothing runs it

	// beforeFlush, when set before flushEvery starts, runs before each of
	// its flushes, final on the last one: the request log's count of the
	// lines it left out.
	beforeFlush func(final bool)
}

const (
	logBufferFlush = 64 << 10 // wake the flusher
	logBufferMax   = 4 << 20  // stop waiting for it
)

func newLogWriter(w io.Writer) *logWriter {
	return &logWriter{w: w, full: make(chan struct{}, 1)}
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf = append(l.buf, p...)
	behind := l.filled()
	l.mu.Unlock()
	if behind {
		l.Flush()
	}
	return len(p), nil
}

// filled wakes the flusher when the buffer holds logBufferFlush, and reports
// whether it holds logBufferMax, when the caller should flush it itself.
// l.mu must be held.
func (l *logWriter) filled() (behind bool) {
	if len(l.buf) >= logBufferFlush {
		select {
		case l.full <- struct{}{}:
		default:
		}
	}
	return len(l.buf) >= logBufferMax
}

// Flush writes out what is buffered. New lines go into the other buffer
// meanwhile.
func (l *logWriter) Flush() {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	buf := l.buf
	l.buf = l.spare[:0]
	l.mu.Unlock()
	if len(buf) > 0 {
		n, err := l.w.Write(buf)
		if err != nil && n < len(buf) {
			l.putBack(buf, n)
		}
		l.failing.Store(err != nil)
	}
	l.spare = buf[:0] // only Flush touches spare, and wmu is held
}

// putBack keeps what a failed write left of buf (all from byte n on) for
// the next flush, ahead of the lines logged meanwhile, so that a short write
// or a disk full for a while loses nothing once the output recovers. It
// keeps at most half of logBufferMax, so that requests do not start
// flushing, and failing, at once; beyond that it drops what the write left,
// counting the bytes, and ends a line cut in the middle so that it does not
// run into the next one.
func (l *logWriter) putBack(buf []byte, n int) {
	rest := buf[max(0, n):]
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(rest)+len(l.buf) <= logBufferMax/2 {
		l.buf = append(append(make([]byte, 0, len(rest)+len(l.buf)), rest...), l.buf...)
		return
	}
	l.lost.Add(int64(len(rest)))
	if n > 0 && buf[n-1] != '\n' {
		l.buf = append(append(make([]byte, 0, 1+len(l.buf)), '\n'), l.buf...)
	}
}

// flushEvery flushes the log every interval, and when the buffer fills,
// until ctx ends.
func (l *logWriter) flushEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if l.beforeFlush != nil {
				l.beforeFlush(true)
			}
			l.Flush()
			return
		case <-t.C:
		case <-l.full:
			if l.failing.Load() {
				continue // a failing output is retried every interval, not on every line
			}
		}
		if l.beforeFlush != nil {
			l.beforeFlush(false)
		}
		l.Flush()
	}
}

// newLogger returns the server's logger: format "json" or "text", to w.
func newLogger(format string, level slog.Level, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(traceLogHandler{slog.NewJSONHandler(w, opts)})
	}
	return slog.New(traceLogHandler{slog.NewTextHandler(w, opts)})
}
