// health.go owns the health checks: liveness (/healthz) and readiness
// (/readyz: a certificate can be served and the database answered within
// the last second, keyless.go's readiness; its body says where rate limits
// are kept and, on PostgreSQL, its synchronous replication), on both
// listeners.

package main

import (
	"bytes"
	"net/http"
	"strconv"
)

func handleHealth(env string) http.Handler {
	// The body never changes: encoded once here, not on every request (a
	// load balancer's probes, each perhaps on a new connection; BENCHMARKS.md
	// has what encoding it each time cost).
	var buf bytes.Buffer
	if err := encodeJSON(&buf, map[string]string{"status": "ok", "env": env, "version": buildVersion()}); err != nil {
		panic(err) // three strings always encode
	}
	body := buf.Bytes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeRaw(w, http.StatusOK, body)
	})
}

// handleReady answers /readyz; certs is nil without HTTPS. The database's
// state comes from ready, at most a second old.
func handleReady(ready *readiness, lim rateLimiter, certs certSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Until a certificate can be served (an ACME CA has not answered
		// yet), every HTTPS handshake fails: not ready, whatever else is.
		if certs != nil {
			if why := certs.waiting(); why != "" {
				w.Header().Set("Retry-After", retryAfterUnavailable)
				writeError(w, r, errorf("unavailable", "waiting for a certificate: %s", why))
				return
			}
		}
		if err := ready.check(r.Context()); err != nil {
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
		// What a failover would keep (DECISIONS.md section 19), as the
		// store last read it.
		if rp := ready.store.Replication(); rp.Shown {
			body["synchronous_commit"], body["synchronous_standby_names"] = rp.SyncCommit, rp.SyncNames
			body["synchronous_standbys"] = "unknown"
			if rp.SyncStandbys >= 0 {
				body["synchronous_standbys"] = strconv.Itoa(rp.SyncStandbys)
			}
		}
		writeJSON(w, http.StatusOK, body)
	})
}
