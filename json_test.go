package main

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestNullIsAWrongType sends null for each field of each body: 400
// validation_failed naming the field, where the same body with the field
// left out or given a value is taken (DECISIONS.md section 18: the
// schemas declare no nullable field).
func TestNullIsAWrongType(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	for _, tt := range []struct {
		path, field, body, taken string
	}{
		{"/v1/categories", "name", `{"name":null}`, `{"name":"n0"}`},
		{"/v1/categories", "description", `{"name":"n1","description":null}`, `{"name":"n1"}`},
		{"/v1/pets", "name", `{"name":null,"categoryId":1}`, `{"name":"Rex","categoryId":1}`},
		{"/v1/pets", "categoryId", `{"name":"Rex","categoryId":null}`, `{"name":"Rex","categoryId":1}`},
		{"/v1/pets", "status", `{"name":"Rex","categoryId":1,"status":null}`, `{"name":"Rex","categoryId":1}`},
		{"/v1/store/orders", "petId", `{"petId":null,"quantity":1}`, `{"petId":1,"quantity":1}`},
		{"/v1/store/orders", "quantity", `{"quantity":null,"petId":1}`, `{"petId":1,"quantity":1}`},
	} {
		t.Run(tt.path+" "+tt.field, func(t *testing.T) {
			r := ts.do(t, "POST", tt.path, ts.key, tt.body)
			wantError(t, r, 400, "validation_failed")
			if e := decode[apiError](t, r); !strings.HasPrefix(e.Message, tt.field+" must be ") || !strings.HasSuffix(e.Message, ", not null") {
				t.Errorf("message %q, want it to name %s and null", e.Message, tt.field)
			}
			if r := ts.do(t, "POST", tt.path, ts.key, tt.taken); r.status != 201 {
				t.Errorf("without the null, %s: %d %s, want 201", tt.taken, r.status, r.body)
			}
		})
	}
}

// TestIntegerFieldsTakeIntegerNumbers sends integer fields written in each
// way JSON allows: any number whose exact value is an integer within the
// field's range is taken, as JSON Schema counts it; a fraction, however
// small, or a value beyond int64 is 400 naming the field. Path and query
// integers stay decimal digits.
func TestIntegerFieldsTakeIntegerNumbers(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	for _, tt := range []struct {
		quantity string
		want     int64
	}{
		{"1.0", 1}, {"1e0", 1}, {"1E+0", 1}, {"100e-2", 1}, {"0.1e1", 1}, {"10000000000000000000000e-22", 1},
		{"1e2", 100}, {"1.00e2", 100}, {"0.000000000000000000000000000001e32", 100}, {"7.0000000000000000000000", 7},
	} {
		r := ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1.0,"quantity":`+tt.quantity+`}`)
		if r.status != 201 {
			t.Errorf("quantity %s: %d %s, want 201", tt.quantity, r.status, r.body)
			continue
		}
		if o := decode[Order](t, r); o.Quantity != tt.want || o.PetID != 1 {
			t.Errorf("quantity %s: order %+v, want quantity %d of pet 1", tt.quantity, o, tt.want)
		}
	}
	if r := ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Tom","categoryId":1e0}`); r.status != 201 || decode[Pet](t, r).CategoryID != 1 {
		t.Errorf("categoryId 1e0: %d %s, want 201 in category 1", r.status, r.body)
	}

	for _, tt := range []struct{ body, message string }{
		{`{"petId":1,"quantity":1.5}`, "quantity must be an integer"},
		{`{"petId":1,"quantity":1.00000000000000000001}`, "quantity must be an integer"},
		{`{"petId":1,"quantity":1e-400}`, "quantity must be an integer"},
		{`{"petId":1,"quantity":100.5e-2}`, "quantity must be an integer"},
		{`{"petId":1,"quantity":"1"}`, "quantity must be an integer"},
		{`{"petId":1,"quantity":1e2.5}`, ""}, // not JSON: invalid_json
		{`{"petId":1,"quantity":1e3}`, "quantity must be 1 to 100, got 1000"},
		{`{"petId":1,"quantity":-0.0}`, "quantity must be 1 to 100, got 0"},
		{`{"petId":9223372036854775808,"quantity":1}`, "petId must be an integer from -9223372036854775808 to 9223372036854775807"},
		{`{"petId":1e19,"quantity":1}`, "petId must be an integer from -9223372036854775808 to 9223372036854775807"},
		{`{"petId":1e999999999999,"quantity":1}`, "petId must be an integer from -9223372036854775808 to 9223372036854775807"},
		{`{"petId":1e-999999999999,"quantity":1}`, "petId must be an integer"},
		{`{"petId":-9223372036854775808,"quantity":1}`, "petId must be a positive integer"},
		{`{"petId":9223372036854775807,"quantity":1}`, "petId 9223372036854775807 does not name an existing pet"},
	} {
		start := time.Now()
		r := ts.do(t, "POST", "/v1/store/orders", ts.key, tt.body)
		if tt.message == "" {
			wantError(t, r, 400, "invalid_json")
			continue
		}
		wantError(t, r, 400, "validation_failed")
		if e := decode[apiError](t, r); e.Message != tt.message {
			t.Errorf("%s: message %q, want %q", tt.body, e.Message, tt.message)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s took %v", tt.body, d)
		}
	}

	for _, path := range []string{"/v1/pets/1.0", "/v1/pets/1e0", "/v1/pets?categoryId=1.0", "/v1/pets?categoryId=1e0", "/v1/categories?limit=1.0", "/v1/categories?after_id=0e0"} {
		wantError(t, ts.do(t, "GET", path, ts.key, ""), 400, "validation_failed")
	}
}

// TestParseJSONInt checks the integer literal arithmetic against the
// values it must give, at the edges of int64 and of exactness.
func TestParseJSONInt(t *testing.T) {
	for _, tt := range []struct {
		lit  string
		want int64
		err  error
	}{
		{"0", 0, nil}, {"-0", 0, nil}, {"0.0e-99999", 0, nil}, {"0e999999999999999999999", 0, nil},
		{"1", 1, nil}, {"1.0", 1, nil}, {"1e0", 1, nil}, {"100e-2", 1, nil}, {"0.01e2", 1, nil},
		{"-7.000", -7, nil}, {"12.5e1", 125, nil}, {"1.25e2", 125, nil},
		{"9223372036854775807", math.MaxInt64, nil}, {"9.223372036854775807e18", math.MaxInt64, nil},
		{"-9223372036854775808", math.MinInt64, nil}, {"-92233720368547758080e-1", math.MinInt64, nil},
		{"9223372036854775808", 0, errIntRange}, {"-9223372036854775809", 0, errIntRange},
		{"9999999999999999999", 0, errIntRange}, {"10000000000000000000", 0, errIntRange},
		{"1e19", 0, errIntRange}, {"1e18", 1e18, nil}, {"1e999999999999999999", 0, errIntRange},
		{"1.5", 0, errNotInteger}, {"1.00000000000000000001", 0, errNotInteger}, {"9007199254740993.5", 0, errNotInteger},
		{"1e-1", 0, errNotInteger}, {"10e-2", 0, errNotInteger}, {"1e-999999999999999999", 0, errNotInteger},
		{"", 0, errNotNumber}, {"-", 0, errNotNumber}, {"1.", 0, errNotNumber}, {".5", 0, errNotNumber},
		{"1e", 0, errNotNumber}, {"1e+", 0, errNotNumber}, {"1x", 0, errNotNumber}, {`"1"`, 0, errNotNumber},
	} {
		got, err := parseJSONInt([]byte(tt.lit))
		if got != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("parseJSONInt(%q) = %d, %v; want %d, %v", tt.lit, got, err, tt.want, tt.err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { parseJSONInt([]byte("12.5e1")) }); n != 0 {
		t.Errorf("parseJSONInt allocates %v times", n)
	}
}

// TestBodyFieldsArePointers checks that every field of every request body
// is a pointer, which is how decodeBody tells a null (left nil, refused)
// from a value: a non-pointer field would take a null silently.
func TestBodyFieldsArePointers(t *testing.T) {
	for _, body := range []any{newCategory{}, newPet{}, newOrder{}} {
		for f := range reflect.TypeOf(body).Fields() {
			if f.Type.Kind() != reflect.Pointer {
				t.Errorf("%T.%s is %v, not a pointer", body, f.Name, f.Type)
			}
		}
	}
}

// TestLoneSurrogateIs400: a string whose \u escapes hold half a UTF-16
// pair is 400 invalid_json (encoding/json would store U+FFFD); a whole
// pair, and an escaped backslash before "ud800", are fine.
func TestLoneSurrogateIs400(t *testing.T) {
	ts := startServer(t)
	for _, body := range []string{`{"name":"\ud800"}`, `{"name":"a\udc00"}`, `{"name":"\uD800x"}`, `{"name":"\ud800\ud800\udc00"}`,
		`{"name":"\udc00\ud800"}`, `{"name":"Dog","x\ud800":1}`} {
		wantError(t, ts.do(t, "POST", "/v1/categories", ts.key, body), 400, "invalid_json")
	}
	for i, body := range []string{`{"name":"\ud83d\ude00"}`, `{"name":"\\ud800"}`, `{"name":"\u00e9\"\\\/x"}`} {
		if r := ts.do(t, "POST", "/v1/categories", ts.key, body); r.status != 201 {
			t.Errorf("%d: %s: %d %s, want 201", i, body, r.status, r.body)
		}
	}
	for s, want := range map[string]bool{`"\ud800"`: true, `"\\ud800"`: false, `"\\\ud800"`: true, `"\ud83d\ude00"`: false,
		`"\ud83d\u0041"`: true, `"\ud83d`: true, `"\u12"`: false, `"\u00410"`: false, `"\udfff"`: true, `"\ud83d\ude00\udc00"`: true} {
		if got := loneSurrogate([]byte(s)); got != want {
			t.Errorf("loneSurrogate(%s) = %v, want %v", s, got, want)
		}
	}
}
