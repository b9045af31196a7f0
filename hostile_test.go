package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// hostileTimeout bounds every exchange of TestHostileRequests: a request
// that gets no answer (and no close) within it counts as a hang.
const hostileTimeout = 5 * time.Second

// hostileReadTimeout is the --read-timeout of the server under attack, so
// that a body that never ends is cut off quickly.
const hostileReadTimeout = time.Second

// hostileCase is one malformed or hostile request and what must come back.
type hostileCase struct {
	name string

	// Sent through the contract-checking client unless raw is set.
	method, path string
	auth         bool     // send Authorization: Bearer ts.key
	header       []string // name, value pairs; a value "" removes the header
	body         []byte   // sent as application/json unless header says otherwise

	// raw is a whole request sent as is over a fresh TCP connection, for
	// what net/http's client would normalise or refuse. halfClose shuts
	// the sending side after it; stall keeps the connection open and silent.
	raw       []byte
	halfClose bool

	wantStatus int
	wantCode   string   // the Error code, for a status of 400 or more
	wantHeader []string // header names the response must carry

	// goLevel marks answers that net/http writes itself, before any of our
	// code runs, with a plain-text body: only the status is checked (and
	// that it is not a 5xx unless wantStatus is one).
	goLevel bool
	// mayClose accepts the server closing the connection without an answer.
	mayClose bool
	// within, if set, is how long the answer (or close) may take.
	within time.Duration
}

// hostileResult is what came back for one case.
type hostileResult struct {
	status  int
	header  http.Header
	body    []byte
	closed  bool // the connection ended without a response
	elapsed time.Duration
}

func TestHostileRequests(t *testing.T) {
	ts := startServer(t, "--anon-rpm", "100000", "--read-timeout", hostileReadTimeout.String())
	addr := strings.TrimPrefix(ts.base, "http://")
	key := ts.key

	// A category and a pet, so that validation fails for the reason a case
	// is about and not for a missing reference.
	if r := ts.do(t, "POST", "/v1/categories", key, `{"name":"Hostile seed"}`); r.status != 201 {
		t.Fatalf("seed category: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "POST", "/v1/pets", key, `{"name":"Rex","categoryId":1}`); r.status != 201 {
		t.Fatalf("seed pet: %d %s", r.status, r.body)
	}

	const (
		cats   = "/v1/categories"
		pets   = "/v1/pets"
		orders = "/v1/store/orders"
	)
	// post is an authenticated JSON POST through the checking client.
	post := func(name, path, body string, status int, code string) hostileCase {
		return hostileCase{name: name, method: "POST", path: path, auth: true, body: []byte(body), wantStatus: status, wantCode: code}
	}
	postH := func(name, path, body string, header []string, status int, code string) hostileCase {
		c := post(name, path, body, status, code)
		c.header = header
		return c
	}
	get := func(name, path string, auth bool, status int, code string) hostileCase {
		return hostileCase{name: name, method: "GET", path: path, auth: auth, wantStatus: status, wantCode: code}
	}
	raw := func(name string, req []byte, status int, code string) hostileCase {
		return hostileCase{name: name, raw: req, wantStatus: status, wantCode: code}
	}
	goRaw := func(name string, req []byte, status int) hostileCase {
		return hostileCase{name: name, raw: req, wantStatus: status, goLevel: true}
	}
	bearer := "Bearer " + key
	authH := []string{"Authorization", bearer}
	// rawAuth is a raw GET /v1/categories with the given Authorization value.
	rawAuth := func(name, value string, status int, code string) hostileCase {
		return raw(name, rawRequest("GET", cats, []string{"Authorization", value}, ""), status, code)
	}

	const ij, vf = "invalid_json", "validation_failed"
	big := func(n int) string { // a category body of exactly n bytes
		head, tail := `{"name":"big","description":"`, `"}`
		return head + strings.Repeat("d", n-len(head)-len(tail)) + tail
	}
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tenMB := `{"name":"huge","description":"` + strings.Repeat("x", 10<<20) + `"}`
	longKey := "ps_live_" + strings.Repeat("A", 10<<10)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:pass"))

	var manyHeaders []string
	for i := range 1000 {
		manyHeaders = append(manyHeaders, fmt.Sprintf("X-H-%d", i), "v")
	}

	cases := []hostileCase{
		// Broken and truncated JSON.
		post("open brace only", cats, `{`, 400, ij),
		post("close brace only", cats, `}`, 400, ij),
		post("key only", cats, `{"name"`, 400, ij),
		post("key and colon", cats, `{"name":`, 400, ij),
		post("no closing brace", cats, `{"name":"Dog"`, 400, ij),
		post("trailing comma", cats, `{"name":"Dog",}`, 400, ij),
		post("single quotes", cats, `{'name':'Dog'}`, 400, ij),
		post("unquoted key", cats, `{name:"Dog"}`, 400, ij),
		post("mismatched bracket", cats, `{"name":"Dog"]`, 400, ij),
		post("extra closing brace", cats, `{"name":"Dog"}}`, 400, ij),
		post("invalid escape", cats, `{"name":"Do\g"}`, 400, ij),
		post("short unicode escape", cats, `{"name":"Dog\u12"}`, 400, ij),
		post("trailing garbage", cats, `{"name":"Dog"}x`, 400, ij),
		post("two objects", cats, `{"name":"Dog"}{"name":"Cat"}`, 400, ij),
		post("white space only", cats, " \n\t ", 400, ij),
		post("array", cats, `[]`, 400, ij),
		post("string", cats, `"Dog"`, 400, ij),
		post("number", cats, `42`, 400, ij),
		post("null", cats, `null`, 400, ij),
		post("true", cats, `true`, 400, ij),
		post("byte order mark", cats, "\xef\xbb\xbf"+`{"name":"Dog"}`, 400, ij),
		post("trailing NUL", cats, `{"name":"Dog"}`+"\x00", 400, ij),
		post("raw NUL in string", cats, "{\"name\":\"Do\x00g\"}", 400, ij),
		post("leading NUL", cats, "\x00"+`{"name":"Dog"}`, 400, ij),
		post("missing comma", cats, `{"name":"Dog" "description":"x"}`, 400, ij),
		post("double comma", cats, `{"name":"Dog",,"description":"x"}`, 400, ij),
		post("truncated after spaces", cats, `{"name":"Dog"`+strings.Repeat(" ", 1000), 400, ij),
		post("unterminated string", cats, `{"name":"Dog","description":"x`, 400, ij),
		post("NaN", cats, `{"name":NaN}`, 400, ij),
		post("Infinity", cats, `{"name":Infinity}`, 400, ij),
		post("lone minus", cats, `{"name":-}`, 400, ij),
		post("leading zero", cats, `{"name":"Dog","description":01}`, 400, ij),
		post("comment before", cats, `/* c */{"name":"Dog"}`, 400, ij),
		post("comment after", cats, `{"name":"Dog"}//c`, 400, ij),

		// Duplicate keys, and keys that only differ in case (encoding/json
		// matches field names case-insensitively, so they smuggle a second
		// value into the same field).
		post("duplicate key", cats, `{"name":"a","name":"b"}`, 400, ij),
		post("duplicate key by escape", cats, `{"name":"a","n\u0061me":"b"}`, 400, ij),
		post("duplicate categoryId", pets, `{"name":"p","categoryId":1,"categoryId":2}`, 400, ij),
		post("duplicate quantity", orders, `{"petId":1,"quantity":1,"quantity":2}`, 400, ij),
		post("upper-case field name", cats, `{"NAME":"Case field"}`, 400, vf),
		post("name and Name", cats, `{"name":"a","Name":"b"}`, 400, vf),
		post("CategoryId", pets, `{"name":"p","CategoryId":1}`, 400, vf),
		post("PETID", orders, `{"PETID":1,"quantity":1}`, 400, vf),

		// Deep nesting.
		post("10,000 nested arrays in name", cats, `{"name":`+nest(10000)+`}`, 400, ij),
		post("5,000 nested objects in description", cats, `{"name":"n","description":`+strings.Repeat(`{"a":`, 5000)+"1"+strings.Repeat("}", 5000)+`}`, 400, ij),
		post("60,000 unclosed arrays", cats, `{"name":`+strings.Repeat("[", 60000), 400, ij),
		post("nesting 32 levels (the limit)", cats, `{"description":`+nest(31)+`}`, 400, vf),
		post("nesting 33 levels", cats, `{"description":`+nest(32)+`}`, 400, ij),
		post("10,000 nested arrays in categoryId", pets, `{"name":"p","categoryId":`+nest(10000)+`}`, 400, ij),
		post("10,000 nested arrays in quantity", orders, `{"petId":1,"quantity":`+nest(10000)+`}`, 400, ij),

		// Huge and odd numbers.
		post("name 1e400", cats, `{"name":1e400}`, 400, vf),
		post("description 1e400", cats, `{"name":"n","description":1e400}`, 400, vf),
		post("categoryId 1e400", pets, `{"name":"p","categoryId":1e400}`, 400, vf),
		post("categoryId 99999999999999999999", pets, `{"name":"p","categoryId":99999999999999999999}`, 400, vf),
		post("categoryId -99999999999999999999", pets, `{"name":"p","categoryId":-99999999999999999999}`, 400, vf),
		post("categoryId max int64, no such category", pets, `{"name":"p","categoryId":9223372036854775807}`, 400, vf),
		post("categoryId max int64 + 1", pets, `{"name":"p","categoryId":9223372036854775808}`, 400, vf),
		post("categoryId 1.5", pets, `{"name":"p","categoryId":1.5}`, 400, vf),
		post("categoryId 0", pets, `{"name":"p","categoryId":0}`, 400, vf),
		post("categoryId -1", pets, `{"name":"p","categoryId":-1}`, 400, vf),
		post("petId 1e400", orders, `{"petId":1e400,"quantity":1}`, 400, vf),
		post("quantity 99999999999999999999", orders, `{"petId":1,"quantity":99999999999999999999}`, 400, vf),
		post("quantity 101", orders, `{"petId":1,"quantity":101}`, 400, vf),
		post("quantity 0", orders, `{"petId":1,"quantity":0}`, 400, vf),
		post("quantity -1", orders, `{"petId":1,"quantity":-1}`, 400, vf),
		post("quantity -0", orders, `{"petId":1,"quantity":-0}`, 400, vf),
		post("quantity 1.5", orders, `{"petId":1,"quantity":1.5}`, 400, vf),
		post("quantity of 10,000 digits", orders, `{"petId":1,"quantity":`+strings.Repeat("9", 10000)+`}`, 400, vf),
		post("petId max int64, no such pet", orders, `{"petId":9223372036854775807,"quantity":1}`, 400, vf),

		// Wrong types, every field of POST /v1/categories.
		post("category name true", cats, `{"name":true}`, 400, vf),
		post("category name number", cats, `{"name":5}`, 400, vf),
		post("category name array", cats, `{"name":["a"]}`, 400, vf),
		post("category name object", cats, `{"name":{"a":1}}`, 400, vf),
		post("category name null", cats, `{"name":null}`, 400, vf),
		post("category empty object", cats, `{}`, 400, vf),
		post("category description true", cats, `{"name":"n","description":true}`, 400, vf),
		post("category description number", cats, `{"name":"n","description":5}`, 400, vf),
		post("category description array", cats, `{"name":"n","description":[]}`, 400, vf),
		post("category description object", cats, `{"name":"n","description":{}}`, 400, vf),
		post("category id given", cats, `{"id":7,"name":"n"}`, 400, vf),

		// Wrong types, every field of POST /v1/pets.
		post("pet name number", pets, `{"name":5,"categoryId":1}`, 400, vf),
		post("pet name null", pets, `{"name":null,"categoryId":1}`, 400, vf),
		post("pet name array", pets, `{"name":[],"categoryId":1}`, 400, vf),
		post("pet categoryId string", pets, `{"name":"p","categoryId":"1"}`, 400, vf),
		post("pet categoryId true", pets, `{"name":"p","categoryId":true}`, 400, vf),
		post("pet categoryId array", pets, `{"name":"p","categoryId":[1]}`, 400, vf),
		post("pet categoryId object", pets, `{"name":"p","categoryId":{}}`, 400, vf),
		post("pet categoryId null", pets, `{"name":"p","categoryId":null}`, 400, vf),
		post("pet categoryId missing", pets, `{"name":"p"}`, 400, vf),
		post("pet categoryId unknown", pets, `{"name":"p","categoryId":999}`, 400, vf),
		post("pet status number", pets, `{"name":"p","categoryId":1,"status":5}`, 400, vf),
		post("pet status true", pets, `{"name":"p","categoryId":1,"status":true}`, 400, vf),
		post("pet status array", pets, `{"name":"p","categoryId":1,"status":["sold"]}`, 400, vf),
		post("pet status object", pets, `{"name":"p","categoryId":1,"status":{}}`, 400, vf),
		post("pet status upper case", pets, `{"name":"p","categoryId":1,"status":"AVAILABLE"}`, 400, vf),
		post("pet status empty", pets, `{"name":"p","categoryId":1,"status":""}`, 400, vf),
		post("pet status with NUL", pets, `{"name":"p","categoryId":1,"status":"sold\u0000"}`, 400, vf),
		post("pet id given", pets, `{"id":1,"name":"p","categoryId":1}`, 400, vf),

		// Wrong types, every field of POST /v1/store/orders.
		post("order petId string", orders, `{"petId":"1","quantity":1}`, 400, vf),
		post("order petId true", orders, `{"petId":true,"quantity":1}`, 400, vf),
		post("order petId array", orders, `{"petId":[1],"quantity":1}`, 400, vf),
		post("order petId object", orders, `{"petId":{},"quantity":1}`, 400, vf),
		post("order petId null", orders, `{"petId":null,"quantity":1}`, 400, vf),
		post("order petId unknown", orders, `{"petId":999,"quantity":1}`, 400, vf),
		post("order quantity string", orders, `{"petId":1,"quantity":"1"}`, 400, vf),
		post("order quantity true", orders, `{"petId":1,"quantity":true}`, 400, vf),
		post("order quantity array", orders, `{"petId":1,"quantity":[]}`, 400, vf),
		post("order quantity object", orders, `{"petId":1,"quantity":{}}`, 400, vf),
		post("order quantity null", orders, `{"petId":1,"quantity":null}`, 400, vf),
		post("order empty object", orders, `{}`, 400, vf),
		post("order status given", orders, `{"petId":1,"quantity":1,"status":"placed"}`, 400, vf),

		// NUL bytes, control characters and invalid UTF-8 in names.
		post("name escaped NUL", cats, `{"name":"\u0000"}`, 400, vf),
		post("name ending in escaped NUL", cats, `{"name":"a\u0000"}`, 400, vf),
		post("name C1 control", cats, `{"name":"a\u0085b"}`, 400, vf),
		post("name only white space", cats, `{"name":"\t\n \u00a0"}`, 400, vf),
		post("name 0xFF", cats, "{\"name\":\"a\xffb\"}", 400, ij),
		post("name overlong slash", cats, "{\"name\":\"\xc0\xaf\"}", 400, ij),
		post("name UTF-8 surrogate", cats, "{\"name\":\"\xed\xa0\x80\"}", 400, ij),
		post("name truncated sequence", cats, "{\"name\":\"\xe2\x82\"}", 400, ij),
		post("description 0xFE", cats, "{\"name\":\"n\",\"description\":\"\xfe\"}", 400, ij),
		post("key with escaped NUL", cats, `{"\u0000name":"x"}`, 400, vf),
		post("pet name escaped NUL", pets, `{"name":"p\u0000","categoryId":1}`, 400, vf),
		post("pet name 0xFF", pets, "{\"name\":\"\xff\",\"categoryId\":1}", 400, ij),

		// Content types.
		postH("no Content-Type", cats, `{"name":"Dog"}`, []string{"Content-Type", ""}, 415, "unsupported_media_type"),
		postH("text/plain", cats, `{"name":"Dog"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"),
		postH("form", cats, `name=Dog`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"),
		postH("two media types", cats, `{"name":"Dog"}`, []string{"Content-Type", "application/json, text/plain"}, 415, "unsupported_media_type"),
		postH("problem+json", cats, `{"name":"Dog"}`, []string{"Content-Type", "application/problem+json"}, 415, "unsupported_media_type"),
		postH("multipart", pets, `{"name":"Dog"}`, []string{"Content-Type", "multipart/form-data; boundary=x"}, 415, "unsupported_media_type"),
		postH("10 KiB Content-Type", orders, `{}`, []string{"Content-Type", strings.Repeat("a", 10<<10)}, 415, "unsupported_media_type"),

		// Sizes.
		post("body of exactly 64 KiB", cats, big(64<<10), 400, vf),
		post("body of 64 KiB + 1", cats, big(64<<10+1), 413, "payload_too_large"),
		post("10 MB category", cats, tenMB, 413, "payload_too_large"),
		post("10 MB pet", pets, tenMB, 413, "payload_too_large"),
		post("10 MB order", orders, tenMB, 413, "payload_too_large"),
		postH("10 MB text/plain", cats, tenMB, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"),
		{name: "10 MB without a key", method: "POST", path: cats, body: []byte(tenMB), wantStatus: 401, wantCode: "unauthorized"},
		raw("chunked body of 100 KB", rawChunked(cats, authH, []string{big(100 << 10)}, true), 413, "payload_too_large"),
		{name: "Content-Length 10 MB, 10 bytes sent, then silence", raw: rawRequest("POST", cats,
			[]string{"Authorization", bearer, "Content-Type", "application/json", "Content-Length", "10485760"}, `{"name":"x`),
			wantStatus: 413, wantCode: "payload_too_large", within: hostileReadTimeout + 2*time.Second},

		// Chunked bodies.
		{name: "chunked body that never ends", raw: rawChunked(cats, authH, []string{`{"name":`, `"never`, `ending`}, false),
			wantStatus: 400, wantCode: ij, mayClose: true, within: hostileReadTimeout + 2*time.Second},
		raw("chunked body, bad chunk size", []byte("POST "+cats+" HTTP/1.1\r\nHost: x\r\nAuthorization: "+bearer+
			"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"), 400, ij),
		raw("chunked body in three chunks", rawChunked(cats, authH, []string{`{"name":`, `"Chunked`, `"}`}, true), 201, ""),
		{name: "Content-Length 100, 5 bytes, then half-close", raw: rawRequest("POST", cats,
			[]string{"Authorization", bearer, "Content-Type", "application/json", "Content-Length", "100"}, `{"nam`),
			halfClose: true, wantStatus: 400, wantCode: ij},
		raw("POST without a body", rawRequest("POST", cats, []string{"Authorization", bearer, "Content-Type", "application/json", "Content-Length", "0"}, ""), 400, ij),
		raw("Content-Length and chunked", []byte("POST "+cats+" HTTP/1.1\r\nHost: x\r\nAuthorization: "+bearer+
			"\r\nContent-Type: application/json\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n"), 400, vf),
		goRaw("Content-Length abc", rawRequest("POST", cats, []string{"Authorization", bearer, "Content-Type", "application/json", "Content-Length", "abc"}, ""), 400),
		goRaw("Content-Length -1", rawRequest("POST", cats, []string{"Authorization", bearer, "Content-Type", "application/json", "Content-Length", "-1"}, ""), 400),
		goRaw("two different Content-Lengths", []byte("POST "+cats+" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\nConnection: close\r\n\r\n{}"), 400),
		goRaw("Transfer-Encoding gzip", []byte("POST "+cats+" HTTP/1.1\r\nHost: x\r\nAuthorization: "+bearer+
			"\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n"), 501),

		// Absurd headers.
		goRaw("40 KiB header", rawRequest("GET", cats, []string{"Authorization", bearer, "X-Big", strings.Repeat("a", 40<<10)}, ""), 431),
		{name: "1,000 headers", method: "GET", path: cats, auth: true, header: manyHeaders, wantStatus: 200},
		goRaw("header value with NUL", rawRequest("GET", cats, []string{"Authorization", bearer, "X-Test", "a\x00b"}, ""), 400),
		goRaw("header name with a space", rawRequest("GET", cats, []string{"Authorization", bearer, "Bad Header", "x"}, ""), 400),
		goRaw("header line without a colon", []byte("GET "+cats+" HTTP/1.1\r\nHost: x\r\nno colon here\r\nConnection: close\r\n\r\n"), 400),
		// net/http unfolds obs-fold continuation lines (RFC 9112 5.2 allows it).
		raw("obsolete line folding", []byte("GET "+cats+" HTTP/1.1\r\nHost: x\r\nX-A: a\r\n folded\r\nConnection: close\r\n\r\n"), 401, "unauthorized"),
		goRaw("HTTP/1.1 without Host", []byte("GET "+cats+" HTTP/1.1\r\nAuthorization: "+bearer+"\r\nConnection: close\r\n\r\n"), 400),
		goRaw("two Host headers", []byte("GET "+cats+" HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n"), 400),
		{name: "10 KiB X-Request-Id", method: "GET", path: cats, auth: true, header: []string{"X-Request-Id", strings.Repeat("r", 10<<10)}, wantStatus: 200},

		// Authorization variants.
		rawAuth("empty Authorization", "", 401, "unauthorized"),
		rawAuth("Bearer alone", "Bearer", 401, "unauthorized"),
		rawAuth("Bearer and a space", "Bearer ", 401, "unauthorized"),
		rawAuth("two spaces before the key", "Bearer  "+key, 401, "unauthorized"),
		rawAuth("Basic credentials", basic, 401, "unauthorized"),
		rawAuth("Basic with the key", "Basic "+key, 401, "unauthorized"),
		rawAuth("lower-case scheme", "bearer "+key, 200, ""),
		rawAuth("upper-case scheme", "BEARER "+key, 200, ""),
		rawAuth("tab separator", "Bearer\t"+key, 401, "unauthorized"),
		rawAuth("key with a trailing space (OWS, trimmed by HTTP)", "Bearer "+key+" ", 200, ""),
		rawAuth("key with a trailing tab (OWS, trimmed by HTTP)", "Bearer "+key+"\t", 200, ""),
		rawAuth("leading space (OWS)", " Bearer "+key, 200, ""),
		rawAuth("key without a scheme", key, 401, "unauthorized"),
		rawAuth("key with a suffix", bearer+"x", 401, "unauthorized"),
		rawAuth("key and another word", bearer+" extra", 401, "unauthorized"),
		rawAuth("10 KiB key", "Bearer "+longKey, 401, "unauthorized"),
		rawAuth("key of non-ASCII bytes", "Bearer ps_live_"+strings.Repeat("\xff", 40), 401, "unauthorized"),
		rawAuth("Token scheme", "Token "+key, 401, "unauthorized"),
		rawAuth("Bearer=key", "Bearer="+key, 401, "unauthorized"),
		rawAuth("Bearer,key", "Bearer,"+key, 401, "unauthorized"),
		rawAuth("Bearer Bearer key", "Bearer "+bearer, 401, "unauthorized"),
		rawAuth("staging key", "Bearer ps_test_"+strings.Repeat("a", 40), 401, "unauthorized"),
		raw("a bad then a good Authorization", []byte("GET "+cats+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nAuthorization: "+bearer+"\r\nConnection: close\r\n\r\n"), 401, "unauthorized"),
		raw("lower-case header name", []byte("GET "+cats+" HTTP/1.1\r\nHost: x\r\nauthorization: "+bearer+"\r\nConnection: close\r\n\r\n"), 200, ""),
		goRaw("space before the colon", []byte("GET "+cats+" HTTP/1.1\r\nHost: x\r\nAuthorization : "+bearer+"\r\nConnection: close\r\n\r\n"), 400),
		{name: "bad key and a broken body", method: "POST", path: cats, header: []string{"Authorization", "Bearer nope"}, body: []byte(`{"name":`), wantStatus: 401, wantCode: "unauthorized"},

		// Path tricks.
		raw("/v1/../v1/categories", rawRequest("GET", "/v1/../v1/categories", authH, ""), 404, "not_found"),
		raw("/v1/%2e%2e/v1/categories", rawRequest("GET", "/v1/%2e%2e/v1/categories", authH, ""), 404, "not_found"),
		raw("//v1/categories", rawRequest("GET", "//v1/categories", authH, ""), 404, "not_found"),
		raw("/v1/categories/", rawRequest("GET", "/v1/categories/", authH, ""), 404, "not_found"),
		raw("/v1/categories%00", rawRequest("GET", "/v1/categories%00", authH, ""), 404, "not_found"),
		raw("/v1/./categories", rawRequest("GET", "/v1/./categories", authH, ""), 404, "not_found"),
		raw("/v1//categories", rawRequest("GET", "/v1//categories", authH, ""), 404, "not_found"),
		raw("/v1/categories;x", rawRequest("GET", "/v1/categories;x", authH, ""), 404, "not_found"),
		raw("/v1/categories#frag", rawRequest("GET", "/v1/categories#frag", authH, ""), 404, "not_found"),
		raw("/V1/categories", rawRequest("GET", "/V1/categories", authH, ""), 404, "not_found"),
		raw("asterisk target", rawRequest("GET", "*", authH, ""), 404, "not_found"),
		raw("absolute-form target", rawRequest("GET", "http://elsewhere.example"+cats, authH, ""), 200, ""),
		raw("10 KB path", rawRequest("GET", "/v1/"+strings.Repeat("a", 10<<10), authH, ""), 404, "not_found"),
		goRaw("100 KB path", rawRequest("GET", "/v1/"+strings.Repeat("a", 100<<10), authH, ""), 431),
		{name: "/v1/pets/1%2F2", raw: rawRequest("GET", "/v1/pets/1%2F2", authH, ""), wantStatus: 400, wantCode: vf,
			wantHeader: []string{"Deprecation", "Sunset", "X-Api-Stability"}},
		get("pet id abc", "/v1/pets/abc", true, 400, vf),
		get("pet id 0", "/v1/pets/0", true, 400, vf),
		get("pet id -1", "/v1/pets/-1", true, 400, vf),
		get("pet id +1", "/v1/pets/+1", true, 400, vf),
		get("pet id 99999999999999999999", "/v1/pets/99999999999999999999", true, 400, vf),
		get("pet id 1e3", "/v1/pets/1e3", true, 400, vf),
		get("pet id space", "/v1/pets/%20", true, 400, vf),
		get("pet id unknown", "/v1/pets/999999", true, 404, "not_found"),
		raw("pet id with trailing slash", rawRequest("GET", "/v1/pets/1/", authH, ""), 404, "not_found"),
		get("categoryId filter abc", "/v1/pets?categoryId=abc", true, 400, vf),
		get("categoryId filter 1e400", "/v1/pets?categoryId=1e400", true, 400, vf),
		get("categoryId filter 0", "/v1/pets?categoryId=0", true, 400, vf),
		get("status filter upper case", "/v1/pets?status=AVAILABLE", true, 400, vf),
		get("status filter empty", "/v1/pets?status=", true, 400, vf),

		// Methods.
		{name: "TRACE", method: "TRACE", path: cats, auth: true, wantStatus: 405, wantCode: "method_not_allowed", wantHeader: []string{"Allow"}},
		raw("CONNECT with a path", rawRequest("CONNECT", cats, authH, ""), 405, "method_not_allowed"),
		raw("CONNECT with an authority", rawRequest("CONNECT", "127.0.0.1:80", authH, ""), 404, "not_found"),
		{name: "OPTIONS", method: "OPTIONS", path: cats, auth: true, wantStatus: 405, wantCode: "method_not_allowed", wantHeader: []string{"Allow"}},
		raw("OPTIONS *", rawRequest("OPTIONS", "*", nil, ""), 404, "not_found"),
		{name: "PROPFIND", method: "PROPFIND", path: cats, auth: true, wantStatus: 405, wantCode: "method_not_allowed", wantHeader: []string{"Allow"}},
		{name: "lower-case get", raw: rawRequest("get", cats, authH, ""), wantStatus: 405, wantCode: "method_not_allowed", wantHeader: []string{"Allow"}},
		{name: "PATCH a pet", method: "PATCH", path: "/v1/pets/1", auth: true, body: []byte(`{}`), wantStatus: 405, wantCode: "method_not_allowed", wantHeader: []string{"Allow"}},
		{name: "PATCH orders", method: "PATCH", path: orders, auth: true, body: []byte(`{}`), wantStatus: 405, wantCode: "method_not_allowed", wantHeader: []string{"Allow"}},
		raw("1,000-letter method", rawRequest(strings.Repeat("A", 1000), cats, authH, ""), 405, "method_not_allowed"),
		goRaw("empty method", []byte(" "+cats+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"), 400),
		goRaw("method with @", rawRequest("G@T", cats, authH, ""), 400),

		// Request lines and protocol versions.
		raw("HTTP/1.0", []byte("GET "+cats+" HTTP/1.0\r\nAuthorization: "+bearer+"\r\n\r\n"), 200, ""),
		raw("bare LF line ends", []byte("GET "+cats+" HTTP/1.1\nHost: x\nConnection: close\n\n"), 401, "unauthorized"),
		goRaw("no HTTP version", []byte("GET "+cats+"\r\nHost: x\r\n\r\n"), 400),
		goRaw("HTTP/1.1x", []byte("GET "+cats+" HTTP/1.1x\r\nHost: x\r\nConnection: close\r\n\r\n"), 400),
		goRaw("HTTP/9.9", []byte("GET "+cats+" HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n"), 505),
		goRaw("TLS client hello", append([]byte{0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03}, []byte("\r\n\r\n")...), 400),
	}

	if len(cases) < 100 {
		t.Fatalf("only %d cases", len(cases))
	}
	t.Logf("%d hostile cases", len(cases))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var res hostileResult
			var err error
			if c.raw != nil {
				res, err = rawExchange(addr, c.raw, c.halfClose)
			} else {
				res, err = clientExchange(ts, c)
			}
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if c.within > 0 && res.elapsed > c.within {
				t.Errorf("took %v, want at most %v", res.elapsed, c.within)
			}
			if res.closed {
				if !c.mayClose {
					t.Fatalf("connection closed without a response after %v, want %d %s", res.elapsed, c.wantStatus, c.wantCode)
				}
				t.Logf("closed without a response after %v", res.elapsed)
				return
			}
			t.Logf("%d %s (%v)", res.status, bytes.TrimSpace(res.body[:min(len(res.body), 160)]), res.elapsed.Round(time.Millisecond))
			if res.status >= 500 && !(c.goLevel && c.wantStatus >= 500) {
				t.Errorf("5xx: %d %s", res.status, res.body)
			}
			for _, h := range c.wantHeader {
				if res.header.Get(h) == "" {
					t.Errorf("no %s header", h)
				}
			}
			if res.status != c.wantStatus {
				t.Errorf("status = %d, want %d; Content-Type %q, body %.300q", res.status, c.wantStatus, res.header.Get("Content-Type"), res.body)
			}
			if c.goLevel || res.status < 400 {
				return
			}
			checkErrorBody(t, res, c.wantCode)
		})
	}

	// The server still serves normally.
	r := ts.do(t, "POST", "/v1/categories", key, `{"name":"Still standing"}`)
	if r.status != 201 {
		t.Fatalf("after the attack: POST status %d %s", r.status, r.body)
	}
	r = ts.do(t, "GET", "/v1/categories", key, "")
	if r.status != 200 || !strings.Contains(string(r.body), `"Still standing"`) {
		t.Fatalf("after the attack: GET status %d %.300s", r.status, r.body)
	}
	if log := ts.stderr.String(); strings.Contains(log, "panic") || strings.Contains(log, "level=ERROR") {
		t.Errorf("the server logged a panic or an error:\n%s", log)
	}
}

// checkErrorBody checks that res is a JSON Error of its own status with code.
func checkErrorBody(t *testing.T, res hostileResult, code string) {
	t.Helper()
	if ct := res.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json; body %.200q", ct, res.body)
	}
	var e apiError
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Errorf("body %.200q is not an Error: %v", res.body, err)
		return
	}
	if e.Status != res.status {
		t.Errorf("Error status = %d, HTTP status %d", e.Status, res.status)
	}
	if e.Code != code {
		t.Errorf("Error code = %q, want %q (message %q)", e.Code, code, e.Message)
	}
	if e.Message == "" {
		t.Errorf("Error without a message")
	}
}

// clientExchange sends c through the test server's contract-checking client.
func clientExchange(ts *testServer, c hostileCase) (hostileResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	defer cancel()
	var body io.Reader = http.NoBody
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, ts.base+c.path, body)
	if err != nil {
		return hostileResult{}, err
	}
	if c.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.auth {
		req.Header.Set("Authorization", "Bearer "+ts.key)
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		if c.header[i+1] == "" {
			req.Header.Del(c.header[i])
		} else {
			req.Header.Set(c.header[i], c.header[i+1])
		}
	}
	start := time.Now()
	resp, err := ts.client.Do(req)
	if err != nil {
		return hostileResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return hostileResult{}, fmt.Errorf("read body: %w", err)
	}
	return hostileResult{status: resp.StatusCode, header: resp.Header, body: b, elapsed: time.Since(start)}, nil
}

// rawExchange sends req as is over a new connection to addr and reads one
// response. The request is written concurrently, so that a server that
// answers before reading it all (a 413) is seen answering. A connection
// that ends without a response is reported as closed, not as an error; no
// answer within hostileTimeout is an error.
func rawExchange(addr string, req []byte, halfClose bool) (hostileResult, error) {
	conn, err := net.DialTimeout("tcp", addr, hostileTimeout)
	if err != nil {
		return hostileResult{}, err
	}
	defer conn.Close()
	start := time.Now()
	conn.SetDeadline(start.Add(hostileTimeout))
	go func() {
		conn.Write(req)
		if halfClose {
			conn.(*net.TCPConn).CloseWrite()
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	elapsed := time.Since(start)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return hostileResult{}, fmt.Errorf("no response within %v: %w", hostileTimeout, err)
		}
		// EOF, a reset: the server closed the connection.
		return hostileResult{closed: true, elapsed: elapsed}, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return hostileResult{}, fmt.Errorf("read body: %w", err)
	}
	return hostileResult{status: resp.StatusCode, header: resp.Header, body: b, elapsed: elapsed}, nil
}

// rawRequest builds an HTTP/1.1 request with a Host header, the given
// header pairs (written as given, names and values unchecked), a
// Content-Length for body unless the headers carry one, and
// Connection: close.
func rawRequest(method, target string, header []string, body string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n", method, target)
	hasLength := false
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", header[i], header[i+1])
		if strings.EqualFold(header[i], "Content-Length") {
			hasLength = true
		}
	}
	if body != "" && !hasLength {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.WriteString(body)
	return b.Bytes()
}

// rawChunked builds a JSON POST to path with a chunked body of the given
// chunks, finished with the last chunk when end is set and left open
// otherwise.
func rawChunked(path string, header []string, chunks []string, end bool) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n", path)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", header[i], header[i+1])
	}
	b.WriteString("Connection: close\r\n\r\n")
	for _, c := range chunks {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(c), c)
	}
	if end {
		b.WriteString("0\r\n\r\n")
	}
	return b.Bytes()
}

// TestRequestIDHoldingKeyIsReplaced checks that a client's X-Request-Id
// with a key anywhere in it is neither echoed nor logged.
func TestRequestIDHoldingKeyIsReplaced(t *testing.T) {
	ts := startServer(t)
	sent := "trace:" + ts.key
	r := ts.do(t, "GET", "/v1/categories", ts.key, "", "X-Request-Id", sent)
	got := r.header.Get("X-Request-Id")
	if got == "" || strings.Contains(got, ts.key) {
		t.Fatalf("X-Request-Id %q for a sent id holding the key", got)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(ts.stderr.String(), got); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the request's line with id %s is not in the log after 5s", got)
		}
	}
	if strings.Contains(ts.stderr.String(), ts.key) {
		t.Error("the key reached the log through X-Request-Id")
	}
}

// TestPanicAfterStatusAbortsConnection checks that a handler panicking
// after its status went out cuts the connection, so that the client sees
// an error instead of a short body that looks complete.
func TestPanicAfterStatusAbortsConnection(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`[{"id":1}`))
		http.NewResponseController(w).Flush()
		panic("after the status")
	})
	h := recoverPanics(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))(inner)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&recorder{ResponseWriter: w}, r) // the writer as logRequests hands it on
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Errorf("status %d, body %q read without error: the cut-off answer looks complete", resp.StatusCode, body)
	}
}

// TestEveryListenerSetsRequestID checks the responses that net/http or the
// admin listener would otherwise answer without an X-Request-Id.
func TestEveryListenerSetsRequestID(t *testing.T) {
	ts := startServer(t)
	res, err := rawExchange(strings.TrimPrefix(ts.base, "http://"), rawRequest("OPTIONS", "*", nil, ""), false)
	if err != nil || res.closed {
		t.Fatalf("OPTIONS *: no answer: %v", err)
	}
	if res.status != 404 || res.header.Get("X-Request-Id") == "" {
		t.Errorf("OPTIONS * -> %d, X-Request-Id %q; want a 404 with an id", res.status, res.header.Get("X-Request-Id"))
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/nowhere"} {
		resp, err := http.Get(ts.admin + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("admin %s -> %d without X-Request-Id", p, resp.StatusCode)
		}
	}
}
