package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
)

// TestDocumentEnumsMatchTables checks that the OpenAPI document's lists
// of allowed values are those of the Go tables the server validates with.
func TestDocumentEnumsMatchTables(t *testing.T) {
	type schema struct {
		Enum       []string
		Maximum    int64
		Properties map[string]schema
	}
	var doc struct {
		Components struct{ Schemas map[string]schema }
	}
	if err := json.Unmarshal(openAPISource, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc.Components.Schemas
	for _, tt := range []struct {
		where     string
		got, want []string
	}{
		{"PetStatus", schemas["PetStatus"].Enum, petStatuses},
		{"Order.status", schemas["Order"].Properties["status"].Enum, orderStatuses},
	} {
		if !slices.Equal(slices.Sorted(slices.Values(tt.got)), slices.Sorted(slices.Values(tt.want))) {
			t.Errorf("openapi.json's %s enum is %q; the Go table has %q", tt.where, tt.got, tt.want)
		}
	}
	for _, name := range []string{"NewOrder", "Order"} {
		if m := schemas[name].Properties["quantity"].Maximum; m != maxOrderQuantity {
			t.Errorf("openapi.json's %s.quantity maximum is %v, want maxOrderQuantity (%d)", name, m, maxOrderQuantity)
		}
	}
}

// servedDocument is the document the server serves (openapi.json with
// the HEAD of each GET), as openAPIDocument makes it; with inline set, each
// response that is a $ref to components.responses is written out.
func servedDocument(t *testing.T, inline bool) []byte {
	t.Helper()
	doc, err := openAPIDocument("http://localhost:8080/v1", "production", apiDocOps())
	if err == nil && inline {
		doc, err = inlineResponses(doc)
	}
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestRoutesMatchDocument checks that the router and the served OpenAPI
// document list the same operations, a GET route standing for a HEAD too:
// the router (http.ServeMux) answers HEAD for every GET pattern, and the
// served document has the HEAD that openAPIDocument makes of each GET.
// openapi.json itself has no HEAD: it would be a second copy to keep.
func TestRoutesMatchDocument(t *testing.T) {
	var source struct {
		Paths map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(openAPISource, &source); err != nil {
		t.Fatal(err)
	}
	for path, item := range source.Paths {
		if item["head"] != nil {
			t.Errorf("openapi.json has HEAD %s: the served document makes it from the GET", path)
		}
	}
	var routes []string
	for _, rt := range apiRoutes(nil, nil, serveConfig{}) {
		routes = append(routes, rt.pattern)
		if p, ok := strings.CutPrefix(rt.pattern, "GET "); ok {
			routes = append(routes, "HEAD "+p)
		}
	}
	ops, err := documentOperations(servedDocument(t, false))
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, op := range ops {
		documented = append(documented, op.method+" "+op.path)
	}
	sort.Strings(routes)
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is routed but not in the served document", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("%s is in the served document but not routed", d)
		}
	}
}

// TestContractCatchesMismatches feeds the checker exchanges that break the
// document, to show that it can fail.
func TestContractCatchesMismatches(t *testing.T) {
	doc, err := openAPIDocument("http://localhost:8080/v1", "production", apiDocOps())
	if err != nil {
		t.Fatal(err)
	}
	c := contractFor(t, doc)
	good := http.Header{
		"Content-Type":          {"application/json"},
		"X-Request-Id":          {"abc"},
		"X-Ratelimit-Limit":     {"60"},
		"X-Ratelimit-Remaining": {"59"},
		"X-Ratelimit-Reset":     {"1795299586"},
		"Ratelimit-Policy":      {`"minute";q=60;w=60`},
		"Ratelimit":             {`"minute";r=59;t=1`},
	}
	without := func(name string) http.Header {
		h := good.Clone()
		h.Del(name)
		return h
	}
	text := good.Clone()
	text.Set("Content-Type", "text/plain; charset=utf-8")
	preflight := http.Header{"Origin": {"https://app.example.test"}, "Access-Control-Request-Method": {"POST"}}
	tests := []struct {
		name, method, path string
		reqHeader          http.Header
		status             int
		header             http.Header
		body               string
		wantProblem        bool
	}{
		{"valid list", "GET", "/v1/categories", nil, 200, good, `[{"id":1,"name":"Dog"}]`, false},
		{"valid error", "POST", "/v1/categories", nil, 409, good, `{"status":409,"code":"conflict","message":"taken"}`, false},
		{"undocumented field", "GET", "/v1/categories", nil, 200, good, `[{"id":1,"name":"Dog","colour":"red"}]`, true},
		{"wrong type", "GET", "/v1/categories", nil, 200, good, `[{"id":"1","name":"Dog"}]`, true},
		{"undocumented status", "GET", "/v1/categories", nil, 418, good, `{"status":418,"code":"conflict","message":"x"}`, true},
		{"code of another status", "POST", "/v1/categories", nil, 409, good, `{"status":409,"code":"not_found","message":"x"}`, true},
		{"missing rate-limit header", "GET", "/v1/categories", nil, 200, without("X-Ratelimit-Remaining"), `[]`, true},
		{"missing stability header", "GET", "/v1/pets", nil, 200, good, `[]`, true},
		{"unknown path not an error", "GET", "/v1/dogs", nil, 200, good, `[]`, true},
		{"unknown path 404", "GET", "/v1/dogs", nil, 404, good, `{"status":404,"code":"not_found","message":"x"}`, false},
		{"body error on a GET", "GET", "/v1/categories", nil, 400, good, `{"status":400,"code":"invalid_json","message":"x"}`, true},
		{"parameter error on a GET", "GET", "/v1/categories", nil, 400, good, `{"status":400,"code":"validation_failed","message":"x"}`, false},
		{"valid head", "HEAD", "/v1/categories", nil, 200, good, ``, false},
		{"valid head of an error", "HEAD", "/v1/categories", nil, 500, good, ``, false},
		{"head with a body", "HEAD", "/v1/categories", nil, 200, good, `[]`, true},
		{"head without a rate-limit header", "HEAD", "/v1/categories", nil, 200, without("X-Ratelimit-Remaining"), ``, true},
		{"head without the stability header", "HEAD", "/v1/pets", nil, 200, good, ``, true},
		{"head of an undocumented status", "HEAD", "/v1/categories", nil, 409, good, ``, true},
		{"head of an error as text", "HEAD", "/v1/categories", nil, 500, text, ``, true},
		{"head of an unknown path 404", "HEAD", "/v1/dogs", nil, 404, good, ``, false},
		{"head of an unknown path 200", "HEAD", "/v1/dogs", nil, 200, good, ``, true},
		{"head of an unknown path as text", "HEAD", "/v1/dogs", nil, 404, text, ``, true},
		{"cors preflight", "OPTIONS", "/v1/categories", preflight, 204, http.Header{}, ``, false},
		{"options without a preflight", "OPTIONS", "/v1/categories", nil, 204, good, ``, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, "http://127.0.0.1:1"+tt.path, nil)
			if tt.reqHeader != nil {
				req.Header = tt.reqHeader
			}
			resp := &http.Response{StatusCode: tt.status, Header: tt.header, Body: io.NopCloser(strings.NewReader(tt.body)), Request: req}
			problems := c.check(req, resp, []byte(tt.body))
			if got := len(problems) > 0; got != tt.wantProblem {
				t.Errorf("problems = %q, want some: %v", problems, tt.wantProblem)
			}
		})
	}
}

// TestErrorSchemasTyped checks the document's pattern for errors, on which
// generated clients depend for typed errors: every const and enum has a
// type beside it, and every error response's body is a named schema of its
// status, the Error narrowed to that status (an integer const) and to
// codes (a string enum) that errorf gives that status. An operation
// without a request body lists no request-body error (invalid_json).
func TestErrorSchemasTyped(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(servedDocument(t, true), &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			_, isConst := v["const"]
			_, isEnum := v["enum"]
			if _, typed := v["type"]; (isConst || isEnum) && !typed {
				t.Errorf("%s: a const or enum without a type", where)
			}
			for k, e := range v {
				walk(where+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				walk(where+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("#", doc)

	obj := func(v any, keys ...string) map[string]any {
		for _, k := range keys {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		m, _ := v.(map[string]any)
		return m
	}
	schemas := obj(doc, "components", "schemas")
	// narrowing returns the status and codes an error schema narrows the
	// Error to, or what is wrong with it.
	narrowing := func(name string) (status int, codes []string, err error) {
		allOf, _ := obj(schemas, name)["allOf"].([]any)
		if len(allOf) != 2 || obj(allOf[0])["$ref"] != "#/components/schemas/Error" {
			return 0, nil, fmt.Errorf("not allOf the Error and its narrowing")
		}
		props := obj(allOf[1], "properties")
		st, code := obj(props, "status"), obj(props, "code")
		c, _ := st["const"].(float64)
		if st["type"] != "integer" || c < 400 || obj(allOf[1])["type"] != "object" {
			return 0, nil, fmt.Errorf("status is not an integer const of an error")
		}
		enum, _ := code["enum"].([]any)
		for _, e := range enum {
			if s, ok := e.(string); ok {
				codes = append(codes, s)
			}
		}
		if code["type"] != "string" || len(codes) == 0 || len(codes) != len(enum) {
			return 0, nil, fmt.Errorf("code is not a string enum")
		}
		return int(c), codes, nil
	}
	used := map[string]bool{}
	for path, item := range obj(doc, "paths") {
		for method, o := range item.(map[string]any) {
			op, _ := o.(map[string]any)
			responses := obj(op, "responses")
			if responses == nil {
				continue
			}
			_, hasBody := op["requestBody"]
			for status, r := range responses {
				code, _ := strconv.Atoi(status)
				body := obj(r, "content", "application/json")
				where := fmt.Sprintf("%s %s %s", method, path, status)
				if code < 400 || body == nil {
					if code >= 400 && method != "head" {
						t.Errorf("%s: an error without an application/json body", where)
					}
					continue
				}
				ref, _ := obj(body, "schema")["$ref"].(string)
				name, ok := strings.CutPrefix(ref, "#/components/schemas/")
				if !ok || len(obj(body, "schema")) != 1 {
					t.Errorf("%s: the body is not a $ref to a named error schema", where)
					continue
				}
				used[name] = true
				st, codes, err := narrowing(name)
				if err != nil {
					t.Errorf("%s: %s: %v", where, name, err)
					continue
				}
				if st != code {
					t.Errorf("%s: %s is the error of a %d", where, name, st)
				}
				for _, c := range codes {
					if errorStatus[c] != code {
						t.Errorf("%s: %s lists %q, which comes with status %d", where, name, c, errorStatus[c])
					}
					if c == "invalid_json" && !hasBody {
						t.Errorf("%s: %s lists invalid_json, yet the operation takes no body", where, name)
					}
				}
			}
		}
	}
	for name, s := range schemas {
		if allOf, _ := obj(s)["allOf"].([]any); len(allOf) > 0 && !used[name] {
			t.Errorf("error schema %s is used by no response", name)
		}
	}
}

// TestHeadOperationsMirrorGet checks that every GET path of the served
// document has its HEAD, with the GET's parameters, security, statuses and
// headers (a shared response's written out), and no body.
func TestHeadOperationsMirrorGet(t *testing.T) {
	type response struct {
		Headers map[string]json.RawMessage `json:"headers"`
		Content json.RawMessage            `json:"content"`
	}
	type operation struct {
		OperationID string              `json:"operationId"`
		Parameters  json.RawMessage     `json:"parameters"`
		Security    json.RawMessage     `json:"security"`
		Deprecated  bool                `json:"deprecated"`
		Responses   map[string]response `json:"responses"`
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(servedDocument(t, true), &doc); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for path, item := range doc.Paths {
		var get, head operation
		if item["get"] == nil {
			if item["head"] != nil {
				t.Errorf("HEAD %s without a GET", path)
			}
			continue
		}
		if item["head"] == nil {
			t.Errorf("GET %s without a HEAD", path)
			continue
		}
		if json.Unmarshal(item["get"], &get) != nil || json.Unmarshal(item["head"], &head) != nil {
			t.Fatalf("%s: operations do not parse", path)
		}
		for _, op := range []operation{get, head} {
			if other, ok := ids[op.OperationID]; ok || op.OperationID == "" {
				t.Errorf("%s: operationId %q is not unique (also %s)", path, op.OperationID, other)
			}
			ids[op.OperationID] = path
		}
		if !bytes.Equal(get.Parameters, head.Parameters) || !bytes.Equal(get.Security, head.Security) || get.Deprecated != head.Deprecated {
			t.Errorf("HEAD %s: parameters, security or deprecation differ from the GET's", path)
		}
		for status, r := range get.Responses {
			h, ok := head.Responses[status]
			if !ok {
				t.Errorf("HEAD %s: no %s, which the GET has", path, status)
				continue
			}
			if h.Content != nil {
				t.Errorf("HEAD %s %s: a body", path, status)
			}
			if len(h.Headers) != len(r.Headers) {
				t.Errorf("HEAD %s %s: %d headers, the GET has %d", path, status, len(h.Headers), len(r.Headers))
			}
			for name, def := range r.Headers {
				if !bytes.Equal(h.Headers[name], def) {
					t.Errorf("HEAD %s %s: header %s differs from the GET's", path, status, name)
				}
			}
		}
		if len(head.Responses) != len(get.Responses) {
			t.Errorf("HEAD %s: %d statuses, the GET has %d", path, len(head.Responses), len(get.Responses))
		}
	}
}

// TestHeadMatchesGet sends HEAD on every documented HEAD operation, and on
// some of their errors, through the contract checker, and checks that each
// answer is its GET's without the body: the same status and headers.
func TestHeadMatchesGet(t *testing.T) {
	ts := startServer(t)
	for _, w := range []struct{ path, body string }{
		{"/v1/categories", `{"name":"Dog"}`},
		{"/v1/pets", `{"name":"Rex","categoryId":1}`},
		{"/v1/store/orders", `{"petId":1,"quantity":1}`},
	} {
		if r := ts.do(t, "POST", w.path, ts.key, w.body); r.status != 201 {
			t.Fatalf("POST %s: %d %s", w.path, r.status, r.body)
		}
	}
	doc, err := openAPIDocument("http://localhost:8080/v1", "production", apiDocOps())
	if err != nil {
		t.Fatal(err)
	}
	ops, err := documentOperations(doc)
	if err != nil {
		t.Fatal(err)
	}
	type request struct {
		path, key string
		header    []string
	}
	var requests []request
	for _, op := range ops {
		if op.method == http.MethodHead {
			// Each collection has one record, of id 1.
			p := regexp.MustCompile(`\{[^/]+\}`).ReplaceAllString(op.path, "1")
			requests = append(requests, request{p, ts.key, nil}, request{p, "", nil})
		}
	}
	if len(requests) == 0 {
		t.Fatal("no HEAD operation in the document")
	}
	etag := ts.do(t, "GET", "/v1/categories", ts.key, "").header.Get("ETag")
	requests = append(requests,
		request{"/v1/categories", ts.key, []string{"If-None-Match", etag}}, // 304
		request{"/v1/categories?limit=0", ts.key, nil},                     // 400
		request{"/v1/categories?limit=1", ts.key, nil},                     // a page
		request{"/v1/pets?status=lost", ts.key, nil},                       // 400
		request{"/v1/pets/abc", ts.key, nil},                               // 400
		request{"/v1/pets/99", ts.key, nil},                                // 404
		request{"/v1/dogs", ts.key, nil},                                   // 404, no operation
	)
	statuses := map[int]bool{}
	for _, rq := range requests {
		// Go's client asks for gzip by itself on a GET only: ask on both.
		header := append(rq.header, "Accept-Encoding", "gzip")
		get := ts.do(t, "GET", rq.path, rq.key, "", header...)
		head := ts.do(t, "HEAD", rq.path, rq.key, "", header...)
		where := fmt.Sprintf("HEAD %s (key %v)", rq.path, rq.key != "")
		statuses[head.status] = true
		if head.status != get.status {
			t.Errorf("%s: %d, the GET %d", where, head.status, get.status)
		}
		if len(head.body) > 0 {
			t.Errorf("%s: a body: %s", where, head.body)
		}
		for name := range get.header {
			if _, ok := head.header[name]; !ok && name != "Content-Length" {
				t.Errorf("%s: no %s, which the GET has", where, name)
			}
		}
		for name := range head.header {
			if _, ok := get.header[name]; !ok && name != "Content-Length" {
				t.Errorf("%s: %s, which the GET has not", where, name)
			}
		}
		for _, name := range []string{"Content-Type", "Content-Encoding", "Vary", "ETag", "Link", "Deprecation", "Sunset", "X-Api-Stability", "Www-Authenticate"} {
			if g, h := get.header.Values(name), head.header.Values(name); !slices.Equal(g, h) {
				t.Errorf("%s: %s %q, the GET %q", where, name, h, g)
			}
		}
	}
	for _, want := range []int{200, 304, 400, 401, 404} {
		if !statuses[want] {
			t.Errorf("no HEAD answered %d", want)
		}
	}
}

// TestDocumentPatterns holds the document's schemas to the server's own
// rules (DECISIONS.md section 18): the names' pattern is namePattern and
// they have no maxLength (the server trims first), the Idempotency-Key's
// pattern and maxLength are idempotency.go's, a description's pattern is
// descriptionPattern, and every int64 the client sends is bounded as an
// int64 is. Every pattern is one that both ECMA-262's u mode and Go's
// regexp read alike: no look-around, no \u, no \s \d \w \p classes.
func TestDocumentPatterns(t *testing.T) {
	dec := json.NewDecoder(bytes.NewReader(servedDocument(t, false)))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	at := func(path ...string) map[string]any {
		var v any = doc
		for _, k := range path {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		m, _ := v.(map[string]any)
		if m == nil {
			t.Fatalf("openapi.json has nothing at %s", strings.Join(path, "/"))
		}
		return m
	}
	props := func(schema string, name string) map[string]any {
		return at("components", "schemas", schema, "properties", name)
	}
	for _, s := range []string{"NewCategory", "NewPet"} {
		name := props(s, "name")
		if name["pattern"] != namePattern() {
			t.Errorf("%s.name's pattern is not namePattern(), which is (as JSON):\n%s", s, jsonASCII(namePattern()))
		}
		if _, ok := name["maxLength"]; ok {
			t.Errorf("%s.name has a maxLength: the server takes longer names in white space that it trims", s)
		}
	}
	if p := props("NewCategory", "description")["pattern"]; p != descriptionPattern {
		t.Errorf("NewCategory.description's pattern is %q, want descriptionPattern %q", p, descriptionPattern)
	}
	key := at("components", "parameters", "Idempotency-Key", "schema")
	if key["pattern"] != idemKeyPattern() {
		t.Errorf("the Idempotency-Key's pattern is not idemKeyPattern(), which is (as JSON):\n%s", jsonASCII(idemKeyPattern()))
	}
	if n := key["maxLength"]; n != json.Number(strconv.Itoa(idemKeyMaxLength)) {
		t.Errorf("the Idempotency-Key's maxLength is %v, want %d", n, idemKeyMaxLength)
	}

	maxInt64 := json.Number(strconv.FormatInt(math.MaxInt64, 10))
	int64s := []map[string]any{props("NewPet", "categoryId"), props("NewOrder", "petId")}
	for path, item := range at("paths") {
		for method, o := range item.(map[string]any) {
			params, _ := o.(map[string]any)["parameters"].([]any)
			for _, p := range params {
				if s, _ := p.(map[string]any)["schema"].(map[string]any); s["format"] == "int64" {
					int64s = append(int64s, s)
				} else if s == nil && p.(map[string]any)["$ref"] == nil {
					t.Errorf("%s %s: a parameter without a schema", method, path)
				}
			}
		}
	}
	for _, s := range int64s {
		if s["maximum"] != maxInt64 {
			t.Errorf("an int64 the client sends, %v, has no maximum %s", s, maxInt64)
		}
	}

	forbidden := regexp.MustCompile(`\(\?[=!<]|\\[uUsSdDwWpP]|\\x\{`)
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if p, ok := v["pattern"].(string); ok {
				if _, err := regexp.Compile(p); err != nil {
					t.Errorf("%s: Go's regexp does not read the pattern: %v", where, err)
				}
				if m := forbidden.FindString(p); m != "" {
					t.Errorf("%s: the pattern has %q, which ECMA-262 and Go read differently or not at all", where, m)
				}
			}
			for k, e := range v {
				walk(where+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				walk(where+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("#", doc)
}

// jsonASCII is s as a JSON string with every code point outside ASCII
// escaped, as openapi.json writes them.
func jsonASCII(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&b, `\u%04x`, u)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TestNoParameterIsPrefilled checks that the /docs page's "Execute" sends
// only what the user typed (DECISIONS.md section 18): Swagger UI fills a
// parameter's field with its example or default, so no optional
// parameter has one, and "List all categories" lists them all rather than
// a page of an example's size. (A path parameter must be given anyway; its
// example is a help.)
func TestNoParameterIsPrefilled(t *testing.T) {
	var doc struct {
		Paths      map[string]map[string]json.RawMessage
		Components struct{ Parameters map[string]json.RawMessage }
	}
	if err := json.Unmarshal(servedDocument(t, false), &doc); err != nil {
		t.Fatal(err)
	}
	type parameter struct {
		Ref      string          `json:"$ref"`
		Name     string          `json:"name"`
		Required bool            `json:"required"`
		Example  json.RawMessage `json:"example"`
		Examples json.RawMessage `json:"examples"`
		Schema   struct {
			Default  json.RawMessage `json:"default"`
			Example  json.RawMessage `json:"example"`
			Examples json.RawMessage `json:"examples"`
		} `json:"schema"`
	}
	checked := 0
	for path, item := range doc.Paths {
		for method, raw := range item {
			var op struct{ Parameters []parameter }
			if json.Unmarshal(raw, &op) != nil {
				continue
			}
			for _, p := range op.Parameters {
				if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
					if err := json.Unmarshal(doc.Components.Parameters[name], &p); err != nil {
						t.Fatal(err)
					}
				}
				if p.Required {
					continue
				}
				checked++
				for what, v := range map[string]json.RawMessage{"an example": p.Example, "examples": p.Examples,
					"a default in its schema": p.Schema.Default, "an example in its schema": p.Schema.Example, "examples in its schema": p.Schema.Examples} {
					if v != nil {
						t.Errorf("%s %s: the optional parameter %s has %s (%s), which the docs page would send unasked", method, path, p.Name, what, v)
					}
				}
			}
		}
	}
	if checked < 6 {
		t.Errorf("%d optional parameters checked, want at least limit, after_id, categoryId, status and their HEADs'", checked)
	}
}

// TestDocumentResponseHeaders holds every response of every operation in
// the served document, a shared one of components.responses written out,
// to the headers DECISIONS.md sections 5 and 18 say each answer carries:
// X-Request-Id and the rate-limit headers on all; X-API-Stability on
// the beta and experimental areas' (the header of the operation's
// x-stability) and none on a stable one's; WWW-Authenticate on a 401;
// Retry-After on a 429 and a 503; Deprecation, Sunset and Link on a
// deprecated operation's. Each is a $ref to components.headers, so a
// shared response of the wrong area, or one missing a header, shows here.
func TestDocumentResponseHeaders(t *testing.T) {
	type ref struct {
		Ref string `json:"$ref"`
	}
	type operation struct {
		Stability  string `json:"x-stability"`
		Deprecated bool   `json:"deprecated"`
		Parameters []ref  `json:"parameters"`
		Responses  map[string]struct {
			Headers map[string]struct {
				Ref string `json:"$ref"`
			} `json:"headers"`
		} `json:"responses"`
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(servedDocument(t, true), &doc); err != nil {
		t.Fatal(err)
	}
	stability := map[string]string{"beta": "X-API-Stability-Beta", "experimental": "X-API-Stability-Experimental"}
	checked := 0
	for path, item := range doc.Paths {
		for method, raw := range item {
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil || op.Responses == nil {
				continue
			}
			// Read-your-writes (DECISIONS.md section 20): every read of the
			// database takes the token and every read and 201 carries it.
			dbOp := path != "/openapi.json"
			if dbOp && (method == "get" || method == "head") && !slices.Contains(op.Parameters, ref{"#/components/parameters/Petstore-Read-After"}) {
				t.Errorf("%s %s: no Petstore-Read-After parameter", strings.ToUpper(method), path)
			}
			for status, r := range op.Responses {
				checked++
				where := fmt.Sprintf("%s %s %s", strings.ToUpper(method), path, status)
				want := map[string]string{}
				for _, h := range []string{"X-Request-Id", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
					want[h] = h
				}
				if c, ok := stability[op.Stability]; ok {
					want["X-API-Stability"] = c
				} else if op.Stability != "stable" {
					t.Errorf("%s: x-stability %q", where, op.Stability)
				}
				switch status {
				case "401":
					want["WWW-Authenticate"] = "WWW-Authenticate"
				case "429", "503":
					want["Retry-After"] = "Retry-After"
				}
				if op.Deprecated {
					want["Deprecation"], want["Sunset"], want["Link"] = "Deprecation", "Sunset", "Link"
				}
				if dbOp && (status == "200" || status == "201" || status == "304") {
					want["Petstore-Read-After"] = "Petstore-Read-After"
				}
				for name, c := range want {
					if got := r.Headers[name].Ref; got != "#/components/headers/"+c {
						t.Errorf("%s: header %s is %q, want a $ref to components.headers.%s", where, name, got, c)
					}
				}
				if _, ok := r.Headers["X-API-Stability"]; ok && want["X-API-Stability"] == "" {
					t.Errorf("%s: X-API-Stability on an operation of a stable area", where)
				}
			}
		}
	}
	if checked < 90 {
		t.Errorf("%d responses checked, want every one of every operation (91 and more)", checked)
	}
}
