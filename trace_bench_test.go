package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkHandlerListCategoriesTraced is BenchmarkHandlerListCategories
// with every request sampled: the request path's share of tracing's cost
// (its span made, filled and queued; a goroutine takes the queue and drops
// it). BenchmarkOTLPExportSpan is the export's share, per span.
func BenchmarkHandlerListCategoriesTraced(b *testing.B) {
	tr := &tracer{sampler: sampler{bound: 1 << 63}, exp: &exporter{queue: make(chan *span, 2048)}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			select {
			case <-tr.exp.queue:
			case <-ctx.Done():
				return
			}
		}
	}()
	store := testStore(b, filepath.Join(b.TempDir(), "bench.db"), true)
	b.Cleanup(func() { store.Close() })
	h, key := benchHandlerTraced(b, store, tr)
	req := httptest.NewRequest("GET", "/v1/categories", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkOTLPExportSpan is the export's CPU per span of a batch of 512
// server spans like a GET's: encoded and gzipped (the HTTP request is one
// a batch).
func BenchmarkOTLPExportSpan(b *testing.B) {
	tr := &tracer{}
	var spans []*span
	for range 512 {
		sp := &span{tr: tr, trace: newTraceID(), id: newSpanID(), parent: newSpanID(), kind: spanServer, name: "GET /v1/categories",
			start: time.Now().UnixNano(), end: time.Now().UnixNano(), sampled: true, remote: true}
		sp.setString("http.request.method", "GET")
		sp.setString("http.route", "/v1/categories")
		sp.setInt("http.response.status_code", 200)
		sp.setString("url.scheme", "http")
		sp.setString("server.address", "127.0.0.1")
		sp.setInt("server.port", 8080)
		sp.setInt("petstore.api_key.id", 1)
		spans = append(spans, sp)
	}
	c := traceConfig{queueSize: 1, batchSize: 512, delay: time.Second, timeout: time.Second}
	e := newExporter(c, newOTLPHead([]attr{{key: "service.name", s: "petstore"}}, "petstore", "dev"), nil)
	var n int
	for b.Loop() {
		n = len(e.encode(spans))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/512, "ns/span")
	b.ReportMetric(float64(len(e.raw))/512, "raw-bytes/span")
	b.ReportMetric(float64(n)/512, "gzip-bytes/span")
}
