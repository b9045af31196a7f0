package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
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

// TestRouteFacts holds every row of the route table to the rules its facts
// must keep, whatever the row says of itself: a route that writes (any
// method but GET) needs a key that may write and carries read-your-writes;
// a GET needs no more than a key and never marks a write; each route lies
// in its area; and a route whose documented 200 is an array is a list,
// bounded by chunks or pages (TestListsAreBounded), and no other is.
func TestRouteFacts(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema struct {
						Type string `json:"type"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(servedDocument(t, false), &doc); err != nil {
		t.Fatal(err)
	}
	keys := map[keyNeed]string{noKey: "noKey", anyKey: "anyKey", writeKey: "writeKey"}
	rws := map[rwUse]string{rwNone: "rwNone", rwRead: "rwRead", rwWrite: "rwWrite"}
	writes, lists := 0, 0
	for _, rt := range apiRoutes(nil, nil, serveConfig{}) {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if method != "GET" {
			writes++
			if rt.key != writeKey {
				t.Errorf("%s writes, yet its key is %s, not writeKey: a read-only key could write", rt.pattern, keys[rt.key])
			}
			if rt.rw != rwWrite {
				t.Errorf("%s writes, yet it is %s, not rwWrite: its answer would carry no Petstore-Read-After", rt.pattern, rws[rt.rw])
			}
		} else if rt.key == writeKey || rt.rw == rwWrite {
			t.Errorf("%s reads, yet it is marked as a write (%s, %s)", rt.pattern, keys[rt.key], rws[rt.rw])
		}
		if rt.area == nil || !rt.area.holds(path) {
			t.Errorf("%s is not in its area %+v", rt.pattern, rt.area)
		}
		isList := doc.Paths[strings.TrimPrefix(path, "/v1")][strings.ToLower(method)].Responses["200"].Content["application/json"].Schema.Type == "array"
		if isList != (rt.list != notList) {
			t.Errorf("%s: its 200 is an array in the document: %v; its list bound: %d", rt.pattern, isList, rt.list)
		}
		if isList {
			lists++
		}
	}
	if writes < 3 || lists < 3 {
		t.Errorf("%d writes and %d lists in the table, want the creates and the lists", writes, lists)
	}
}

// writeTarget returns a request for the write route pattern: its path with
// each parameter 1, and its body the example of doc (the served document).
func writeTarget(t *testing.T, doc []byte, pattern string) (method, path, body string) {
	t.Helper()
	var d struct {
		Paths map[string]map[string]struct {
			RequestBody struct {
				Content map[string]struct {
					Example json.RawMessage `json:"example"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	method, path, _ = strings.Cut(pattern, " ")
	example := d.Paths[strings.TrimPrefix(path, "/v1")][strings.ToLower(method)].RequestBody.Content["application/json"].Example
	for strings.Contains(path, "{") {
		i, j := strings.Index(path, "{"), strings.Index(path, "}")
		path = path[:i] + "1" + path[j+1:]
	}
	return method, path, string(example)
}

// TestWriteRoutesRefuseReadOnlyKeys sends every route of the table that
// writes, with its document's example body, and a read-only key: each is
// 403 forbidden, made from the route table alone, so a new write route is
// covered by itself. The same key reads (waitStatus): its refusals are the
// scope's.
func TestWriteRoutesRefuseReadOnlyKeys(t *testing.T) {
	ts := startServer(t)
	readOnly := createKey(t, ts.db, "--plan", "business", "--scope", "read")
	waitStatus(t, ts, readOnly, 200) // the running server has it
	doc := servedDocument(t, false)
	writes := 0
	for _, rt := range apiRoutes(nil, nil, serveConfig{}) {
		if strings.HasPrefix(rt.pattern, "GET ") {
			continue
		}
		writes++
		method, path, body := writeTarget(t, doc, rt.pattern)
		r := ts.do(t, method, path, readOnly, body)
		if r.status != 403 {
			t.Errorf("%s with a read-only key: %d %s, want 403 forbidden", rt.pattern, r.status, r.body)
		}
	}
	if writes < 3 {
		t.Errorf("%d write routes, want the creates at least", writes)
	}
}

// TestWritesCarryReadAfter (PostgreSQL) sends every route of the table
// that reads or writes the database, a write with its document's example
// body and its path's ids 1 (a category, pets 1 to 7 and orders 1 to 3
// exist):
// each 2xx carries Petstore-Read-After, a write's at least the position
// of the answer before it.
func TestWritesCarryReadAfter(t *testing.T) {
	needPostgres(t)
	ts := startServer(t, "--pets-sunset-at", "2999-01-01")
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Seed"}`)
	for i := range 7 {
		ts.do(t, "POST", "/v1/pets", ts.key, fmt.Sprintf(`{"name":"Pet %d","categoryId":1}`, i))
	}
	for range 3 { // order 3 is the document's example; none names pet 1, which is deleted
		ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":2,"quantity":1}`)
	}
	doc := servedDocument(t, false)
	ops := servedDocOps(t, ts)
	var last uint64
	checked := 0
	for _, rt := range apiRoutes(nil, nil, serveConfig{}) {
		if rt.rw == rwNone && rt.pattern != "GET /v1/openapi.json" {
			t.Errorf("%s: rwNone, yet only the document reads no database", rt.pattern)
		}
		if rt.pattern == "GET /v1/openapi.json" {
			continue
		}
		method, path, body := writeTarget(t, doc, rt.pattern)
		if method == "GET" {
			path = ops[rt.pattern].target(strings.TrimPrefix(rt.pattern, "GET ")) // its examples' ids: pet 7 exists
		}
		r := ts.do(t, method, path, ts.key, body)
		if r.status/100 != 2 {
			t.Errorf("%s %s: %d %s, want a 2xx to check", method, path, r.status, r.body)
			continue
		}
		checked++
		pos, ok := parseReadPos(r.header.Get(readAfterHeader))
		switch {
		case !ok:
			t.Errorf("%s %s: %d without %s: the route does not carry read-your-writes", method, path, r.status, readAfterHeader)
		case method != "GET" && pos < last:
			t.Errorf("%s %s: position %x, before the one already seen %x", method, path, pos, last)
		}
		last = max(last, pos)
	}
	if checked < 6 {
		t.Errorf("%d routes checked, want every one that reads or writes the database", checked)
	}
}

// TestListsAreBounded holds every list to a bound on what one read of the
// database returns. A paged list (listPaged) answers ?limit=1 with one
// row and a Link to the next page. A chunked one streams a catalogStore
// method named Each... that takes no limit: each store's implementation of
// every such method must read through inChunks (sqliteEachChunk, pgChunks),
// never as one query over the whole table.
func TestListsAreBounded(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, name := range names {
		if !strings.HasSuffix(name, "_test.go") {
			if files[name], err = parser.ParseFile(fset, name, nil, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The catalog's Each methods without a limit: the chunked lists.
	chunked := map[string]bool{}
	ast.Inspect(files["store.go"], func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "catalogStore" {
			return true
		}
		for _, m := range ts.Type.(*ast.InterfaceType).Methods.List {
			name := m.Names[0].Name
			if !strings.HasPrefix(name, "Each") {
				continue
			}
			paged := false
			for _, p := range m.Type.(*ast.FuncType).Params.List {
				for _, n := range p.Names {
					paged = paged || n.Name == "limit"
				}
			}
			chunked[name] = !paged
		}
		return false
	})
	if len(chunked) < 3 {
		t.Fatalf("%d Each methods on catalogStore, want the lists' (EachCategory, EachPet, EachOrder...)", len(chunked))
	}
	found := map[string]int{}
	for name, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !chunked[fd.Name.Name] {
				continue
			}
			recv := fmt.Sprint(fd.Recv.List[0].Type.(*ast.StarExpr).X)
			if recv != "sqliteStore" && recv != "pgStore" {
				continue
			}
			found[fd.Name.Name]++
			inChunks := false
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					fun := c.Fun
					if ix, ok := fun.(*ast.IndexExpr); ok { // an explicit type argument
						fun = ix.X
					}
					if id, ok := fun.(*ast.Ident); ok && slices.Contains([]string{"inChunks", "sqliteEachChunk", "pgChunks"}, id.Name) {
						inChunks = true
					}
				}
				return !inChunks
			})
			if !inChunks {
				t.Errorf("%s: %s.%s reads its list without inChunks (sqliteEachChunk, pgChunks): one query over the whole table is unbounded", name, recv, fd.Name.Name)
			}
		}
	}
	for name, chunks := range chunked {
		if chunks && found[name] != 2 {
			t.Errorf("%s: %d implementations found, want SQLite's and PostgreSQL's", name, found[name])
		}
	}

	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"One"}`)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Two"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"One","categoryId":1}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Two","categoryId":1}`)
	ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":1}`)
	ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":2,"quantity":1}`)
	for _, rt := range apiRoutes(nil, nil, serveConfig{}) {
		if rt.list != listPaged {
			continue
		}
		path := strings.TrimPrefix(rt.pattern, "GET ")
		r := ts.do(t, "GET", path+"?limit=1", ts.key, "")
		var rows []json.RawMessage
		if err := json.Unmarshal(r.body, &rows); err != nil || r.status != 200 || len(rows) != 1 || r.header.Get("Link") == "" {
			t.Errorf("%s?limit=1: %d, %d rows, Link %q (%v), want one row and a Link to the next page", path, r.status, len(rows), r.header.Get("Link"), err)
		}
	}
}
