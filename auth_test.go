package main

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestBearerToken(t *testing.T) {
	tests := []struct {
		header, want string
		ok           bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BeArEr abc", "abc", true},
		{"Bearer  abc", " abc", true}, // taken as is, so it fails the key format
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic abc", "", false},
		{"abc", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, ok := bearerToken(tt.header)
		if got != tt.want || ok != tt.ok {
			t.Errorf("bearerToken(%q) = %q, %v; want %q, %v", tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

func TestKeyFormat(t *testing.T) {
	for _, env := range environments {
		seen := map[string]bool{}
		for range 100 {
			k := newKeySecret(env)
			if !validKeyFormat(k, env) {
				t.Fatalf("newKeySecret(%s) = %q, which validKeyFormat refuses", env, k)
			}
			other := "staging"
			if env == "staging" {
				other = "production"
			}
			if validKeyFormat(k, other) {
				t.Errorf("%q passes as a %s key", k, other)
			}
			if seen[k] {
				t.Fatalf("newKeySecret repeated %q", k)
			}
			seen[k] = true
		}
	}
	good := "ps_live_" + strings.Repeat("a", 32)
	tests := []struct {
		key  string
		want bool
	}{
		{good, true},
		{"ps_live_" + strings.Repeat("Z9", 60), true},
		{"ps_live_" + strings.Repeat("a", 31), false},
		{"ps_live_" + strings.Repeat("a", 121), false},
		{"PS_LIVE_" + strings.Repeat("a", 32), false},
		{good + " ", false},
		{good + "-", false},
		{"ps_live_" + strings.Repeat("é", 32), false},
		{"ps_test_" + strings.Repeat("a", 32), false},
		{"", false},
	}
	for _, tt := range tests {
		if got := validKeyFormat(tt.key, "production"); got != tt.want {
			t.Errorf("validKeyFormat(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

// Every authenticated request hashes its key: that must not allocate.
func TestHashKeyDoesNotAllocate(t *testing.T) {
	key := newKeySecret("production")
	if n := testing.AllocsPerRun(100, func() { hashKey(key) }); n != 0 {
		t.Errorf("hashKey allocates %.0f times", n)
	}
	if hashKey(key) != sha256.Sum256([]byte(key)) {
		t.Error("hashKey is not the SHA-256 of the key")
	}
}

// writerWrapper is a layer that wraps the ResponseWriter, as a compressing
// or tracing middleware would.
type writerWrapper struct{ http.ResponseWriter }

// TestRequireKeyWhateverWrapsTheWriter checks that a request without a
// usable key never reaches a handler behind requireKey, however the
// ResponseWriter is wrapped: requireKey reads the key that authenticate
// put in the request's state, never anything of the writer.
func TestRequireKeyWhateverWrapsTheWriter(t *testing.T) {
	reached := false
	h := requireKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached = true
		w.WriteHeader(http.StatusNoContent)
	}))
	writers := map[string]func(http.ResponseWriter) http.ResponseWriter{
		"bare":                 func(w http.ResponseWriter) http.ResponseWriter { return w },
		"log recorder":         func(w http.ResponseWriter) http.ResponseWriter { return &recorder{ResponseWriter: w} },
		"recorder with status": func(w http.ResponseWriter) http.ResponseWriter { return &recorder{ResponseWriter: w, status: 200} },
		"foreign wrapper":      func(w http.ResponseWriter) http.ResponseWriter { return writerWrapper{w} },
		"wrapped recorder":     func(w http.ResponseWriter) http.ResponseWriter { return writerWrapper{&recorder{ResponseWriter: w}} },
	}
	key := &apiKey{ID: 7, Plan: "free", Env: "production"}
	requests := map[string]struct {
		state *reqState
		want  int
	}{
		"no state":          {nil, http.StatusUnauthorized},
		"state without key": {&reqState{}, http.StatusUnauthorized},
		"state with a key":  {&reqState{key: key}, http.StatusNoContent},
	}
	for wname, wrap := range writers {
		for rname, tt := range requests {
			reached = false
			r := httptest.NewRequest("GET", "/v1/categories", nil)
			r.Header.Set("Authorization", "Bearer ps_live_"+strings.Repeat("a", 40))
			if tt.state != nil {
				r = withState(r, tt.state)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(wrap(w), r)
			if w.Code != tt.want || reached != (tt.want == http.StatusNoContent) {
				t.Errorf("%s, %s: status %d, handler reached %v; want %d", wname, rname, w.Code, reached, tt.want)
			}
			if tt.want == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s, %s: a 401 without WWW-Authenticate", wname, rname)
			}
		}
	}

	// The same through the whole API, behind a layer that wraps the writer
	// before the chain sees it: only the valid key gets past requireKey.
	api, secret, _ := benchServer(t)
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { api.ServeHTTP(writerWrapper{w}, r) })
	for _, auth := range []string{"", "Bearer", "Bearer " + secret + "x", "Bearer " + strings.Replace(secret, "ps_live_", "ps_test_", 1), "Basic " + secret, "Bearer " + secret} {
		for _, target := range []struct{ method, path, body string }{
			{"GET", "/v1/categories", ""},
			{"POST", "/v1/categories", `{"name":"wrapped ` + strconv.Itoa(len(auth)) + `"}`},
			{"GET", "/v1/pets", ""},
			{"GET", "/v1/store/orders", ""},
		} {
			r := httptest.NewRequest(target.method, target.path, strings.NewReader(target.body))
			r.Header.Set("Content-Type", "application/json")
			if auth != "" {
				r.Header.Set("Authorization", auth)
			}
			w := httptest.NewRecorder()
			outer.ServeHTTP(w, r)
			valid := auth == "Bearer "+secret
			if valid && w.Code/100 != 2 || !valid && (w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), `"unauthorized"`)) {
				t.Errorf("%s %s with %q (valid %v): %d %s", target.method, target.path, auth, valid, w.Code, w.Body.String())
			}
		}
	}
}
