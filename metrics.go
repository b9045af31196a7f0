// metrics.go owns the server's metrics: counted on the request path,
// read from the limiter and the store, and served in the Prometheus text
// format on the admin listener.

package main

import (
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// serverMetrics are the server's metrics, served in the Prometheus text
// format on the admin listener only.
type serverMetrics struct {
	set      *vm.Set
	refusals map[string]*vm.Counter
	bans     *vm.Counter
	dbErrors *vm.Counter

	routes lazyMap[string, *routeMetrics] // by route pattern; "" for unrouted requests
}

// routeMetrics are one route's request counts by status and its latencies.
type routeMetrics struct {
	durations *vm.Histogram
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

func newServerMetrics(lim rateLimiter, store Store) *serverMetrics {
	set := vm.NewSet()
	m := &serverMetrics{set: set, refusals: map[string]*vm.Counter{}}
	for _, reason := range []string{"rate_limited", "quota_exceeded", "key_banned"} {
		m.refusals[reason] = set.NewCounter(`petstore_ratelimit_refusals_total{reason="` + reason + `"}`)
	}
	m.bans = set.NewCounter("petstore_bans_total")
	m.dbErrors = set.NewCounter("petstore_db_errors_total")
	set.NewGauge("petstore_group_commit_batches_total", func() float64 { return float64(store.Stats().Batches) })
	set.NewGauge("petstore_group_commit_writes_total", func() float64 { return float64(store.Stats().Writes) })
	set.NewGauge("petstore_category_list_reads_total", func() float64 { return float64(store.Stats().CategoryListReads) })
	set.NewGauge("petstore_limiter_tracked_keys", func() float64 { return float64(lim.stats().keys) })
	set.NewGauge("petstore_limiter_tracked_addrs", func() float64 { return float64(lim.stats().addrs) })
	set.NewGauge(`petstore_build_info{version="`+buildVersion()+`",goversion="`+runtime.Version()+`"}`, func() float64 { return 1 })
	return m
}

// limitsShared adds the metrics of the Redis limiter r, if there is one.
func (m *serverMetrics) limitsShared(r *redisLimiter) {
	if r == nil {
		return
	}
	m.set.NewGauge("petstore_ratelimit_backend_up", func() float64 {
		if r.up.Load() {
			return 1
		}
		return 0
	})
	m.set.NewGauge("petstore_redis_calls_total", func() float64 { return float64(r.calls.Load()) })
	m.set.NewGauge("petstore_redis_failures_total", func() float64 { return float64(r.fails.Load()) })
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
		return &routeMetrics{durations: m.set.GetOrCreateHistogram(`petstore_http_request_duration_seconds{route="` + routeLabel(route) + `"}`)}
	})
}

func (rm *routeMetrics) status(set *vm.Set, route string, status int) *vm.Counter {
	return rm.byStatus.get(status, func() *vm.Counter {
		return set.GetOrCreateCounter(`petstore_http_requests_total{route="` + routeLabel(route) + `",status="` + strconv.Itoa(status) + `"}`)
	})
}

// routeLabel is the label value of a route pattern; requests that matched
// none (404, 405, 429 before routing) share "unmatched".
func routeLabel(route string) string {
	if route == "" {
		return "unmatched"
	}
	return route
}

func handleMetrics(m *serverMetrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		m.set.WritePrometheus(w)
		vm.WriteProcessMetrics(w)
	})
}
