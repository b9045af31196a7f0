// health.go owns the health checks: liveness (/healthz) and readiness
// (/readyz: the database answers), on both listeners.

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

func handleReady(store Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := store.Ready(ctx); err != nil {
			noteError(r, err)
			w.Header().Set("Retry-After", retryAfterUnavailable)
			writeError(w, r, errorf("unavailable", "the database is not reachable"))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}
