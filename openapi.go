// openapi.go owns the served OpenAPI document: the embedded openapi.json
// with the server's own base address, what the route table's facts say of
// each operation (its stability, and the standard headers on every
// response), and the HEAD operation of each GET, made from the GET.

package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

//go:embed openapi.json
var openAPISource []byte

// openAPIDocument returns the embedded OpenAPI document with the server's
// own base address in its servers list, what ops (the route table's
// facts) say of each operation (addStandardHeaders), and a HEAD beside
// each GET (see headOperation). Its keys are sorted, so the same source gives the same
// bytes, and ETag, on every start. Its numbers are kept as written
// (an int64's maximum is no float64), and it is ASCII, as openapi.json
// is: a name pattern's bidi controls and invisible characters stay
// escapes, which cannot reorder or hide the text around them where the
// document is shown.
func openAPIDocument(publicURL, env string, ops map[string]docOp) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(openAPISource))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("embedded openapi.json: %w", err)
	}
	doc["servers"] = []map[string]string{{"url": publicURL, "description": env}}
	if err := addStandardHeaders(doc, ops); err != nil {
		return nil, fmt.Errorf("embedded openapi.json: %w", err)
	}
	if err := addHeadOperations(doc); err != nil {
		return nil, fmt.Errorf("embedded openapi.json: %w", err)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("embedded openapi.json: %w", err)
	}
	return asciiJSON(out.Bytes()), nil
}

// docOp is what the served document takes of a route's facts (routes.go).
type docOp struct {
	area       *apiArea
	rw         rwUse
	deprecated bool
}

// docOps returns the facts of routes by operation as the document names
// them: "get /pets/{petId}", the path under /v1.
func docOps(routes []route) map[string]docOp {
	ops := make(map[string]docOp, len(routes))
	for _, rt := range routes {
		method, path, _ := strings.Cut(rt.pattern, " ")
		ops[strings.ToLower(method)+" "+strings.TrimPrefix(path, "/v1")] = docOp{rt.area, rt.rw, rt.deprecated}
	}
	return ops
}

// The headers that addStandardHeaders puts on responses: every one's, and
// a deprecated operation's.
var (
	standardHeaders    = []string{"X-Request-Id", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"}
	deprecationHeaders = []string{"Deprecation", "Sunset", "Link"}
)

// addStandardHeaders gives each operation of doc what its route's facts
// in ops say, so that openapi.json writes none of it by hand: its
// x-stability (its area's); and on each of its responses the request id
// and rate-limit headers, X-API-Stability in an area that is not stable,
// the deprecation headers on a deprecated operation's, and
// Petstore-Read-After on a 2xx or 304 of one that reads or writes the
// database. A shared response (components.responses) gets the request id
// and rate-limit headers, and a copy for each area that is not stable,
// with the area's header (PetsNotFound), which the area's operations
// refer to; a deprecated operation's are written out in it. The shared
// ones that no operation refers to then go. The definitions of the headers
// come from x-standard-headers into components.headers (openapi.json has
// no reference to them, so they are kept apart).
func addStandardHeaders(doc map[string]any, ops map[string]docOp) error {
	components, _ := doc["components"].(map[string]any)
	headers, _ := components["headers"].(map[string]any)
	responses, _ := components["responses"].(map[string]any)
	std, _ := doc["x-standard-headers"].(map[string]any)
	if headers == nil || responses == nil || std == nil {
		return fmt.Errorf("no components.headers, components.responses or x-standard-headers")
	}
	for name, h := range std {
		if _, ok := headers[name]; ok {
			return fmt.Errorf("header %s is in x-standard-headers and components.headers", name)
		}
		headers[name] = h
	}
	delete(doc, "x-standard-headers")
	for name, v := range responses {
		r, _ := v.(map[string]any)
		if err := addHeaders(r, standardHeaders...); err != nil {
			return fmt.Errorf("components.responses.%s: %w", name, err)
		}
	}
	used, made := map[string]bool{}, map[string]bool{}
	ops = maps.Clone(ops) // each is crossed off as its operation is met
	paths, _ := doc["paths"].(map[string]any)
	for path, v := range paths {
		item, _ := v.(map[string]any)
		for method, v := range item {
			op, ok := v.(map[string]any)
			if !ok || !slices.Contains(docMethods, method) {
				continue
			}
			where := strings.ToUpper(method) + " " + path
			f, ok := ops[method+" "+path]
			switch {
			case !ok || f.area == nil:
				return fmt.Errorf("%s: no route of the API has it", where)
			case op["x-stability"] != nil:
				return fmt.Errorf("%s: x-stability is its area's (areas.go), not openapi.json's", where)
			case (op["deprecated"] == true) != f.deprecated:
				return fmt.Errorf("%s: deprecated is %v in openapi.json, yet %v in the route table", where, op["deprecated"], f.deprecated)
			}
			op["x-stability"] = f.area.stability
			rs, _ := op["responses"].(map[string]any)
			for status, v := range rs {
				r, _ := v.(map[string]any)
				ref, _ := r["$ref"].(string)
				name, shared := strings.CutPrefix(ref, "#/components/responses/")
				base, _ := responses[name].(map[string]any)
				if shared && base == nil {
					return fmt.Errorf("%s %s: %s is no response of components.responses", where, status, ref)
				}
				if shared && !f.deprecated {
					if f.area.component != "" {
						name, base = f.area.component+name, areaResponse(responses, made, f.area, name, base)
						rs[status] = map[string]any{"$ref": "#/components/responses/" + name}
					}
					if base == nil {
						return fmt.Errorf("%s %s: components.responses.%s is written by hand: it is made from %s", where, status, name, ref)
					}
					used[name] = true
					continue
				}
				if shared { // a deprecated operation's own copy
					r = copyResponse(base)
					rs[status] = r
				} else if err := addHeaders(r, standardHeaders...); err != nil {
					return fmt.Errorf("%s %s: %w", where, status, err)
				}
				var err error
				if f.area.stability != "stable" {
					err = addHeader(r, "X-API-Stability", stabilityComponent(f.area))
				}
				if err == nil && f.deprecated {
					err = addHeaders(r, deprecationHeaders...)
				}
				if err == nil && f.rw != rwNone && !shared && (status[0] == '2' || status == "304") {
					err = addHeader(r, readAfterHeader, readAfterHeader)
				}
				if err != nil {
					return fmt.Errorf("%s %s: %w", where, status, err)
				}
			}
			delete(ops, method+" "+path)
		}
	}
	for op := range ops {
		return fmt.Errorf("%s is routed but not in openapi.json", op)
	}
	for name := range responses {
		if !used[name] {
			delete(responses, name)
		}
	}
	return nil
}

// docMethods are the keys of a path item that are operations.
var docMethods = []string{"get", "put", "post", "delete", "patch", "options", "trace"}

// areaResponse returns the copy of the shared response name (base) for
// area, with its stability header, made on first need (made notes the
// ones made); nil when openapi.json wrote one by hand.
func areaResponse(responses map[string]any, made map[string]bool, area *apiArea, name string, base map[string]any) map[string]any {
	own := area.component + name
	if r, ok := responses[own].(map[string]any); ok {
		if !made[own] {
			return nil
		}
		return r
	}
	r := copyResponse(base)
	addHeader(r, "X-API-Stability", stabilityComponent(area))
	made[own] = true
	responses[own] = r
	return r
}

// stabilityComponent names the component of area's X-API-Stability
// header: X-API-Stability-Beta.
func stabilityComponent(area *apiArea) string {
	return "X-API-Stability-" + strings.ToUpper(area.stability[:1]) + area.stability[1:]
}

// addHeaders puts the headers names on response r, each a $ref to the
// component of its name.
func addHeaders(r map[string]any, names ...string) error {
	for _, name := range names {
		if err := addHeader(r, name, name); err != nil {
			return err
		}
	}
	return nil
}

// addHeader puts header name on response r as a $ref to
// components.headers.component; one that openapi.json wrote by hand is an
// error: it is made here.
func addHeader(r map[string]any, name, component string) error {
	h, _ := r["headers"].(map[string]any)
	if h == nil {
		h = map[string]any{}
		r["headers"] = h
	}
	if _, ok := h[name]; ok {
		return fmt.Errorf("header %s is written by hand: it is made from the route table", name)
	}
	h[name] = map[string]any{"$ref": "#/components/headers/" + component}
	return nil
}

// copyResponse copies response r deep enough for headers to be added to
// the copy alone.
func copyResponse(r map[string]any) map[string]any {
	c := maps.Clone(r)
	if h, ok := r["headers"].(map[string]any); ok {
		c["headers"] = maps.Clone(h)
	}
	return c
}

// addHeadOperations gives each path of doc that has a GET its HEAD, made
// by headOperation: the router answers HEAD for every GET pattern, and
// openapi.json holds no HEAD of its own, so that one cannot drift from
// its GET.
func addHeadOperations(doc map[string]any) error {
	paths, _ := doc["paths"].(map[string]any)
	components, _ := doc["components"].(map[string]any)
	responses, _ := components["responses"].(map[string]any)
	for path, v := range paths {
		item, _ := v.(map[string]any)
		if _, ok := item["head"]; ok {
			return fmt.Errorf("HEAD %s: a HEAD is made from its GET; openapi.json has none", path)
		}
		get, ok := item["get"].(map[string]any)
		if !ok {
			continue
		}
		head, err := headOperation(path, get, responses)
		if err != nil {
			return err
		}
		item["head"] = head
	}
	return nil
}

// headOperation is the HEAD of the GET at path: the GET's parameters,
// security, stability and deprecation, its statuses with their
// descriptions and headers (a response that is a $ref to
// components.responses taken from there), and no body. Its operationId is
// the GET's with "head" for "get" or "list" (listPets, headPets).
func headOperation(path string, get, responses map[string]any) (map[string]any, error) {
	head := map[string]any{}
	for k, v := range get {
		head[k] = v
	}
	id, _ := get["operationId"].(string)
	summary, _ := get["summary"].(string)
	if id == "" || summary == "" {
		return nil, fmt.Errorf("GET %s: no operationId or summary", path)
	}
	name := strings.TrimPrefix(id, "get")
	if name == id {
		name = strings.TrimPrefix(id, "list")
	}
	if name == id || name == "" || name[0] < 'A' || name[0] > 'Z' {
		name = strings.ToUpper(id[:1]) + id[1:]
	}
	head["operationId"] = "head" + name
	head["summary"] = summary + ", headers only"
	desc := "`GET " + path + "` without the body: the same parameters, statuses and headers"
	gets, _ := get["responses"].(map[string]any)
	if get["deprecated"] == true {
		desc += "; deprecated with it"
		if _, ok := gets["410"]; ok {
			desc += ", and retired (410) on the same date"
		}
	}
	head["description"] = desc + "."
	heads := map[string]any{}
	for status, v := range gets {
		r, _ := v.(map[string]any)
		if ref, ok := r["$ref"].(string); ok {
			name, found := strings.CutPrefix(ref, "#/components/responses/")
			r, _ = responses[name].(map[string]any)
			if !found || r == nil {
				return nil, fmt.Errorf("GET %s %s: %s is no response of components.responses", path, status, ref)
			}
		}
		h := map[string]any{}
		for k, v := range r {
			if k != "content" {
				h[k] = v
			}
		}
		heads[status] = h
	}
	head["responses"] = heads
	return head, nil
}

// asciiJSON escapes every code point outside ASCII in a JSON text as
// \uXXXX (a surrogate pair above U+FFFF). Outside ASCII there are only
// string contents, where the escape means the same.
func asciiJSON(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r < utf8.RuneSelf {
			out = append(out, b[0])
		} else {
			for _, u := range utf16.Encode([]rune{r}) {
				out = fmt.Appendf(out, `\u%04x`, u)
			}
		}
		b = b[n:]
	}
	return out
}

// handleOpenAPI serves the document that openAPIDocument makes for
// publicURL, env and the route table's facts ops, as docs.go serves the page's files: gzip to a client
// that accepts it, else identity, each with an ETag of its own (answering
// If-None-Match with 304). The document, its gzip and their tags are made
// once, in the background from the start: start-up need not wait for
// them, and a request rarely does.
func handleOpenAPI(publicURL, env string, ops map[string]docOp) http.Handler {
	doc := sync.OnceValues(func() (*openAPIServed, error) { return serveOpenAPI(publicURL, env, ops) })
	go doc()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := doc()
		if err != nil {
			writeError(w, r, err)
			return
		}
		h := w.Header()
		h.Add("Vary", "Accept-Encoding") // Add: CORS may have put Origin there
		body, etag := d.plain, d.plainETag
		if acceptsGzip(r.Header["Accept-Encoding"]) {
			body, etag = d.gzip, d.gzipETag
			h["Content-Encoding"] = gzipEncoding
		}
		h["Etag"] = etag
		if etagMatches(r.Header["If-None-Match"], etag[0]) {
			h.Del("Content-Encoding")
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h["Content-Type"] = jsonContentType
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			w.Write(body)
		}
	})
}

var gzipEncoding = []string{"gzip"}

// openAPIServed is the served document in both encodings, with their
// ETags as header values.
type openAPIServed struct {
	plain, gzip         []byte
	plainETag, gzipETag []string
}

func serveOpenAPI(publicURL, env string, ops map[string]docOp) (*openAPIServed, error) {
	plain, err := openAPIDocument(publicURL, env, ops)
	if err != nil {
		return nil, err
	}
	var zb bytes.Buffer
	zw, err := gzip.NewWriterLevel(&zb, gzip.BestCompression)
	if err == nil {
		_, err = zw.Write(plain)
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("gzip openapi.json: %w", err)
	}
	sum := sha256.Sum256(plain)
	tag := hex.EncodeToString(sum[:16])
	return &openAPIServed{
		plain: plain, gzip: zb.Bytes(),
		plainETag: []string{`"` + tag + `"`}, gzipETag: []string{`"` + tag + `-gzip"`},
	}, nil
}
