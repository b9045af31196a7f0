package main

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPetByIDDeprecation(t *testing.T) {
	ts := startServer(t, "--public-url", "https://api.example.net/v1")
	limited := createKey(t, ts.db, "--plan", "enterprise", "--rpm", "1", "--rpd", "100")
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	waitStatus(t, ts, limited, 200)

	wantHeaders := map[string]string{
		"Deprecation":     "@1767225600", // 2026-01-01T00:00:00Z
		"Sunset":          "Thu, 01 Jul 2027 00:00:00 GMT",
		"Link":            `<https://api.example.net/v1/pets>; rel="successor-version"`,
		"X-API-Stability": "beta",
	}
	for _, tt := range []struct {
		name, path, key string
		status          int
	}{
		{"found", "/v1/pets/1", ts.key, 200},
		{"not found", "/v1/pets/2", ts.key, 404},
		{"bad id", "/v1/pets/x", ts.key, 400},
		{"no key", "/v1/pets/1", "", 401},
		{"rate limited", "/v1/pets/1", limited, 429},
		{"wrong method", "/v1/pets/1", ts.key, 405},
	} {
		t.Run(tt.name, func(t *testing.T) {
			method := "GET"
			if tt.status == 405 {
				method = "PATCH" // no route takes it (DELETE is the pet's delete)
			}
			r := ts.do(t, method, tt.path, tt.key, "")
			if r.status != tt.status {
				t.Fatalf("status = %d, want %d", r.status, tt.status)
			}
			for name, want := range wantHeaders {
				if tt.status == 405 && name != "X-API-Stability" {
					// No route takes it: it is in the pets area, but it is
					// not the deprecated operation (areaHeaders asks the
					// router, so a DELETE or PATCH route here would not
					// inherit the GET's deprecation either).
					want = ""
				}
				if got := r.header.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
	for _, path := range []string{"/v1/pets", "/v1/categories"} {
		if r := ts.do(t, "GET", path, ts.key, ""); r.header.Get("Deprecation") != "" || r.header.Get("Sunset") != "" {
			t.Errorf("%s carries deprecation headers", path)
		}
	}
}

func TestPetByIDAfterSunset(t *testing.T) {
	ts := startServer(t, "--pets-deprecated-at", "2025-06-01", "--pets-sunset-at", "2026-02-01T12:00:00Z")
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	for _, key := range []string{ts.key, ""} {
		r := ts.do(t, "GET", "/v1/pets/1", key, "")
		wantError(t, r, 410, "gone")
		if r.header.Get("Sunset") != "Sun, 01 Feb 2026 12:00:00 GMT" || r.header.Get("Deprecation") != fmt.Sprintf("@%d", time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC).Unix()) {
			t.Errorf("410: Sunset %q, Deprecation %q", r.header.Get("Sunset"), r.header.Get("Deprecation"))
		}
	}
	if r := ts.do(t, "GET", "/v1/pets", ts.key, ""); r.status != 200 {
		t.Errorf("the successor after the sunset: %d", r.status)
	}

	for _, args := range [][]string{
		{"--pets-sunset-at", "next year"},
		{"--pets-deprecated-at", "2026-13-01"},
		{"--pets-deprecated-at", "2027-01-01", "--pets-sunset-at", "2026-01-01"},
	} {
		_, _, err := runCLI(t, nil, append([]string{"serve", "--admin-addr", "off"}, args...)...)
		if code := exitCode(err, &bytes.Buffer{}); code != 2 {
			t.Errorf("serve %v: exit %d (%v), want 2", args, code, err)
		}
	}
}

// TestEscapedPathKeepsAreaHeaders checks that an escaped letter in the
// path, which the router decodes and so still reaches the operation, does
// not lose the stability and deprecation headers.
func TestEscapedPathKeepsAreaHeaders(t *testing.T) {
	ts := startServer(t)
	addr := strings.TrimPrefix(ts.base, "http://")
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	auth := []string{"Authorization", "Bearer " + ts.key}
	for _, tt := range []struct {
		path, stability string
		deprecated      bool
	}{
		{"/v1/p%65ts/1", "beta", true}, // GET /v1/pets/{petId}
		{"/%761/pets/1", "beta", true},
		{"/v1/p%65ts", "beta", false},                 // GET /v1/pets
		{"/v1/st%6fre/orders", "experimental", false}, // GET /v1/store/orders
	} {
		res, err := rawExchange(addr, rawRequest("GET", tt.path, auth, ""), false)
		if err != nil || res.closed {
			t.Fatalf("%s: no answer: %v", tt.path, err)
		}
		if res.status != 200 {
			t.Errorf("%s: status %d: %s", tt.path, res.status, res.body)
		}
		if got := res.header.Get("X-API-Stability"); got != tt.stability {
			t.Errorf("%s: X-API-Stability %q, want %q", tt.path, got, tt.stability)
		}
		for _, h := range []string{"Deprecation", "Sunset", "Link"} {
			if got := res.header.Get(h); (got != "") != tt.deprecated {
				t.Errorf("%s: %s %q, want it only on the deprecated operation", tt.path, h, got)
			}
		}
	}
	// Paths the router answers with 404 reach no operation, so they are
	// told of no deprecation.
	for _, p := range []string{"/v1/pets/.", "/v1/pets/..", "/v1/pets/%2E", "/v1/pets/%2F"} {
		res, err := rawExchange(addr, rawRequest("GET", p, auth, ""), false)
		if err != nil || res.status != 404 {
			t.Fatalf("%s: %v, status %d, want 404", p, err, res.status)
		}
		for _, h := range []string{"Deprecation", "Sunset", "Link"} {
			if got := res.header.Get(h); got != "" {
				t.Errorf("%s: 404 not_found, yet %s %q", p, h, got)
			}
		}
	}
}

// TestOperationStabilityMatchesArea: every operation of the served
// document carries x-stability (stable, beta or experimental), and it is
// what areas.go marks the operation's answers with: X-API-Stability beta
// or experimental, none for stable. The document's deprecated is likewise
// the Deprecation header's presence.
func TestOperationStabilityMatchesArea(t *testing.T) {
	ts := startServer(t, "--pets-sunset-at", "2999-01-01")
	ops := servedDocOps(t, ts)
	if len(ops) < 10 {
		t.Fatalf("%d operations in the served document, want them all", len(ops))
	}
	for _, name := range slices.Sorted(maps.Keys(ops)) {
		op := ops[name]
		if op.Stability == nil {
			t.Errorf("%s: no x-stability in the document", name)
			continue
		}
		want := *op.Stability
		if !slices.Contains([]string{"stable", "beta", "experimental"}, want) {
			t.Errorf("%s: x-stability %q, want stable, beta or experimental", name, want)
			continue
		}
		if want == "stable" {
			want = ""
		}
		method, path, _ := strings.Cut(name, " ")
		r := ts.do(t, method, op.target(path), ts.key, "")
		if got := r.header.Get("X-API-Stability"); got != want {
			t.Errorf("%s: x-stability %q in the document, yet the answer (%d) has X-API-Stability %q", name, *op.Stability, r.status, got)
		}
		if got := r.header.Get("Deprecation") != ""; got != op.Deprecated {
			t.Errorf("%s: deprecated %v in the document, yet the answer (%d) has a Deprecation header: %v", name, op.Deprecated, r.status, got)
		}
	}
}

// TestAreaHeadersFollowTheRoute: areaHeaders asks the router which route a
// request takes, so a route beside the deprecated GET /v1/pets/{petId}
// (here a PATCH on the same pattern) carries the area's stability and not
// the GET's deprecation, which a guess from the path would give it.
func TestAreaHeadersFollowTheRoute(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	rt := newRouter([]route{
		{pattern: "GET /v1/pets/{petId}", handler: ok, area: areaPets, deprecated: true},
		{pattern: "PATCH /v1/pets/{petId}", handler: ok, area: areaPets},
		{pattern: "GET /v1/store/orders", handler: ok, area: areaStore},
	})
	d := deprecation{deprecatedAt: time.Unix(1, 0), sunsetAt: time.Unix(2, 0), successor: "http://x/v1/pets"}
	h := chain(rt, areaHeaders(d, rt))
	for _, tt := range []struct {
		method, path, stability string
		deprecated              bool
	}{
		{"GET", "/v1/pets/1", "beta", true},
		{"HEAD", "/v1/pets/1", "beta", true},
		{"PATCH", "/v1/pets/1", "beta", false},
		{"DELETE", "/v1/pets/1", "beta", false}, // 405: no route
		{"GET", "/v1/pets/1/x", "beta", false},  // 404
		{"GET", "/v1/store/orders", "experimental", false},
		{"GET", "/v1/categories", "", false},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, nil))
		if got := w.Header().Get("X-API-Stability"); got != tt.stability {
			t.Errorf("%s %s: X-API-Stability %q, want %q", tt.method, tt.path, got, tt.stability)
		}
		if got := w.Header().Get("Deprecation") != ""; got != tt.deprecated {
			t.Errorf("%s %s: Deprecation %v, want %v", tt.method, tt.path, got, tt.deprecated)
		}
	}
}
