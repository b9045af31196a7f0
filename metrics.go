// metrics.go owns the server's metrics: counted on the request path,
// read from the limiter and the store, and served in the Prometheus text
// format on the admin listener, with a help text and a type for every
// family, as Prometheus and promtool expect.

package main

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// The library writes "# HELP" and "# TYPE" before each family only when
// told to, once for the whole process; init runs before anything can
// write, so no scrape races the switch.
func init() { vm.ExposeMetadata(true) }

// latencyBuckets are the upper bounds, in seconds, of the request-duration
// histogram's le buckets, 1-2.5-5 in each decade: from 10 µs (a cached
// GET, or a refusal, takes about that long) through the 0.1 to a few ms of
// most requests to 10 s (a request waits for the database up to
// --busy-timeout, 5 s by default). histogram_quantile interpolates within
// one bucket, whose bounds are at most 2.5 times apart.
var latencyBuckets = []float64{
	.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005,
	.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10,
}

// serverMetrics are the server's metrics, served in the Prometheus text
// format on the admin listener only.
type serverMetrics struct {
	set      *vm.Set
	refusals map[string]*vm.Counter
	bans     *vm.Counter
	dbErrors *vm.Counter

	routes lazyMap[string, *routeMetrics] // by route pattern; "" for unrouted requests

	scrapeSize atomic.Int64 // bytes the library wrote for the last scrape

	handshakeErrors atomic.Uint64 // failed TLS handshakes (tls_log.go)
	acmeFailures    atomic.Uint64 // failed ACME orders and renewals (acmeFailed)
}

// routeMetrics are one route's request counts by status and its latencies.
type routeMetrics struct {
	durations *vm.PrometheusHistogram
	byStatus  lazyMap[int, *vm.Counter]
}

// lazyMap is a map whose values are made on first use and then only read:
// a read lock finds what is there; the first use of a key makes its value
// under the write lock.
type lazyMap[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

// get returns the value of k, which mk makes the first time.
func (lm *lazyMap[K, V]) get(k K, mk func() V) V {
	lm.mu.RLock()
	v, ok := lm.m[k]
	lm.mu.RUnlock()
	if ok {
		return v
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if v, ok = lm.m[k]; !ok {
		if lm.m == nil {
			lm.m = map[K]V{}
		}
		v = mk()
		lm.m[k] = v
	}
	return v
}

// newServerMetrics makes the metrics of a server on lim and store. Counts
// that the store, the Redis limiter and the log writer keep themselves are
// written at each scrape by a metrics writer, as counters: the library's
// metric with a callback, the Gauge, would type them gauge, and a gauge
// named *_total is what promtool reports and rate() warns about.
func newServerMetrics(lim rateLimiter, store healthStore) *serverMetrics {
	set := vm.NewSet()
	m := &serverMetrics{set: set, refusals: map[string]*vm.Counter{}}
	for _, reason := range []string{"rate_limited", "quota_exceeded", "key_banned"} {
		m.refusals[reason] = set.NewCounter(`petstore_ratelimit_refusals_total{reason="` + reason + `"}`)
	}
	m.bans = set.NewCounter("petstore_bans_total")
	m.dbErrors = set.NewCounter("petstore_db_errors_total")
	set.RegisterMetricsWriter(func(w io.Writer) {
		st := store.Stats()
		vm.WriteCounterUint64(w, "petstore_group_commit_batches_total", uint64(st.Batches))
		vm.WriteCounterUint64(w, "petstore_group_commit_writes_total", uint64(st.Writes))
		vm.WriteCounterUint64(w, "petstore_category_list_reads_total", st.CategoryListReads)
		writeReplicaStats(w, st.Replica)
	})
	set.NewGauge("petstore_limiter_tracked_keys", func() float64 { return float64(lim.stats().keys) })
	set.NewGauge("petstore_limiter_tracked_addrs", func() float64 { return float64(lim.stats().addrs) })
	set.NewGauge(`petstore_build_info{version="`+buildVersion()+`",goversion="`+runtime.Version()+`"}`, func() float64 { return 1 })
	if store != nil && store.Replication().Shown { // nil: a test's metrics without a store
		set.NewGauge("petstore_db_synchronous_standbys", func() float64 { return float64(store.Replication().SyncStandbys) })
		set.RegisterMetricsWriter(func(w io.Writer) { writeLostWrites(w, store.Replication().LostBy) })
	}
	return m
}

// writeLostWrites writes the acknowledged creates found lost, by table
// (DECISIONS.md section 21).
func writeLostWrites(w io.Writer, by [3]uint64) {
	vm.WriteMetadataIfNeeded(w, "petstore_db_lost_writes_total", "counter")
	for i, n := range by {
		io.WriteString(w, `petstore_db_lost_writes_total{table="`+lostTables[i]+`"} `+strconv.FormatUint(n, 10)+"\n")
	}
}

// writeReplicaStats writes the reads by source and reason, and the
// replica's lag, of a store with --db-replica (read_after.go).
func writeReplicaStats(w io.Writer, st replicaStats) {
	if !st.Shown {
		return
	}
	vm.WriteMetadataIfNeeded(w, "petstore_db_reads_total", "counter")
	for _, c := range []struct {
		labels string
		n      uint64
	}{{`source="replica",reason="fresh"`, st.Replica}, {`source="primary",reason="lag"`, st.Lag},
		{`source="primary",reason="wait"`, st.Wait}, {`source="primary",reason="error"`, st.Error}} {
		io.WriteString(w, "petstore_db_reads_total{"+c.labels+"} "+strconv.FormatUint(c.n, 10)+"\n")
	}
	vm.WriteCounterUint64(w, "petstore_db_replica_waits_total", st.Waits)
	vm.WriteCounterFloat64(w, "petstore_db_replica_wait_seconds_total", st.WaitSeconds)
	vm.WriteGaugeFloat64(w, "petstore_db_replica_lag_seconds", st.LagSeconds)
}

// limitsShared adds the metrics of a limiter that keeps its counts in
// Redis; lim of any other backend adds none.
func (m *serverMetrics) limitsShared(lim rateLimiter) {
	if !lim.backend().shared {
		return
	}
	m.set.NewGauge("petstore_ratelimit_backend_up", func() float64 {
		if lim.backend().up {
			return 1
		}
		return 0
	})
	m.set.RegisterMetricsWriter(func(w io.Writer) {
		b := lim.backend()
		vm.WriteCounterUint64(w, "petstore_redis_calls_total", uint64(b.calls))
		vm.WriteCounterUint64(w, "petstore_redis_failures_total", uint64(b.fails))
		vm.WriteCounterUint64(w, "petstore_ratelimit_lease_local_total", uint64(b.leaseLocal))
		vm.WriteCounterUint64(w, "petstore_ratelimit_lease_waits_total", uint64(b.leaseWaited))
		vm.WriteCounterUint64(w, "petstore_ratelimit_lease_wait_timeouts_total", uint64(b.leaseTimedOut))
		vm.WriteCounterUint64(w, "petstore_ratelimit_lease_granted_tokens_total", uint64(b.leaseGranted))
		vm.WriteCounterUint64(w, "petstore_ratelimit_lease_returned_tokens_total", uint64(b.leaseReturned))
	})
}

// logsDropped adds the count of log bytes dropped, which lost holds.
func (m *serverMetrics) logsDropped(lost *atomic.Int64) {
	m.set.RegisterMetricsWriter(func(w io.Writer) {
		vm.WriteCounterUint64(w, "petstore_log_bytes_dropped_total", uint64(lost.Load()))
	})
}

// refused counts a request the limiter refused for reason.
func (m *serverMetrics) refused(reason string) {
	if c := m.refusals[reason]; c != nil {
		c.Inc()
	}
}

// observe counts a finished request of route with its status and latency,
// and a database error if err is one. Routes and statuses are few, so the
// label sets stay bounded.
func (m *serverMetrics) observe(route string, status int, d time.Duration, err error) {
	rm := m.route(route)
	rm.durations.Update(d.Seconds())
	rm.status(m.set, route, status).Inc()
	if err != nil && isDBError(err) {
		m.dbErrors.Inc()
	}
}

func (m *serverMetrics) route(route string) *routeMetrics {
	return m.routes.get(route, func() *routeMetrics {
		return &routeMetrics{durations: m.set.GetOrCreatePrometheusHistogramExt(`petstore_http_request_duration_seconds{route="`+routeLabel(route)+`"}`, latencyBuckets)}
	})
}

func (rm *routeMetrics) status(set *vm.Set, route string, status int) *vm.Counter {
	return rm.byStatus.get(status, func() *vm.Counter {
		return set.GetOrCreateCounter(`petstore_http_requests_total{route="` + routeLabel(route) + `",status="` + strconv.Itoa(status) + `"}`)
	})
}

// routeLabel is the label value of a route pattern; requests that matched
// none (404, 405, and a 429 on a path no route takes) share "unmatched".
func routeLabel(route string) string {
	if route == "" {
		return "unmatched"
	}
	return route
}

// handleMetrics serves the exposition: the set's families, then the
// library's Go runtime and process ones (with open files), written into a
// buffer and copied out through mendExposition. A scrape comes every few
// seconds at most, so the copy costs nothing that matters; the request
// path never sees it.
func handleMetrics(m *serverMetrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var raw bytes.Buffer
		raw.Grow(int(m.scrapeSize.Load())) // the last scrape's size: one allocation, not a dozen
		m.set.WritePrometheus(&raw)
		vm.WriteProcessMetrics(&raw)
		vm.WriteFDMetrics(&raw)
		out := mendExposition(make([]byte, 0, raw.Len()+raw.Len()/2), raw.Bytes())
		m.scrapeSize.Store(int64(raw.Len()))
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(out)
	})
}
