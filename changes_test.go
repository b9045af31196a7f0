package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestPetAndOrderChanges (either store): PUT and DELETE of a pet, GET,
// HEAD and DELETE of an order through the real server: the strong ETag
// of every answer that shows one row, If-Match (a stale one 412, `*`, a
// list, a weak tag), the create's rules and defaults on PUT, 409 while an
// order names the pet, a second DELETE 404, an Idempotency-Key ignored,
// PATCH still 405.
func TestPetAndOrderChanges(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Cat"}`)
	r := ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1,"status":"sold"}`, "Idempotency-Key", "k1")
	if r.status != 201 || r.header.Get("ETag") != `"1"` {
		t.Fatalf("create: %d %s, ETag %q", r.status, r.body, r.header.Get("ETag"))
	}
	r = ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1,"status":"sold"}`, "Idempotency-Key", "k1")
	if r.header.Get("Idempotency-Replayed") != "true" || r.header.Get("ETag") != `"1"` {
		t.Errorf("replayed create: ETag %q, replayed %q", r.header.Get("ETag"), r.header.Get("Idempotency-Replayed"))
	}
	if r := ts.do(t, "GET", "/v1/pets/1", ts.key, ""); r.header.Get("ETag") != `"1"` {
		t.Errorf("GET: ETag %q", r.header.Get("ETag"))
	}

	put := func(body string, header ...string) response {
		return ts.do(t, "PUT", "/v1/pets/1", ts.key, body, header...)
	}
	// No If-Match: the last write wins; status takes the create's default.
	r = put(`{"name":" Max ","categoryId":2}`, "Idempotency-Key", `"unterminated`)
	if r.status != 200 || string(r.body) != `{"id":1,"name":"Max","categoryId":2,"status":"available"}`+"\n" || r.header.Get("ETag") != `"2"` ||
		r.header.Get("X-API-Stability") != "beta" || r.header.Get("Deprecation") != "" {
		t.Errorf("PUT: %d %s, ETag %q, X-API-Stability %q, Deprecation %q", r.status, r.body, r.header.Get("ETag"), r.header.Get("X-API-Stability"), r.header.Get("Deprecation"))
	}
	stale := put(`{"name":"Old","categoryId":1}`, "If-Match", `"1"`)
	wantError(t, stale, 412, "precondition_failed")
	// On PostgreSQL a 412 carries the token of its batch's commit, so that
	// the read it asks for (the row's new ETag) sees the row as it is now,
	// from a replica too.
	if got := stale.header.Get(readAfterHeader) != ""; got != isPostgresURL(ts.db) {
		t.Errorf("412: %s %q on %s", readAfterHeader, stale.header.Get(readAfterHeader), ts.db)
	}
	wantError(t, put(`{"name":"Weak","categoryId":1}`, "If-Match", `W/"2"`), 412, "precondition_failed")
	if r := put(`{"name":"Listed","categoryId":1}`, "If-Match", `"9", "2"`); r.status != 200 || r.header.Get("ETag") != `"3"` {
		t.Errorf("PUT with a list naming the version: %d %s", r.status, r.body)
	}
	if r := put(`{"name":"Any","categoryId":1,"status":"pending"}`, "If-Match", "*"); r.status != 200 || r.header.Get("ETag") != `"4"` {
		t.Errorf("PUT with *: %d %s", r.status, r.body)
	}
	if got := decode[Pet](t, ts.do(t, "GET", "/v1/pets/1", ts.key, "")); got.Name != "Any" || got.Status != "pending" {
		t.Errorf("after the PUTs: %+v (a refused PUT changed the pet?)", got)
	}
	wantError(t, put(`{"name":"Ghost","categoryId":9}`), 400, "validation_failed")
	wantError(t, put(`{"name":"Ghost"}`), 400, "validation_failed")
	wantError(t, put(`{"name":"Ghost","categoryId":1,"age":1}`), 400, "validation_failed")
	wantError(t, ts.do(t, "PUT", "/v1/pets/99", ts.key, `{"name":"Ghost","categoryId":1}`), 404, "not_found")
	wantError(t, ts.do(t, "PUT", "/v1/pets/x", ts.key, `{"name":"Ghost","categoryId":1}`), 400, "validation_failed")
	r = ts.do(t, "PATCH", "/v1/pets/1", ts.key, `{"status":"sold"}`)
	wantError(t, r, 405, "method_not_allowed")
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "PUT") || !strings.Contains(allow, "DELETE") || r.header.Get("Deprecation") != "" {
		t.Errorf("PATCH: Allow %q, Deprecation %q", allow, r.header.Get("Deprecation"))
	}

	r = ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":2}`)
	if r.status != 201 || r.header.Get("ETag") != `"1"` {
		t.Fatalf("order: %d %s, ETag %q", r.status, r.body, r.header.Get("ETag"))
	}
	r = ts.do(t, "GET", "/v1/store/orders/1", ts.key, "")
	if o := decode[Order](t, r); o.ID != 1 || o.PetID != 1 || o.Quantity != 2 || r.header.Get("ETag") != `"1"` || r.header.Get("X-API-Stability") != "experimental" {
		t.Errorf("GET order: %+v, ETag %q", o, r.header.Get("ETag"))
	}
	if r := ts.do(t, "HEAD", "/v1/store/orders/1", ts.key, ""); r.status != 200 || len(r.body) != 0 || r.header.Get("ETag") != `"1"` {
		t.Errorf("HEAD order: %d %q, ETag %q", r.status, r.body, r.header.Get("ETag"))
	}
	wantError(t, ts.do(t, "DELETE", "/v1/pets/1", ts.key, ""), 409, "conflict")
	wantError(t, ts.do(t, "DELETE", "/v1/store/orders/1", ts.key, "", "If-Match", `"2"`), 412, "precondition_failed")
	if r := ts.do(t, "DELETE", "/v1/store/orders/1", ts.key, "", "If-Match", `"1"`); r.status != 204 || len(r.body) != 0 || r.header.Get("X-API-Stability") != "experimental" {
		t.Errorf("DELETE order: %d %s, X-API-Stability %q", r.status, r.body, r.header.Get("X-API-Stability"))
	}
	wantError(t, ts.do(t, "DELETE", "/v1/store/orders/1", ts.key, ""), 404, "not_found")
	wantError(t, ts.do(t, "GET", "/v1/store/orders/1", ts.key, ""), 404, "not_found")
	wantError(t, ts.do(t, "DELETE", "/v1/pets/1", ts.key, "", "If-Match", `"3"`), 412, "precondition_failed")
	if r := ts.do(t, "DELETE", "/v1/pets/1", ts.key, "", "Idempotency-Key", "k2"); r.status != 204 {
		t.Errorf("DELETE pet: %d %s", r.status, r.body)
	}
	wantError(t, ts.do(t, "DELETE", "/v1/pets/1", ts.key, "", "Idempotency-Key", "k2"), 404, "not_found")
	wantError(t, ts.do(t, "GET", "/v1/pets/1", ts.key, ""), 404, "not_found")
	if r := ts.do(t, "GET", "/v1/pets", ts.key, ""); string(r.body) != "[]\n" {
		t.Errorf("the list after the delete: %s", r.body)
	}
	// A new pet never takes the deleted one's id.
	if p := decode[Pet](t, ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Kit","categoryId":1}`)); p.ID != 2 {
		t.Errorf("a pet after the delete got id %d, want 2", p.ID)
	}
}

// TestIfMatchReadsStrongTags: If-Match as the stores take it. A strong
// tag's version counts only when its octets are the ETag's (no sign, no
// leading zero); weak and malformed tags name none; * or no header, any.
func TestIfMatchReadsStrongTags(t *testing.T) {
	for _, c := range []struct {
		headers []string
		want    string
	}{
		{nil, ""},
		{[]string{"*"}, ""},
		{[]string{`"3"`}, ",3,"},
		{[]string{`"3", "4"`, `"7"`}, ",3,4,7,"},
		{[]string{`"+3"`, `"03"`, `"-3"`, `" 3"`, `"0"`}, ","},
		{[]string{`W/"3"`, `3`, `"3`, `""`}, ","},
		{[]string{`"x", *`}, ""},
	} {
		r, _ := http.NewRequest("PUT", "/v1/pets/1", nil)
		for _, h := range c.headers {
			r.Header.Add("If-Match", h)
		}
		if got := ifMatch(r); got != c.want {
			t.Errorf("If-Match %q: %q, want %q", c.headers, got, c.want)
		}
	}
}
