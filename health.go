// health.go owns the health checks: liveness (/healthz) and readiness
// (/readyz: the database answers; its body says where rate limits are
// kept), on both listeners.

package main

import (
	"context"
	"net/http"
	"time"
)

func handleHealth(env string) http.Handler {
	body := map[string]string{"status": "ok", "env": env, "version": buildVersion()}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, body)
	})
}

func handleReady(store Store, lim rateLimiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := store.Ready(ctx); err != nil {
			noteError(r, err)
			w.Header().Set("Retry-After", retryAfterUnavailable)
			writeError(w, r, errorf("unavailable", "the database is not reachable"))
			return
		}
		// Redis that does not answer leaves the instance ready: it limits
		// requests on its own meanwhile (DECISIONS.md section 8).
		body := map[string]string{"status": "ready"}
		if b := lim.backend(); b.shared {
			body["limits"], body["redis"] = "local", "not answering"
			if b.up {
				body["limits"], body["redis"] = "redis", "up"
			}
		}
		writeJSON(w, http.StatusOK, body)
	})
}
