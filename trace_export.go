// trace_export.go owns sending the spans: a bounded queue that a request
// never waits on (a span that finds it full is dropped and counted), and
// one goroutine that sends them in batches, OTLP over HTTP with protobuf
// and gzip, retrying as OTLP's specification says.

package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// exporter sends the spans that end to an OTLP/HTTP collector.
type exporter struct {
	url     string
	headers http.Header
	client  *http.Client
	head    otlpHead
	log     *slog.Logger

	queue   chan *span
	batch   int           // spans in a request at most (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)
	delay   time.Duration // how long a span may wait for a batch to fill (OTEL_BSP_SCHEDULE_DELAY)
	timeout time.Duration // one attempt's bound (OTEL_EXPORTER_OTLP_TIMEOUT)
	retries time.Duration // how long a batch is retried at most

	dropped  atomic.Uint64 // spans never sent: the queue was full, or their batch failed
	exported atomic.Uint64 // spans the collector took
	warned   time.Time     // the exporting goroutine's last warning: one a minute

	raw []byte // the last request's protobuf, its room reused
	buf bytes.Buffer
	zw  *gzip.Writer
}

// maxRetryTime bounds how long a batch is retried: the queue fills
// meanwhile, and what it cannot hold is dropped, not waited for.
const maxRetryTime = 30 * time.Second

// minRetryWait is the least wait before a retry, whatever Retry-After
// says: a collector that answers "0" is not asked in a loop.
const minRetryWait = 100 * time.Millisecond

func newExporter(c traceConfig, head otlpHead, log *slog.Logger) *exporter {
	e := &exporter{
		url: c.url, headers: c.headerMap, head: head, log: log,
		queue: make(chan *span, c.queueSize), batch: c.batchSize, delay: c.delay,
		timeout: c.timeout, retries: maxRetryTime,
		client: &http.Client{Timeout: c.timeout, CheckRedirect: sameOrigin},
	}
	e.zw, _ = gzip.NewWriterLevel(&e.buf, gzip.BestSpeed)
	return e
}

// sameOrigin follows a collector's redirect only within its scheme and
// host: Go's client strips Authorization from a redirect to another host
// but copies every other header, and OTEL_EXPORTER_OTLP_HEADERS holds the
// vendors' keys (x-honeycomb-team, DD-API-KEY). A redirect elsewhere is the
// batch's answer, a failure counted in the drops.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Scheme != via[0].URL.Scheme || req.URL.Host != via[0].URL.Host {
		return http.ErrUseLastResponse
	}
	return nil
}

// enqueue hands sp to the exporter, or drops it when the queue is full:
// a request never waits for the collector.
func (e *exporter) enqueue(sp *span) {
	select {
	case e.queue <- sp:
	default:
		e.dropped.Add(1)
	}
}

// run sends the spans in batches until ctx ends, then sends what is
// queued once more, for at most one attempt's timeout.
func (e *exporter) run(ctx context.Context) {
	batch := make([]*span, 0, e.batch)
	timer := time.NewTimer(e.delay)
	defer timer.Stop()
	for {
		select {
		case sp := <-e.queue:
			batch = append(batch, sp)
			if len(batch) < e.batch {
				continue
			}
		case <-timer.C:
		case <-ctx.Done():
			e.drain(ctx, batch)
			return
		}
		if len(batch) > 0 {
			e.send(ctx, batch, true)
			clear(batch)
			batch = batch[:0]
		}
		timer.Reset(e.delay)
	}
}

// drain sends what is queued once, without retries, within one
// attempt's timeout in all: serve is stopping.
func (e *exporter) drain(ctx context.Context, batch []*span) {
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.timeout)
	defer cancel()
	for {
		select {
		case sp := <-e.queue:
			batch = append(batch, sp)
			if len(batch) == e.batch {
				e.send(final, batch, false)
				batch = batch[:0]
			}
		default:
			if len(batch) > 0 {
				e.send(final, batch, false)
			}
			return
		}
	}
}

// send exports batch, retrying a failure that OTLP calls retryable (429,
// 502, 503, 504, or no answer) with exponential backoff and the
// collector's Retry-After, for at most e.retries. A batch given up is
// counted as dropped.
func (e *exporter) send(ctx context.Context, batch []*span, retry bool) {
	body := e.encode(batch)
	deadline := time.Now().Add(e.retries)
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		wait, err := e.post(ctx, body)
		if err == nil {
			e.exported.Add(uint64(len(batch)))
			return
		}
		if wait < 0 || !retry {
			e.giveUp(len(batch), err)
			return
		}
		if wait == 0 {
			// Jittered, as the specification asks: instances that lost
			// the collector together do not come back together.
			wait = backoff/2 + rand.N(backoff)
			backoff = min(2*backoff, 16*time.Second)
		}
		wait = max(wait, minRetryWait)
		if time.Now().Add(wait).After(deadline) {
			e.giveUp(len(batch), fmt.Errorf("%w (gave up after %d attempts)", err, attempt))
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			// Shutting down: one last attempt, without retries.
			ctx = context.WithoutCancel(ctx)
			retry = false
		}
	}
}

func (e *exporter) giveUp(n int, err error) {
	e.dropped.Add(uint64(n))
	if now := time.Now(); now.Sub(e.warned) >= time.Minute {
		e.warned = now
		e.log.Warn("traces not exported; dropped", "spans", n, "err", err)
	}
}

// encode returns batch as a gzipped ExportTraceServiceRequest; the bytes
// are e's until the next call.
func (e *exporter) encode(batch []*span) []byte {
	e.raw = e.head.encodeSpans(e.raw[:0], batch)
	e.buf.Reset()
	e.zw.Reset(&e.buf)
	e.zw.Write(e.raw)
	e.zw.Close()
	return e.buf.Bytes()
}

// post sends one request. wait is 0 for a retryable failure with no
// Retry-After, the collector's Retry-After for one with it, and -1 for a
// failure not worth a retry.
func (e *exporter) post(ctx context.Context, body []byte) (wait time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return -1, err
	}
	for k, v := range e.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("User-Agent", "petstore/"+buildVersion())
	resp, err := e.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text holds the URL, which may hold a password
		}
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusAccepted, http.StatusNoContent:
		return 0, nil
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return otlpRetryAfter(resp.Header.Get("Retry-After"), time.Now()), fmt.Errorf("collector answered %s", resp.Status)
	}
	return -1, fmt.Errorf("collector answered %s", resp.Status)
}

// otlpRetryAfter is a Retry-After header's wait (seconds, or an HTTP date), or
// 0 when it has none; at least a millisecond when it has one.
func otlpRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return max(time.Duration(min(n, 3600))*time.Second, time.Millisecond)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), time.Millisecond)
	}
	return 0
}

// tracesDropped adds petstore_traces_dropped_total, the spans never sent,
// to the metrics; 0 with tracing off.
func (m *serverMetrics) tracesDropped(tr *tracer) {
	m.set.RegisterMetricsWriter(func(w io.Writer) {
		var n uint64
		if tr != nil {
			n = tr.exp.dropped.Load()
		}
		vm.WriteCounterUint64(w, "petstore_traces_dropped_total", n)
	})
}
