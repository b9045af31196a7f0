// openapi.go owns the served OpenAPI document: the embedded openapi.json
// with the server's own base address.

package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

//go:embed openapi.json
var openAPISource []byte

// openAPIDocument returns the embedded OpenAPI document with the server's
// own base address in its servers list. Its numbers are kept as written
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
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("embedded openapi.json: %w", err)
	}
	return asciiJSON(out.Bytes()), nil
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
// publicURL and env, made on the first request: start-up need not wait
// for it.
func handleOpenAPI(publicURL, env string) http.Handler {
	doc := sync.OnceValues(func() ([]byte, error) { return openAPIDocument(publicURL, env) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := doc()
		if err != nil {
			writeError(w, r, err)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
}
