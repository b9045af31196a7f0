package main

import "testing"

// TestMalformedQueryIs400 checks that a filter or page parameter that does
// not parse, or is given twice, is refused, not dropped: the client would
// get the whole list, or another part of it, than it asked for.
func TestMalformedQueryIs400(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Cat"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Tom","categoryId":2}`)
	for _, path := range []string{"/v1/pets?categoryId=2%", "/v1/pets?categoryId=%zz", "/v1/pets?categoryId=2;x=1",
		"/v1/pets?status=%zz", "/v1/categories?limit=%zz", "/v1/categories?limit=1;x",
		// Given twice, the second value would be dropped, bad or not.
		"/v1/pets?status=available&status=lost", "/v1/pets?status=available&status=pending",
		"/v1/pets?categoryId=1&categoryId=dog", "/v1/categories?limit=1&limit=abc",
		"/v1/categories?after_id=1&after_id=2"} {
		wantError(t, ts.do(t, "GET", path, ts.key, ""), 400, "validation_failed")
	}
	if got := decode[[]Pet](t, ts.do(t, "GET", "/v1/pets?categoryId=2", ts.key, "")); len(got) != 1 || got[0].Name != "Tom" {
		t.Errorf("a well-formed filter: %v", got)
	}
}

// TestIntegersAreDigitsOnly: every integer of a query or a path is
// decimal digits, no sign (issue 41): strconv.ParseInt alone took
// after_id=+1 and limit=-0.
func TestIntegersAreDigitsOnly(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	for _, path := range []string{"/v1/categories?after_id=%2B1", "/v1/categories?after_id=-0", "/v1/categories?after_id=",
		"/v1/categories?limit=-0", "/v1/categories?limit=%2B5", "/v1/categories?limit=%205", "/v1/categories?limit=5%20",
		"/v1/pets?categoryId=%2B1", "/v1/pets/%2B1", "/v1/pets/-0", "/v1/pets/0x1"} {
		wantError(t, ts.do(t, "GET", path, ts.key, ""), 400, "validation_failed")
	}
	for _, path := range []string{"/v1/categories?after_id=0", "/v1/categories?limit=005", "/v1/pets?categoryId=01", "/v1/pets/1"} {
		if r := ts.do(t, "GET", path, ts.key, ""); r.status != 200 {
			t.Errorf("GET %s: %d %s, want 200", path, r.status, r.body)
		}
	}
}
