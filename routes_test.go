package main

import (
	"io"
	"net/http"
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
