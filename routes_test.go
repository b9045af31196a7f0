package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestRoutingErrors(t *testing.T) {
	ts := startServer(t)
	tests := []struct {
		name, method, path, key string
		wantStatus              int
		wantCode, wantAllow     string
	}{
		{"unknown path", "GET", "/v1/dogs", "", 404, "not_found", ""},
		{"unknown path with key", "GET", "/v1/dogs", ts.key, 404, "not_found", ""},
		{"root", "GET", "/", "", 404, "not_found", ""},
		{"trailing slash", "GET", "/v1/categories/", ts.key, 404, "not_found", ""},
		{"dot-dot", "GET", "/v1/x/../categories", ts.key, 404, "not_found", ""},
		{"wrong method", "DELETE", "/v1/categories", "", 405, "method_not_allowed", "GET, HEAD, POST"},
		{"wrong method with key", "PUT", "/v1/categories", ts.key, 405, "method_not_allowed", "GET, HEAD, POST"},
		{"post to openapi", "POST", "/v1/openapi.json", "", 405, "method_not_allowed", "GET, HEAD"},
		{"no key", "GET", "/v1/categories", "", 401, "unauthorized", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.base+tt.path, nil)
			req.URL.Opaque = tt.path // send the path as written
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key)
			}
			resp, err := ts.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r := response{status: resp.StatusCode, header: resp.Header, body: body}
			wantError(t, r, tt.wantStatus, tt.wantCode)
			if got := r.header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
			if r.header.Get("X-Request-Id") == "" {
				t.Errorf("no X-Request-Id")
			}
		})
	}
}

// routeDocOp is what the route table's tests read of one operation of
// the served OpenAPI document.
type routeDocOp struct {
	Security   *[]map[string][]string `json:"security"` // nil: the document's own
	Stability  *string                `json:"x-stability"`
	Deprecated bool                   `json:"deprecated"`
	Parameters []struct {
		Ref      string         `json:"$ref"`
		Name     string         `json:"name"`
		In       string         `json:"in"`
		Required bool           `json:"required"`
		Schema   map[string]any `json:"schema"`
	} `json:"parameters"`
	needsKey bool
}

// routeDocOps reads the operations of the OpenAPI document doc, by
// "METHOD /v1/path" (the path under its first server's URL): whether each
// needs a key (its security, or the document's; a requirement {} in the
// list makes the key optional), with its parameters' $refs resolved.
func routeDocOps(doc []byte) (map[string]routeDocOp, error) {
	var d struct {
		Servers    []struct{ URL string }                `json:"servers"`
		Security   []map[string][]string                 `json:"security"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]json.RawMessage `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if len(d.Servers) == 0 {
		return nil, fmt.Errorf("the document has no servers")
	}
	u, err := url.Parse(d.Servers[0].URL)
	if err != nil {
		return nil, err
	}
	ops := map[string]routeDocOp{}
	for path, item := range d.Paths {
		for method, raw := range item {
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}, method) {
				continue
			}
			var op routeDocOp
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			for i, p := range op.Parameters {
				if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
					if err := json.Unmarshal(d.Components.Parameters[name], &op.Parameters[i]); err != nil {
						return nil, fmt.Errorf("%s %s: parameter %s: %w", method, path, p.Ref, err)
					}
				}
			}
			security := d.Security
			if op.Security != nil {
				security = *op.Security
			}
			op.needsKey = len(security) > 0 && !slices.ContainsFunc(security, func(r map[string][]string) bool { return len(r) == 0 })
			ops[strings.ToUpper(method)+" "+strings.TrimRight(u.Path, "/")+path] = op
		}
	}
	return ops, nil
}

// servedDocOps returns the operations of the document that ts serves,
// asked for with the key: whether it may be read without one is for
// TestRoutesRequireDocumentedKeys to say.
func servedDocOps(t *testing.T, ts *testServer) map[string]routeDocOp {
	t.Helper()
	served := ts.do(t, "GET", "/v1/openapi.json", ts.key, "")
	if served.status != 200 {
		t.Fatalf("GET /v1/openapi.json: %d %s", served.status, served.body)
	}
	ops, err := routeDocOps(served.body)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// target returns a request path for the operation at path: each path
// parameter, and each required query parameter, filled with a value its
// schema allows (its example, its first enum value, its minimum, or 1).
func (op routeDocOp) target(path string) string {
	value := func(s map[string]any) string {
		if v, ok := s["example"]; ok {
			return fmt.Sprint(v)
		}
		if e, ok := s["enum"].([]any); ok && len(e) > 0 {
			return fmt.Sprint(e[0])
		}
		if m, ok := s["minimum"].(float64); ok && s["type"] == "integer" {
			return strconv.FormatInt(max(int64(m), 1), 10)
		}
		return "1"
	}
	q := url.Values{}
	for _, p := range op.Parameters {
		switch {
		case p.In == "path":
			path = strings.ReplaceAll(path, "{"+p.Name+"}", url.PathEscape(value(p.Schema)))
		case p.In == "query" && p.Required:
			q.Set(p.Name, value(p.Schema))
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return path
}

// TestRoutesRequireDocumentedKeys sends every operation of the route table
// (a GET with its HEAD) to the real server without a key, and with one
// that is not a key: where the served document says the operation needs a
// key, each answer is 401 with WWW-Authenticate; where it says none is
// needed, neither is 401. A route that the table registers without
// requireKey or requireWrite while the document asks a key fails here, as
// does a new route, without a line of this test changing. With the key,
// no answer is 401: the path and parameters did reach the operation.
func TestRoutesRequireDocumentedKeys(t *testing.T) {
	// A sunset far off: after it GET /v1/pets/{petId} is 410 with or
	// without a key.
	ts := startServer(t, "--pets-sunset-at", "2999-01-01")
	ops := servedDocOps(t, ts)
	var withKey, without int
	for _, rt := range apiRoutes(nil, nil, serveConfig{}) {
		patterns := []string{rt.pattern}
		if p, ok := strings.CutPrefix(rt.pattern, "GET "); ok {
			patterns = append(patterns, "HEAD "+p)
		}
		for _, pattern := range patterns {
			op, ok := ops[pattern]
			if !ok {
				t.Errorf("%s is routed but not in the served document", pattern)
				continue
			}
			method, path, _ := strings.Cut(pattern, " ")
			target := op.target(path)
			for _, key := range []string{"", "not-a-key", ts.key} {
				r := ts.do(t, method, target, key, "")
				where := fmt.Sprintf("%s %s (%s)", method, target, map[string]string{"": "no key", "not-a-key": "not a key", ts.key: "the key"}[key])
				switch {
				case key == ts.key || !op.needsKey:
					if r.status == 401 || r.status == 403 {
						t.Errorf("%s: %d, yet the document needs no key here (or the key is good): %s", where, r.status, r.body)
					}
				case r.status != 401:
					t.Errorf("%s: %d, want 401: the document says it needs a key (is the route missing requireKey?)", where, r.status)
				case !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer "):
					t.Errorf("%s: 401 with WWW-Authenticate %q, want Bearer", where, r.header.Get("WWW-Authenticate"))
				}
			}
			if op.needsKey {
				withKey++
			} else {
				without++
			}
		}
	}
	// Today's table has both kinds: a test that saw only one could not fail.
	if withKey < 5 || without < 1 {
		t.Errorf("%d operations need a key and %d none; want both kinds", withKey, without)
	}
}
