package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
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

func handleOpenAPI(doc []byte) http.Handler {
	length := strconv.Itoa(len(doc))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", length)
		w.Write(doc)
	})
}
