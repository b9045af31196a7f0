// health.go owns the health checks: liveness (/healthz) and readiness
// (/readyz: the database answers and, with HTTPS, a certificate can be
// served; its body says where rate limits are kept), on both listeners.

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

func handleReady(store Store, lim rateLimiter, certWaiting func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// HTTPS without a certificate yet (ACME at start) serves nothing.
		if certWaiting != nil {
			if why := certWaiting(); why != "" {
				w.Header().Set("Retry-After", retryAfterUnavailable)
				writeError(w, r, errorf("unavailable", "%s", why))
				return
			}
		}
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
