package main

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const appOrigin = "https://app.example.com"

// preflight sends a CORS preflight of method on path from origin.
func preflight(t *testing.T, ts *testServer, path, origin, method string) response {
	t.Helper()
	return ts.do(t, "OPTIONS", path, "", "", "Origin", origin,
		"Access-Control-Request-Method", method,
		"Access-Control-Request-Headers", "authorization, content-type, idempotency-key")
}

// headerList splits the comma-separated values of h's name, lower-cased.
func headerList(h http.Header, name string) []string {
	var out []string
	for _, v := range h.Values(name) {
		for item := range strings.SplitSeq(v, ",") {
			out = append(out, strings.ToLower(strings.TrimSpace(item)))
		}
	}
	return out
}

func wantListed(t *testing.T, h http.Header, name string, want ...string) {
	t.Helper()
	got := headerList(h, name)
	for _, w := range want {
		if !slices.Contains(got, strings.ToLower(w)) {
			t.Errorf("%s = %q, lacks %s", name, h.Values(name), w)
		}
	}
}

func noRateLimitHeaders(t *testing.T, h http.Header) {
	t.Helper()
	for name := range h {
		if n := strings.ToLower(name); strings.HasPrefix(n, "x-ratelimit") || strings.HasPrefix(n, "ratelimit") || n == "retry-after" {
			t.Errorf("a preflight carries %s: %q", name, h.Values(name))
		}
	}
}

func TestCORSPreflight(t *testing.T) {
	// Two keyless requests a minute: a preflight that counted would use
	// them up.
	ts := startServer(t, "--cors-origins", "http://localhost:3000, https://APP.example.com:443", "--anon-rpm", "2")
	for _, path := range []string{"/v1/categories", "/v1/pets/7", "/v1/store/orders", "/v1/no/such/path"} {
		for range 3 {
			r := preflight(t, ts, path, appOrigin, "POST")
			if r.status != http.StatusNoContent || len(r.body) != 0 {
				t.Fatalf("preflight of %s: %d %q, want 204 with no body", path, r.status, r.body)
			}
			if got := r.header.Get("Access-Control-Allow-Origin"); got != appOrigin {
				t.Errorf("Access-Control-Allow-Origin = %q, want %q (the configured origin, normalised)", got, appOrigin)
			}
			wantListed(t, r.header, "Access-Control-Allow-Methods", "GET", "HEAD", "POST", "PUT", "DELETE")
			wantListed(t, r.header, "Access-Control-Allow-Headers", "Authorization", "Content-Type", "Idempotency-Key", "If-Match", "If-None-Match", "X-Request-Id", "Petstore-Read-After")
			wantListed(t, r.header, "Vary", "Origin")
			if r.header.Get("Access-Control-Max-Age") == "" {
				t.Error("a preflight without Access-Control-Max-Age")
			}
			if r.header.Get("X-Request-Id") == "" {
				t.Error("a preflight without X-Request-Id")
			}
			noRateLimitHeaders(t, r.header)
		}
	}
	// Twelve preflights later, the address still has both of its keyless
	// requests: the first is a 401 with the limit's headers, not a 429.
	r := ts.do(t, "GET", "/v1/categories", "", "", "Origin", appOrigin)
	wantError(t, r, http.StatusUnauthorized, "unauthorized")
	if got := r.header.Get("X-Ratelimit-Remaining"); got != "1" {
		t.Errorf("after the preflights X-RateLimit-Remaining = %q, want 1: preflights were counted", got)
	}

	// A preflight from another origin is no preflight here: OPTIONS is not
	// a method of the API, and nothing says the origin may read it.
	r = preflight(t, ts, "/v1/categories", "https://evil.example.com", "POST")
	wantError(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
	if got := r.header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("another origin's preflight got Access-Control-Allow-Origin %q", got)
	}
	// A non-API path is not preflighted.
	r = preflight(t, ts, "/healthz", appOrigin, "GET")
	if r.status != http.StatusMethodNotAllowed {
		t.Errorf("preflight of /healthz: %d, want 405", r.status)
	}
}

// TestCORSAllowsEveryRouteMethod preflights every route of the route
// table with its own method (and HEAD for a GET route, which the router
// answers too): a route whose method the preflight does not allow passes
// every other test and fails in a browser.
func TestCORSAllowsEveryRouteMethod(t *testing.T) {
	ts := startServer(t, "--cors-origins", appOrigin)
	wildcard := regexp.MustCompile(`\{[^}]*\}`)
	for _, rt := range apiRoutes(nil, nil, serveConfig{}) {
		method, pattern, ok := strings.Cut(rt.pattern, " ")
		if !ok {
			t.Errorf("route %q has no method: it would take every method", rt.pattern)
			continue
		}
		path := wildcard.ReplaceAllString(pattern, "1")
		methods := []string{method}
		if method == http.MethodGet {
			methods = append(methods, http.MethodHead)
		}
		for _, m := range methods {
			r := preflight(t, ts, path, appOrigin, m)
			if r.status != http.StatusNoContent {
				t.Errorf("preflight of %s %s: %d, want 204", m, path, r.status)
				continue
			}
			if !slices.Contains(headerList(r.header, "Access-Control-Allow-Methods"), strings.ToLower(m)) {
				t.Errorf("preflight of %s %s: Access-Control-Allow-Methods = %q, lacks %s (route %q)",
					m, path, r.header.Values("Access-Control-Allow-Methods"), m, rt.pattern)
			}
		}
	}
}

func TestCORSResponses(t *testing.T) {
	ts := startServer(t, "--cors-origins", appOrigin+",http://localhost:3000")
	exposed := []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit",
		"Retry-After", "X-Request-Id", "ETag", "Link", "Deprecation", "Sunset", "X-API-Stability", "Idempotency-Replayed", "Petstore-Read-After"}
	for _, tt := range []struct {
		name, method, path, key, body string
		status                        int
	}{
		{"list", "GET", "/v1/categories", ts.key, "", 200},
		{"head", "HEAD", "/v1/categories", ts.key, "", 200},
		{"create", "POST", "/v1/categories", ts.key, `{"name":"Dog"}`, 201},
		{"no key", "GET", "/v1/pets", "", "", 401},
		{"unknown path", "GET", "/v1/nope", ts.key, "", 404},
		{"bad body", "POST", "/v1/categories", ts.key, `{`, 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, tt.method, tt.path, tt.key, tt.body, "Origin", "http://localhost:3000")
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if got := r.header.Get("Access-Control-Allow-Origin"); got != "http://localhost:3000" {
				t.Errorf("Access-Control-Allow-Origin = %q", got)
			}
			wantListed(t, r.header, "Vary", "Origin")
			wantListed(t, r.header, "Access-Control-Expose-Headers", exposed...)
			if r.header.Get("Access-Control-Allow-Methods") != "" {
				t.Error("a response that is not a preflight carries Access-Control-Allow-Methods")
			}

			// Another origin may not read it: no CORS headers, but the same
			// answer, and Vary: Origin for the caches between.
			r = ts.do(t, tt.method, tt.path, tt.key, strings.Replace(tt.body, "Dog", "Cat", 1), "Origin", "https://evil.example.com")
			if r.status != tt.status {
				t.Fatalf("another origin: status %d, want %d", r.status, tt.status)
			}
			for name := range r.header {
				if strings.HasPrefix(strings.ToLower(name), "access-control-") {
					t.Errorf("another origin got %s: %q", name, r.header.Values(name))
				}
			}
			wantListed(t, r.header, "Vary", "Origin")
		})
	}
}

func TestCORSAnyOrigin(t *testing.T) {
	ts := startServer(t, "--cors-origins", "*")
	r := ts.do(t, "GET", "/v1/categories", ts.key, "", "Origin", "https://anywhere.example.org")
	if got := r.header.Get("Access-Control-Allow-Origin"); r.status != 200 || got != "*" {
		t.Errorf("status %d, Access-Control-Allow-Origin = %q, want 200 and *", r.status, got)
	}
	if r := preflight(t, ts, "/v1/categories", "http://127.0.0.1:5173", "POST"); r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight: %d %q, want 204 and *", r.status, r.header.Get("Access-Control-Allow-Origin"))
	}
}

func TestCORSOffByDefault(t *testing.T) {
	ts := startServer(t)
	r := ts.do(t, "GET", "/v1/categories", ts.key, "", "Origin", appOrigin)
	r2 := preflight(t, ts, "/v1/categories", appOrigin, "POST")
	for _, h := range []http.Header{r.header, r2.header} {
		for name := range h {
			if strings.HasPrefix(strings.ToLower(name), "access-control-") {
				t.Errorf("without --cors-origins a response carries %s", name)
			}
		}
		if slices.Contains(headerList(h, "Vary"), "origin") {
			t.Error("without --cors-origins a response varies by Origin")
		}
	}
	wantError(t, r2, http.StatusMethodNotAllowed, "method_not_allowed")
}

func TestParseCORSOrigins(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string // the origins allowed; "*" for any
	}{
		{"", nil},
		{"*", []string{"*"}},
		{" * ", []string{"*"}},
		{"https://a.example.com", []string{"https://a.example.com"}},
		{"HTTPS://A.Example.COM:443/", []string{"https://a.example.com"}},
		{"http://a.example.com:80,http://a.example.com:8080", []string{"http://a.example.com", "http://a.example.com:8080"}},
		{"https://a.example.com:80", []string{"https://a.example.com:80"}},
		{"http://[::1]:3000, http://127.0.0.1:3000", []string{"http://[::1]:3000", "http://127.0.0.1:3000"}},
	} {
		p, err := parseCORSOrigins(tt.in)
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		var got []string
		if p.any {
			got = []string{"*"}
		}
		for o := range p.origins {
			got = append(got, o)
		}
		slices.Sort(got)
		slices.Sort(tt.want)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q: allows %q, want %q", tt.in, got, tt.want)
		}
	}
	p, _ := parseCORSOrigins("https://a.example.com")
	for origin, want := range map[string]bool{"https://a.example.com": true, "": false, "null": false, "https://a.example.com.evil.org": false, "http://a.example.com": false} {
		if got := p.allowed(origin); got != want {
			t.Errorf("allowed(%q) = %v, want %v", origin, got, want)
		}
	}
}
