// areas.go owns the API's areas and what marks them: each area's paths
// and stability (one place), the stability header, and the deprecation,
// sunset and successor of GET /v1/pets/{petId}.

package main

import (
	"net/http"
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

// apiArea is a part of the API with a stability of its own: the one
// place that says it. areaHeaders marks its answers with it, and
// openapi.go its operations (x-stability, the X-API-Stability header, and
// the area's copies of the shared responses).
type apiArea struct {
	prefix    string // its paths: prefix, and what lies under it
	stability string // stable, beta (may change with notice) or experimental (may change without)
	component string // the prefix of its copies of the document's shared responses (PetsNotFound); "" for a stable area, which uses the plain ones
}

// The API's areas; every API route has one.
var (
	areaCategories = &apiArea{prefix: "/v1/categories", stability: "stable"}
	areaPets       = &apiArea{prefix: "/v1/pets", stability: "beta", component: "Pets"}
	areaStore      = &apiArea{prefix: "/v1/store", stability: "experimental", component: "Store"}
	areaDocument   = &apiArea{prefix: "/v1/openapi.json", stability: "stable"}
	apiAreas       = []*apiArea{areaCategories, areaPets, areaStore, areaDocument}
)

// holds reports whether path is in the area.
func (a *apiArea) holds(path string) bool {
	rest, ok := strings.CutPrefix(path, a.prefix)
	return ok && (rest == "" || rest[0] == '/')
}

// areaOf returns the area that path is in, or nil.
func areaOf(path string) *apiArea {
	for _, a := range apiAreas {
		if a.holds(path) {
			return a
		}
	}
	return nil
}

// areaHeaders marks the responses of the API's areas, errors included:
// X-API-Stability on an area that is not stable, and the deprecation
// headers on a deprecated route's. The area is the one the path is in,
// which is the area of every route there (TestRouteFacts); in an area
// with a deprecated route it asks the router which route the request
// takes (a PATCH beside a deprecated GET is not deprecated, nor is a
// request that no route takes: a 404, a 405). It runs before the limiter,
// so a 429 carries them too.
func areaHeaders(d deprecation, rt *router) func(http.Handler) http.Handler {
	// The value of X-API-Stability by area, made once (none for a stable
	// one), and the areas that have a deprecated route.
	stability, deprecates := map[*apiArea][]string{}, map[*apiArea]bool{}
	for _, a := range apiAreas {
		if a.stability != "stable" {
			stability[a] = []string{a.stability}
		}
	}
	for _, f := range rt.facts {
		deprecates[f.area] = deprecates[f.area] || f.deprecated
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if a := areaOf(r.URL.Path); a != nil {
				if v := stability[a]; v != nil {
					w.Header()["X-Api-Stability"] = v
				}
				if deprecates[a] {
					if m := rt.match(r); m != nil && m.deprecated {
						d.headers(w.Header())
					}
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}
