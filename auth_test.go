package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
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

func TestAuthentication(t *testing.T) {
	ts := startServer(t)
	staging := createKey(t, ts.db, "--plan", "free", "--env", "staging")
	revoked := createKey(t, ts.db, "--plan", "free")
	if _, _, err := runCLI(t, nil, "keys", "revoke", "3", "--db", ts.db); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		auth       string
		wantStatus int
	}{
		{"no header", "", 401},
		{"valid", "Bearer " + ts.key, 200},
		{"lower-case scheme", "bearer " + ts.key, 200},
		{"upper-case scheme", "BEARER " + ts.key, 200},
		{"basic scheme", "Basic " + ts.key, 401},
		{"no scheme", ts.key, 401},
		{"scheme only", "Bearer", 401},
		{"two spaces", "Bearer  " + ts.key, 401},
		{"one character changed", "Bearer " + ts.key[:len(ts.key)-1] + flip(ts.key[len(ts.key)-1]), 401},
		{"upper-cased key", "Bearer " + strings.ToUpper(ts.key), 401},
		{"key with suffix", "Bearer " + ts.key + "x", 401},
		{"key with a no-break space", "Bearer " + ts.key + "\u00a0", 401},
		{"key with a leading space", "Bearer  " + ts.key, 401},
		{"truncated key", "Bearer " + ts.key[:len(ts.key)-1], 401},
		{"staging key on production", "Bearer " + staging, 401},
		{"revoked key", "Bearer " + revoked, 401},
		{"unknown well-formed key", "Bearer ps_live_" + strings.Repeat("A", 40), 401},
	}
	var messages []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.auth != "" {
				hdr = []string{"Authorization", tt.auth}
			}
			r := ts.do(t, "GET", "/v1/categories", "", "", hdr...)
			if tt.wantStatus == 200 {
				if r.status != 200 {
					t.Fatalf("status = %d, want 200; %s", r.status, r.body)
				}
				return
			}
			wantError(t, r, 401, "unauthorized")
			if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="petstore"` {
				t.Errorf("WWW-Authenticate = %q", got)
			}
			messages = append(messages, string(r.body))
			if strings.Contains(string(r.body), "ps_") {
				t.Errorf("error body mentions a key: %s", r.body)
			}
		})
	}
	for _, m := range messages[1:] {
		if m != messages[0] {
			t.Errorf("401 bodies differ, revealing why: %s vs %s", m, messages[0])
		}
	}
	// POST is refused before its body is looked at.
	wantError(t, ts.do(t, "POST", "/v1/categories", "", `{"name":"x"}`), 401, "unauthorized")
}

func flip(c byte) string {
	if c == 'a' {
		return "b"
	}
	return "a"
}

func TestKeysAreHashedAtRest(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db")
	key := createKey(t, db, "--plan", "pro")
	ts := startServerOn(t, db, key)
	if r := ts.do(t, "GET", "/v1/categories", key, ""); r.status != 200 {
		t.Fatalf("status = %d", r.status)
	}
	ts.stop()
	secret := strings.TrimPrefix(key, "ps_live_")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(db + suffix)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the key in clear", db+suffix)
		}
	}
	if strings.Contains(ts.stderr.String(), secret) {
		t.Errorf("the server log holds the key")
	}
}

func TestKeyChangesReachRunningServer(t *testing.T) {
	ts := startServer(t)
	fresh := createKey(t, ts.db, "--plan", "free")
	waitStatus(t, ts, fresh, 200)
	if _, _, err := runCLI(t, nil, "keys", "revoke", "2", "--db", ts.db); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, ts, fresh, 401)
}

func TestFirstRunKey(t *testing.T) {
	db := filepath.Join(t.TempDir(), "new.db")
	ts := startServerOn(t, db, "")
	m := regexp.MustCompile(`(?m)^(ps_live_[0-9A-Za-z]{40})$`).FindStringSubmatch(ts.stderr.String())
	if m == nil {
		t.Fatalf("no first-run key printed:\n%s", ts.stderr.String())
	}
	if r := ts.do(t, "GET", "/v1/categories", m[1], ""); r.status != 200 {
		t.Errorf("first-run key: status %d", r.status)
	}
	out, _, err := runCLI(t, nil, "keys", "list", "--json", "--db", db)
	if err != nil {
		t.Fatal(err)
	}
	keys := decode[[]map[string]any](t, response{body: []byte(out)})
	if len(keys) != 1 || keys[0]["plan"] != "free" || keys[0]["env"] != "production" {
		t.Errorf("keys after first run: %s", out)
	}
	ts.stop()

	again := startServerOn(t, db, "")
	if strings.Contains(again.stderr.String(), "ps_live_") {
		t.Errorf("second start printed a key again")
	}
}
