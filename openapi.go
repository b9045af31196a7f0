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
)

//go:embed openapi.json
var openAPISource []byte

// openAPIDocument returns the embedded OpenAPI document with the server's
// own base address in its servers list.
func openAPIDocument(publicURL, env string) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(openAPISource, &doc); err != nil {
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
	return out.Bytes(), nil
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
