// cors.go owns CORS (DECISIONS.md section 10): which browser origins may
// call the API (--cors-origins), their preflights, and the headers that let
// a page read the rate-limit state.

package main

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// corsPolicy is the --cors-origins setting. The zero value allows no
// origin: no CORS headers at all.
type corsPolicy struct {
	any     bool            // "*": every origin
	origins map[string]bool // each allowed origin, as a browser writes it
}

// The header values of CORS answers: the same for every request. The
// allowed methods come from the route table (corsMethods).
var (
	corsAllowHeaders = []string{"Authorization, Content-Type, Idempotency-Key, If-Match, If-None-Match, X-Request-Id, Petstore-Read-After"}
	corsMaxAge       = []string{"7200"} // Chromium's cap; Firefox allows a day
	corsAnyOrigin    = []string{"*"}
	corsExpose       = []string{"X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, RateLimit-Policy, RateLimit, " +
		"Retry-After, X-Request-Id, ETag, Link, Deprecation, Sunset, X-API-Stability, Idempotency-Replayed, Petstore-Read-After"}
)

// parseCORSOrigins reads --cors-origins: empty (no CORS), "*", or a
// comma-separated list of origins, each scheme://host[:port] with no path.
// An origin's scheme and host are lower-cased and a default port dropped,
// as a browser's Origin header has them.
func parseCORSOrigins(s string) (corsPolicy, error) {
	var p corsPolicy
	if strings.TrimSpace(s) == "" {
		return p, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "*" && p.origins == nil && !p.any:
			p.any = true
			continue
		case item == "*" || p.any:
			return corsPolicy{}, fmt.Errorf("--cors-origins: * allows every origin and stands alone, got %q", s)
		}
		origin, err := normalizeOrigin(item)
		if err != nil {
			return corsPolicy{}, fmt.Errorf("--cors-origins: %q %v", item, err)
		}
		if p.origins == nil {
			p.origins = map[string]bool{}
		}
		p.origins[origin] = true
	}
	if !p.any && p.origins == nil {
		return corsPolicy{}, fmt.Errorf("--cors-origins: no origin in %q", s)
	}
	return p, nil
}

// normalizeOrigin returns the origin o as a browser sends it, or why it is
// not one.
func normalizeOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	switch {
	case err != nil || u.Opaque != "":
		return "", fmt.Errorf("is not an origin (want scheme://host[:port])")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("is not an origin: the scheme must be http or https")
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("is not an origin: it has no host")
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(o, "#"):
		return "", fmt.Errorf("is not an origin: an origin has no user, path, query or fragment")
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if port := u.Port(); (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return scheme + "://" + host, nil
}

// allowed reports whether a request with this Origin header may read the
// answer.
func (p corsPolicy) allowed(origin string) bool {
	return origin != "" && (p.any || p.origins[origin])
}

// isPreflight reports whether r is a CORS preflight of an API path.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" && isAPIPath(r.URL.Path)
}

// corsMethods returns the Access-Control-Allow-Methods of a preflight:
// the methods of routes, and HEAD with GET (the router answers HEAD for
// every GET route), in alphabetical order. Every route names its method.
func corsMethods(routes []route) []string {
	var methods []string
	for _, rt := range routes {
		method, _, _ := strings.Cut(rt.pattern, " ")
		methods = append(methods, method)
		if method == http.MethodGet {
			methods = append(methods, http.MethodHead)
		}
	}
	slices.Sort(methods)
	return []string{strings.Join(slices.Compact(methods), ", ")}
}

// withCORS answers the preflights of allowed origins (204, no key, no rate
// limit: it runs before both), allowing the methods of routes, and marks
// every other answer to them as readable, with the headers a page needs
// exposed. Without a policy it is not in the chain at all.
func withCORS(p corsPolicy, routes []route) func(http.Handler) http.Handler {
	if !p.any && len(p.origins) == 0 {
		return func(next http.Handler) http.Handler { return next }
	}
	corsAllowMethods := corsMethods(routes)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Add("Vary", "Origin") // an answer differs by Origin: caches must keep them apart
			origin := r.Header.Get("Origin")
			if !p.allowed(origin) {
				next.ServeHTTP(w, r)
				return
			}
			if p.any {
				h["Access-Control-Allow-Origin"] = corsAnyOrigin
			} else {
				h["Access-Control-Allow-Origin"] = []string{origin}
			}
			if isPreflight(r) {
				if st := stateOf(r); st != nil {
					st.pattern = "preflight"
				}
				h["Access-Control-Allow-Methods"] = corsAllowMethods
				h["Access-Control-Allow-Headers"] = corsAllowHeaders
				h["Access-Control-Max-Age"] = corsMaxAge
				w.WriteHeader(http.StatusNoContent)
				return
			}
			h["Access-Control-Expose-Headers"] = corsExpose
			next.ServeHTTP(w, r)
		})
	}
}
