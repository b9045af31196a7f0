package main

import (
	"maps"
	"strings"
	"testing"
	"time"
)

func TestOrders(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)

	before := time.Now().UTC().Truncate(time.Second)
	r := ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":3}`)
	if r.status != 201 {
		t.Fatalf("create order: %d %s", r.status, r.body)
	}
	o := decode[Order](t, r)
	created, err := time.Parse(time.RFC3339, o.CreatedAt)
	if o.ID != 1 || o.PetID != 1 || o.Quantity != 3 || o.Status != "placed" || err != nil ||
		!strings.HasSuffix(o.CreatedAt, "Z") || created.Before(before) || created.After(time.Now()) {
		t.Errorf("order = %+v (createdAt %v), want id 1, pet 1, 3, placed, now in UTC", o, err)
	}
	if got := r.header.Get("X-API-Stability"); got != "experimental" {
		t.Errorf("X-API-Stability = %q, want experimental", got)
	}
	ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":100}`)
	list := decode[[]Order](t, ts.do(t, "GET", "/v1/store/orders", ts.key, ""))
	if len(list) != 2 || list[0].ID != 1 || list[1].ID != 2 || list[1].Quantity != 100 {
		t.Errorf("orders = %+v", list)
	}

	for _, tt := range []struct{ name, body string }{
		{"missing pet", `{"petId":9,"quantity":1}`},
		{"zero quantity", `{"petId":1,"quantity":0}`},
		{"too many", `{"petId":1,"quantity":101}`},
		{"no quantity", `{"petId":1}`},
		{"no pet", `{"quantity":1}`},
		{"text quantity", `{"petId":1,"quantity":"1"}`},
		{"fractional quantity", `{"petId":1,"quantity":1.5}`},
		{"status given", `{"petId":1,"quantity":1,"status":"placed"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/store/orders", ts.key, tt.body)
			wantError(t, r, 400, "validation_failed")
			if got := r.header.Get("X-API-Stability"); got != "experimental" {
				t.Errorf("X-API-Stability = %q, want experimental", got)
			}
		})
	}
	if r := ts.do(t, "GET", "/v1/store/orders", "", ""); r.header.Get("X-API-Stability") != "experimental" || r.status != 401 {
		t.Errorf("401 of the store: status %d, X-API-Stability %q", r.status, r.header.Get("X-API-Stability"))
	}
	if r := ts.do(t, "GET", "/v1/categories", ts.key, ""); r.header.Get("X-API-Stability") != "" {
		t.Errorf("categories carry X-API-Stability %q, want none", r.header.Get("X-API-Stability"))
	}
}

// TestInventory counts pets by status on either store, every status named,
// and answers HEAD as GET without the body.
func TestInventory(t *testing.T) {
	ts := startServer(t)
	want := func(r response, counts map[string]int64) {
		t.Helper()
		if r.status != 200 || r.header.Get("X-API-Stability") != "experimental" {
			t.Fatalf("inventory: %d (X-API-Stability %q) %s", r.status, r.header.Get("X-API-Stability"), r.body)
		}
		if got := decode[map[string]int64](t, r); !maps.Equal(got, counts) {
			t.Errorf("inventory = %v, want %v", got, counts)
		}
	}
	want(ts.do(t, "GET", "/v1/store/inventory", ts.key, ""), map[string]int64{"available": 0, "pending": 0, "sold": 0})

	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	for _, pet := range []string{`{"name":"Rex","categoryId":1}`, `{"name":"Fido","categoryId":1,"status":"available"}`,
		`{"name":"Max","categoryId":1,"status":"sold"}`, `{"name":"Bo","categoryId":1,"status":"bogus"}`} {
		ts.do(t, "POST", "/v1/pets", ts.key, pet)
	}
	get := ts.do(t, "GET", "/v1/store/inventory", ts.key, "")
	want(get, map[string]int64{"available": 2, "pending": 0, "sold": 1})

	head := ts.do(t, "HEAD", "/v1/store/inventory", ts.key, "")
	if head.status != 200 || len(head.body) != 0 || head.header.Get("Content-Type") != get.header.Get("Content-Type") {
		t.Errorf("HEAD: %d, %d bytes, Content-Type %q", head.status, len(head.body), head.header.Get("Content-Type"))
	}
	wantError(t, ts.do(t, "GET", "/v1/store/inventory", "", ""), 401, "unauthorized")
}
