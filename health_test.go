package main

import (
	"bytes"
	"encoding/json"
	"reflect"
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
	if want, _ := openAPIDocument("https://api.example.test/v1", "production"); !bytes.Equal(r.body, want) {
		t.Errorf("served document differs from openAPIDocument's")
	}
	for _, op := range []string{"get", "post"} {
		if _, ok := doc.Paths["/categories"][op]; !ok {
			t.Errorf("no %s /categories in the document", op)
		}
	}
	// But for its servers, the served document is openapi.json, every
	// number exact (an int64's maximum is no float64) and every string
	// alike, in ASCII as the file is: a pattern's bidi controls and
	// invisible characters are escapes, not characters that reorder or
	// hide the text around them where the document is shown.
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
	if !reflect.DeepEqual(undecided(r.body), undecided(openAPISource)) {
		t.Errorf("the served document is not openapi.json")
	}
	if i := bytes.IndexFunc(r.body, func(r rune) bool { return r >= utf8.RuneSelf }); i >= 0 {
		t.Errorf("the served document has a character outside ASCII at byte %d: %q", i, r.body[i:min(i+20, len(r.body))])
	}
}
