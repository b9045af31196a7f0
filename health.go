// health.go owns the health checks: liveness (/healthz) and readiness
// (/readyz: a certificate can be served and the database answered within
// the last second, keyless.go's readiness), on both listeners; the admin
// listener's body says where rate limits are kept and, on PostgreSQL, its
// synchronous replication and the acknowledged writes it lost.

package main

import (
	"bytes"
	"net/http"
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
// state comes from ready, within readyWait (keyless.go). On the API
// listener it says ready or not and why in a few words; detail (the admin
// listener's) adds where rate limits are kept and, on PostgreSQL, the
// synchronous replication and the acknowledged writes found lost
// (DECISIONS.md section 21).
func handleReady(ready *readiness, lim rateLimiter, certs certSource, detail bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Until a certificate can be served (an ACME CA has not answered
		// yet), every HTTPS handshake fails: not ready, whatever else is.
		if certs != nil {
			if why := certs.waiting(); why != "" {
				w.Header().Set("Retry-After", retryAfterUnavailable)
				if !detail {
					why = "not obtained yet"
				}
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
		body := map[string]any{"status": "ready"}
		if !detail {
			writeJSON(w, http.StatusOK, body)
			return
		}
		// Redis that does not answer leaves the instance ready: it limits
		// requests on its own meanwhile (DECISIONS.md section 8).
		if b := lim.backend(); b.shared {
			body["limits"], body["redis"] = "local", "not answering"
			if b.up {
				body["limits"], body["redis"] = "redis", "up"
			}
		}
		// What a failover would keep (DECISIONS.md section 19), as the
		// store last read it, and what one lost: still ready, the data
		// that is there serves.
		if rp := ready.store.Replication(); rp.Shown {
			body["synchronous_commit"], body["synchronous_standby_names"] = rp.SyncCommit, rp.SyncNames
			body["synchronous_standbys"] = nil // unknown: the role may not read them
			if rp.SyncStandbys >= 0 {
				body["synchronous_standbys"] = rp.SyncStandbys
			}
			body["lost_writes"] = append([]lostWrite{}, rp.Lost...)
		}
		writeJSON(w, http.StatusOK, body)
	})
}
