package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"unicode/utf8"
)

func TestHealthReadyAndOpenAPI(t *testing.T) {
	ts := startServer(t, "--public-url", "https://api.example.test/v1", "--env", "production")
	r := ts.do(t, "GET", "/healthz", "", "")
	if h := decode[map[string]string](t, r); r.status != 200 || h["status"] != "ok" || h["env"] != "production" {
		t.Errorf("/healthz: %d %s", r.status, r.body)
	}
	r = ts.do(t, "GET", "/readyz", "", "")
	if r.status != 200 {
		t.Errorf("/readyz: %d %s", r.status, r.body)
	}
	r = ts.do(t, "GET", "/v1/openapi.json", "", "")
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("/v1/openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Info    struct{ Version string }  `json:"info"`
		Servers []struct{ URL string }    `json:"servers"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Info.Version != "1.0.0" {
		t.Errorf("openapi %q version %q", doc.OpenAPI, doc.Info.Version)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "https://api.example.test/v1" {
		t.Errorf("servers = %+v, want the --public-url", doc.Servers)
	}
	// The contract checker validates against openAPIDocument's output: it
	// must be what the server serves, to the byte.
	if want, _ := openAPIDocument("https://api.example.test/v1", "production", apiDocOps()); !bytes.Equal(r.body, want) {
		t.Errorf("served document differs from openAPIDocument's")
	}
	for _, op := range []string{"get", "post"} {
		if _, ok := doc.Paths["/categories"][op]; !ok {
			t.Errorf("no %s /categories in the document", op)
		}
	}
	// But for its servers, the route table's facts (addStandardHeaders)
	// and the HEAD made of each GET, the served document is openapi.json,
	// every number exact (an int64's maximum is
	// no float64) and every string alike, in ASCII as the file is: a
	// pattern's bidi controls and invisible characters are escapes, not
	// characters that reorder or hide the text around them where the
	// document is shown.
	undecided := func(b []byte) map[string]any {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		delete(m, "servers")
		return m
	}
	served := undecided(r.body)
	for path, item := range served["paths"].(map[string]any) {
		item := item.(map[string]any)
		if _, ok := item["get"]; ok != (item["head"] != nil) {
			t.Errorf("%s: a GET %v, a HEAD %v; want a HEAD with each GET", path, ok, item["head"] != nil)
		}
		delete(item, "head")
	}
	source := undecided(openAPISource)
	if err := addStandardHeaders(source, apiDocOps()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(served, source) {
		t.Errorf("the served document is not openapi.json with the route table's facts")
	}
	if i := bytes.IndexFunc(r.body, func(r rune) bool { return r >= utf8.RuneSelf }); i >= 0 {
		t.Errorf("the served document has a character outside ASCII at byte %d: %q", i, r.body[i:min(i+20, len(r.body))])
	}
}

// TestOpenAPIDocumentStable: the served document, which openAPIDocument
// builds from openapi.json at start (the HEADs added), is the same bytes
// with the same ETags on every start, so that a client's cached copy
// stays valid across restarts and among instances.
func TestOpenAPIDocumentStable(t *testing.T) {
	first, err := serveOpenAPI("http://localhost:8080/v1", "production", apiDocOps())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 { // a map ranged in another order each time must not show
		again, err := serveOpenAPI("http://localhost:8080/v1", "production", apiDocOps())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.plain, first.plain) || !bytes.Equal(again.gzip, first.gzip) ||
			again.plainETag[0] != first.plainETag[0] || again.gzipETag[0] != first.gzipETag[0] {
			t.Fatalf("two starts serve different documents: ETags %s and %s", first.plainETag[0], again.plainETag[0])
		}
	}
}

// TestOpenAPIETagAndGzip checks /v1/openapi.json's caching and
// compression (DECISIONS.md section 18): gzip to a client that accepts
// it, the same document decompressed as the identity answer, each with an
// ETag of its own and Vary: Accept-Encoding, 304 for If-None-Match with
// it; HEAD with GET's headers. Every answer, 304s too, is on the keyless
// budget with its rate-limit headers (section 5).
func TestOpenAPIETagAndGzip(t *testing.T) {
	ts := startServer(t)
	plain := ts.do(t, "GET", "/v1/openapi.json", "", "", "Accept-Encoding", "identity")
	gz := ts.do(t, "GET", "/v1/openapi.json", "", "", "Accept-Encoding", "br;q=1, gzip;q=0.5")
	want, err := openAPIDocument("http://localhost:8080/v1", "production", apiDocOps())
	if err != nil {
		t.Fatal(err)
	}
	if plain.status != 200 || !bytes.Equal(plain.body, want) || plain.header.Get("Content-Encoding") != "" {
		t.Fatalf("identity: %d, Content-Encoding %q, %d bytes; want 200 and the document", plain.status, plain.header.Get("Content-Encoding"), len(plain.body))
	}
	if gz.status != 200 || gz.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip: %d, Content-Encoding %q; want 200 gzip", gz.status, gz.header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz.body))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(unzipped, want) {
		t.Errorf("the gzip answer decompresses to %d bytes (%v), want the document's %d", len(unzipped), err, len(want))
	}
	if len(gz.body)*5 > len(want) {
		t.Errorf("gzip sent %d bytes of a %d-byte document", len(gz.body), len(want))
	}
	etags := map[string]response{"identity": plain, "gzip": gz}
	for enc, r := range etags {
		if r.header.Get("ETag") == "" || r.header.Get("Vary") != "Accept-Encoding" || r.header.Get("Content-Length") != strconv.Itoa(len(r.body)) {
			t.Errorf("%s: ETag %q, Vary %q, Content-Length %q of %d bytes", enc, r.header.Get("ETag"), r.header.Get("Vary"), r.header.Get("Content-Length"), len(r.body))
		}
	}
	if plain.header.Get("ETag") == gz.header.Get("ETag") {
		t.Errorf("identity and gzip share the ETag %q: a cache would mix them up", gz.header.Get("ETag"))
	}
	for enc, r := range etags {
		for _, ae := range []string{enc, enc + ", deflate"} {
			nm := ts.do(t, "GET", "/v1/openapi.json", "", "", "Accept-Encoding", ae, "If-None-Match", `"x", `+r.header.Get("ETag"))
			if nm.status != http.StatusNotModified || len(nm.body) != 0 || nm.header.Get("ETag") != r.header.Get("ETag") ||
				nm.header.Get("Content-Encoding") != "" || nm.header.Get("X-RateLimit-Limit") == "" {
				t.Errorf("%s, If-None-Match with its ETag: %d, %d bytes, ETag %q, Content-Encoding %q, X-RateLimit-Limit %q; want 304, no body, the ETag, rate-limit headers",
					ae, nm.status, len(nm.body), nm.header.Get("ETag"), nm.header.Get("Content-Encoding"), nm.header.Get("X-RateLimit-Limit"))
			}
		}
		head := ts.do(t, "HEAD", "/v1/openapi.json", "", "", "Accept-Encoding", enc)
		for _, h := range []string{"ETag", "Content-Encoding", "Content-Length", "Vary", "Content-Type"} {
			if head.header.Get(h) != r.header.Get(h) {
				t.Errorf("HEAD, %s: %s %q, GET's %q", enc, h, head.header.Get(h), r.header.Get(h))
			}
		}
	}
	if other := ts.do(t, "GET", "/v1/openapi.json", "", "", "Accept-Encoding", "identity", "If-None-Match", gz.header.Get("ETag")); other.status != 200 {
		t.Errorf("identity asked with the gzip answer's ETag: %d, want 200", other.status)
	}
	for _, r := range []response{plain, gz} {
		if r.header.Get("X-RateLimit-Limit") != "60" {
			t.Errorf("X-RateLimit-Limit %q, want the keyless 60", r.header.Get("X-RateLimit-Limit"))
		}
	}
}
