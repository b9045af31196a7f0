package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// contract checks HTTP exchanges against the OpenAPI document a server
// serves, with libopenapi-validator: a documented operation's response must
// have a documented status, its required headers and a body that matches
// its schema; a request that names no documented operation must get a JSON
// 404, 405 or (the limiter runs before routing) 429.
type contract struct {
	mu  sync.Mutex // the validator is not documented as safe for concurrent use
	v   validator.Validator
	ops []docOperation
}

// docOperation is one operation of the document, with its path as a pattern.
type docOperation struct {
	method string
	path   string // as in the router: /v1/pets/{petId}
	re     *regexp.Regexp
}

var contracts sync.Map // served document -> *contract

// contractFor returns the checker of a served document, built once per
// distinct document.
func contractFor(t *testing.T, doc []byte) *contract {
	t.Helper()
	if c, ok := contracts.Load(string(doc)); ok {
		return c.(*contract)
	}
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		t.Fatalf("served OpenAPI document: %v", err)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		t.Fatalf("served OpenAPI document: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("served OpenAPI document: %s: %s", e.Message, e.Reason)
		}
		t.FailNow()
	}
	ops, err := documentOperations(doc)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := contracts.LoadOrStore(string(doc), &contract{v: v, ops: ops})
	return c.(*contract)
}

// documentOperations lists a document's operations with their full paths
// under the path of its first server.
func documentOperations(doc []byte) ([]docOperation, error) {
	var d struct {
		Servers []struct{ URL string } `json:"servers"`
		Paths   map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if len(d.Servers) == 0 {
		return nil, fmt.Errorf("the document has no servers")
	}
	base := regexp.MustCompile(`^https?://[^/]+`).ReplaceAllString(d.Servers[0].URL, "")
	var ops []docOperation
	for p, item := range d.Paths {
		full := base + p
		re := regexp.MustCompile("^" + regexp.MustCompile(`\\\{[^/]+\\\}`).ReplaceAllString(regexp.QuoteMeta(full), `[^/]+`) + "$")
		for method := range item {
			if slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}, method) {
				ops = append(ops, docOperation{method: strings.ToUpper(method), path: full, re: re})
			}
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].method+ops[i].path < ops[j].method+ops[j].path })
	return ops, nil
}

// documented reports whether method and path name an operation.
func (c *contract) documented(method, path string) bool {
	for _, op := range c.ops {
		if op.method == method && op.re.MatchString(path) {
			return true
		}
	}
	return false
}

// check returns what is wrong with one exchange, if anything.
func (c *contract) check(req *http.Request, resp *http.Response, body []byte) []string {
	path := req.URL.Path
	if path != "/v1" && !strings.HasPrefix(path, "/v1/") || req.Method == http.MethodHead {
		return nil // not the API: health checks, metrics
	}
	where := fmt.Sprintf("%s %s -> %d", req.Method, path, resp.StatusCode)
	if !c.documented(req.Method, path) {
		var e apiError
		if !slices.Contains([]int{404, 405, 429}, resp.StatusCode) || json.Unmarshal(body, &e) != nil || e.Status != resp.StatusCode {
			return []string{where + ": not a documented operation, yet not a JSON 404, 405 or 429: " + string(body)}
		}
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	ok, errs := c.v.ValidateHttpResponse(req, resp)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if ok {
		return nil
	}
	var out []string
	for _, e := range errs {
		msg := where + ": " + e.Message + ": " + e.Reason
		for _, se := range e.SchemaValidationErrors {
			msg += "; " + se.FieldPath + ": " + se.Reason
		}
		out = append(out, msg)
	}
	return out
}

// checkingTransport hands every exchange to a contract and keeps what it
// finds wrong, for the test to report.
type checkingTransport struct {
	base     http.RoundTripper
	contract func() *contract // nil until the server's document is known

	mu       sync.Mutex
	problems []string
	checked  int
}

func (ct *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := ct.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return resp, nil // a cut-off body is the test's to judge
	}
	if c := ct.contract(); c != nil {
		problems := c.check(req, resp, body)
		ct.mu.Lock()
		ct.checked++
		ct.problems = append(ct.problems, problems...)
		ct.mu.Unlock()
	}
	return resp, nil
}

// report fails t with every problem found so far.
func (ct *checkingTransport) report(t *testing.T) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	for _, p := range ct.problems {
		t.Errorf("contract: %s", p)
	}
	ct.problems = nil
}

// TestRoutesMatchDocument checks that the router and the OpenAPI document
// list the same operations.
func TestRoutesMatchDocument(t *testing.T) {
	var routes []string
	for _, rt := range apiRoutes(nil, nil, serveConfig{}) {
		routes = append(routes, rt.pattern)
	}
	ops, err := documentOperations(openAPISource)
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
			t.Errorf("%s is routed but not in openapi.json", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("%s is in openapi.json but not routed", d)
		}
	}
}

// TestContractCatchesMismatches feeds the checker exchanges that break the
// document, to show that it can fail.
func TestContractCatchesMismatches(t *testing.T) {
	doc, err := openAPIDocument("http://localhost:8080/v1", "production")
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
	tests := []struct {
		name, method, path string
		status             int
		header             http.Header
		body               string
		wantProblem        bool
	}{
		{"valid list", "GET", "/v1/categories", 200, good, `[{"id":1,"name":"Dog"}]`, false},
		{"valid error", "POST", "/v1/categories", 409, good, `{"status":409,"code":"conflict","message":"taken"}`, false},
		{"undocumented field", "GET", "/v1/categories", 200, good, `[{"id":1,"name":"Dog","colour":"red"}]`, true},
		{"wrong type", "GET", "/v1/categories", 200, good, `[{"id":"1","name":"Dog"}]`, true},
		{"undocumented status", "GET", "/v1/categories", 418, good, `{"status":418,"code":"conflict","message":"x"}`, true},
		{"code of another status", "POST", "/v1/categories", 409, good, `{"status":409,"code":"not_found","message":"x"}`, true},
		{"missing rate-limit header", "GET", "/v1/categories", 200, without("X-Ratelimit-Remaining"), `[]`, true},
		{"missing stability header", "GET", "/v1/pets", 200, good, `[]`, true},
		{"unknown path not an error", "GET", "/v1/dogs", 200, good, `[]`, true},
		{"unknown path 404", "GET", "/v1/dogs", 404, good, `{"status":404,"code":"not_found","message":"x"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, "http://127.0.0.1:1"+tt.path, nil)
			resp := &http.Response{StatusCode: tt.status, Header: tt.header, Body: io.NopCloser(strings.NewReader(tt.body)), Request: req}
			problems := c.check(req, resp, []byte(tt.body))
			if got := len(problems) > 0; got != tt.wantProblem {
				t.Errorf("problems = %q, want some: %v", problems, tt.wantProblem)
			}
		})
	}
}
