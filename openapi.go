// openapi.go owns the served OpenAPI document: the embedded openapi.json
// with the server's own base address and the HEAD operation of each GET,
// made from the GET.

package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

//go:embed openapi.json
var openAPISource []byte

// openAPIDocument returns the embedded OpenAPI document with the server's
// own base address in its servers list, and a HEAD beside each GET (see
// headOperation). Its keys are sorted, so the same source gives the same
// bytes, and ETag, on every start. Its numbers are kept as written
// (an int64's maximum is no float64), and it is ASCII, as openapi.json
// is: a name pattern's bidi controls and invisible characters stay
// escapes, which cannot reorder or hide the text around them where the
// document is shown.
func openAPIDocument(publicURL, env string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(openAPISource))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("embedded openapi.json: %w", err)
	}
	doc["servers"] = []map[string]string{{"url": publicURL, "description": env}}
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
// publicURL and env, as docs.go serves the page's files: gzip to a client
// that accepts it, else identity, each with an ETag of its own (answering
// If-None-Match with 304). The document, its gzip and their tags are made
// once, in the background from the start: start-up need not wait for
// them, and a request rarely does.
func handleOpenAPI(publicURL, env string) http.Handler {
	doc := sync.OnceValues(func() (*openAPIServed, error) { return serveOpenAPI(publicURL, env) })
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

func serveOpenAPI(publicURL, env string) (*openAPIServed, error) {
	plain, err := openAPIDocument(publicURL, env)
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
