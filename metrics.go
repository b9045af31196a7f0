package main

import (
	"net/http"

	vm "github.com/VictoriaMetrics/metrics"
)

// serverMetrics are the server's metrics, served in the Prometheus text
// format on the admin listener only.
type serverMetrics struct {
	set      *vm.Set
	refusals map[string]*vm.Counter
	bans     *vm.Counter
}

func newServerMetrics(lim *limiter) *serverMetrics {
	set := vm.NewSet()
	m := &serverMetrics{set: set, refusals: map[string]*vm.Counter{}}
	for _, reason := range []string{"rate_limited", "quota_exceeded", "key_banned"} {
		m.refusals[reason] = set.NewCounter(`petstore_ratelimit_refusals_total{reason="` + reason + `"}`)
	}
	m.bans = set.NewCounter("petstore_bans_total")
	set.NewGauge("petstore_limiter_tracked_keys", func() float64 { return float64(lim.stats().keys) })
	set.NewGauge("petstore_limiter_tracked_addrs", func() float64 { return float64(lim.stats().addrs) })
	return m
}

// refused counts a request the limiter refused for reason.
func (m *serverMetrics) refused(reason string) {
	if c := m.refusals[reason]; c != nil {
		c.Inc()
	}
}

func handleMetrics(m *serverMetrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		m.set.WritePrometheus(w)
		vm.WriteProcessMetrics(w)
	})
}
