package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestNosniffOnEveryResponse: every answer of both listeners, whatever
// gave it (a handler, the router, the limiter, CORS, the docs page, the
// idempotency layer), carries X-Content-Type-Options: nosniff once, so
// that no browser reads a body (a 404's echoes the path) as HTML.
func TestNosniffOnEveryResponse(t *testing.T) {
	db := testDB(t)
	key := createKey(t, db, "--plan", "business", "--name", "test")
	readOnly := createKey(t, db, "--plan", "business", "--scope", "read")
	ts := startServerOn(t, db, key, "--cors-origins", "https://app.example.test", "--anon-rpm", "3")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	type exchange struct {
		what   string
		status int
		r      response
	}
	var got []exchange
	add := func(what string, status int, r response) { got = append(got, exchange{what, status, r}) }
	do := func(what string, status int, method, path, key, body string, header ...string) response {
		r := ts.do(t, method, path, key, body, header...)
		add(what, status, r)
		return r
	}

	list := do("200 list", 200, "GET", "/v1/categories", key, "")
	do("304 list", 304, "GET", "/v1/categories", key, "", "If-None-Match", list.header.Get("ETag"))
	do("200 HEAD", 200, "HEAD", "/v1/categories", key, "")
	do("201 create", 201, "POST", "/v1/categories", key, `{"name":"Dog"}`, "Idempotency-Key", "k1")
	do("201 replay", 201, "POST", "/v1/categories", key, `{"name":"Dog"}`, "Idempotency-Key", "k1")
	do("409 conflict", 409, "POST", "/v1/categories", key, `{"name":"dog"}`)
	do("422 key reused", 422, "POST", "/v1/categories", key, `{"name":"Cat"}`, "Idempotency-Key", "k1")
	do("400 bad JSON", 400, "POST", "/v1/categories", key, `{"name":`)
	do("403 read-only key", 403, "POST", "/v1/categories", readOnly, `{"name":"Cat"}`)
	do("413 too large", 413, "POST", "/v1/categories", key, `{"name":"`+strings.Repeat("x", maxBodyBytes)+`"}`)
	do("415 not JSON", 415, "POST", "/v1/categories", key, `{"name":"Cat"}`, "Content-Type", "text/plain")
	do("404 no pet", 404, "GET", "/v1/pets/987654", key, "")
	do("404 no path", 404, "GET", "/v1/<script>", key, "")
	do("404 non-canonical path", 404, "GET", "/v1/./categories", key, "")
	do("405", 405, "DELETE", "/v1/categories", key, "")
	do("204 preflight", 204, "OPTIONS", "/v1/categories", "", "",
		"Origin", "https://app.example.test", "Access-Control-Request-Method", "POST")
	do("200 document", 200, "GET", "/v1/openapi.json", "", "")
	do("401", 401, "GET", "/v1/categories", "", "")
	do("401 again", 401, "GET", "/v1/categories", "", "")
	do("429", 429, "GET", "/v1/categories", "", "")
	docs := do("200 docs", 200, "GET", "/docs", "", "")
	do("304 docs", 304, "GET", "/docs", "", "", "If-None-Match", docs.header.Get("ETag"))
	do("200 docs script", 200, "GET", "/docs/docs.js", "", "")
	do("404 docs", 404, "GET", "/docs/nope.js", "", "")
	r, err := ts.sendVia(noRedirect, "GET", "/docs/", "", "")
	if err != nil {
		t.Fatal(err)
	}
	add("308 docs/", 308, r)
	do("200 healthz", 200, "GET", "/healthz", "", "")
	do("200 readyz", 200, "GET", "/readyz", "", "")
	admin := &testServer{client: http.DefaultClient, base: ts.admin}
	add("admin 200 metrics", 200, admin.do(t, "GET", "/metrics", "", ""))
	add("admin 200 healthz", 200, admin.do(t, "GET", "/healthz", "", ""))
	add("admin 404", 404, admin.do(t, "GET", "/v1/categories", "", ""))
	add("admin 405", 405, admin.do(t, "POST", "/metrics", "", ""))

	for _, e := range got {
		if e.r.status != e.status {
			t.Errorf("%s: status %d, want %d; %s", e.what, e.r.status, e.status, e.r.body)
		}
		if v := e.r.header.Values("X-Content-Type-Options"); !slices.Equal(v, []string{"nosniff"}) {
			t.Errorf("%s (%d): X-Content-Type-Options %q, want nosniff once", e.what, e.r.status, v)
		}
	}
}

func TestRequestID(t *testing.T) {
	ts := startServer(t)
	r := ts.do(t, "GET", "/healthz", "", "", "X-Request-Id", "client-id.42:x_y")
	if got := r.header.Get("X-Request-Id"); got != "client-id.42:x_y" {
		t.Errorf("sane id: X-Request-Id = %q, want it echoed", got)
	}
	for _, bad := range []string{"has space", strings.Repeat("a", 129), "semi;colon", "<script>"} {
		r := ts.do(t, "GET", "/v1/categories", ts.key, "", "X-Request-Id", bad)
		if got := r.header.Get("X-Request-Id"); got == "" || got == bad {
			t.Errorf("id %q: X-Request-Id = %q, want a fresh one", bad, got)
		}
	}
	a := ts.do(t, "GET", "/nowhere", "", "").header.Get("X-Request-Id")
	b := ts.do(t, "GET", "/nowhere", "", "").header.Get("X-Request-Id")
	if a == "" || a == b {
		t.Errorf("generated ids %q and %q, want distinct", a, b)
	}
}
