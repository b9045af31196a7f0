// areas.go owns what marks the API's areas: the stability header of the
// beta pets and experimental store areas, and the deprecation, sunset and
// successor of GET /v1/pets/{petId}.

package main

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// petsDeprecation is the timeline of GET /v1/pets/{petId}.
func (cfg serveConfig) petsDeprecation() deprecation {
	return deprecation{deprecatedAt: cfg.petsDeprecatedAt, sunsetAt: cfg.petsSunsetAt, successor: cfg.publicURL + "/pets"}
}

// deprecation is the timeline of the deprecated GET /v1/pets/{petId}.
type deprecation struct {
	deprecatedAt time.Time
	sunsetAt     time.Time
	successor    string // the URL of what replaces it
}

// headers sets what every response of a deprecated operation carries:
// Deprecation (RFC 9745), Sunset (RFC 8594) and the successor's Link.
func (d deprecation) headers(h http.Header) {
	h.Set("Deprecation", "@"+strconv.FormatInt(d.deprecatedAt.Unix(), 10))
	h.Set("Sunset", d.sunsetAt.UTC().Format(http.TimeFormat))
	h.Set("Link", "<"+d.successor+`>; rel="successor-version"`)
}

// sunset answers 410 gone once the operation's sunset has passed, with or
// without a key; before, it hands the request to next.
func sunset(d deprecation, now func() time.Time, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !now().Before(d.sunsetAt) {
			writeError(w, r, errorf("gone",
				"this operation was retired on %s; use %s", d.sunsetAt.UTC().Format(time.RFC3339), d.successor))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// unescapeSegments undoes the escapes of an escaped path but for "/", which
// stays %2F inside its segment: the path as the router matches it, so that
// /v1/p%65ts/1 gets the headers of the operation it reaches.
func unescapeSegments(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if u, err := url.PathUnescape(s); err == nil {
			segs[i] = strings.ReplaceAll(u, "/", "%2F")
		}
	}
	return strings.Join(segs, "/")
}

// areaHeaders marks the responses of the API's areas, errors included:
// X-API-Stability on the beta pets and experimental store areas, and the
// deprecation headers on GET /v1/pets/{petId}. It runs before the limiter,
// so a 429 carries them too.
func areaHeaders(d deprecation) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := r.URL.EscapedPath() // so that an escaped "/" stays inside its segment
			if strings.IndexByte(p, '%') >= 0 {
				p = unescapeSegments(p)
			}
			switch {
			case p == "/v1/pets" || strings.HasPrefix(p, "/v1/pets/"):
				w.Header().Set("X-API-Stability", "beta")
				// Only for a path the router takes to GET /v1/pets/{petId}: not
				// for "." or ".." segments, which it answers with 404.
				if rest := strings.TrimPrefix(p, "/v1/pets/"); rest != p && rest != "" && !strings.Contains(rest, "/") && isCanonicalPath(r.URL.Path) {
					d.headers(w.Header())
				}
			case p == "/v1/store" || strings.HasPrefix(p, "/v1/store/"):
				w.Header().Set("X-API-Stability", "experimental")
			}
			next.ServeHTTP(w, r)
		})
	}
}
