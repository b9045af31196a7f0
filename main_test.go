package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testVariables are the variables that let more tests run, as the
// README's table lists them; a test that needs one skips without it.
var testVariables = []struct{ name, what string }{
	{postgresEnv, "PostgreSQL"},
	{redisEnv, "Redis"},
	{browserEnv, "Chromium"},
	{promtoolEnv, "promtool"},
	{codegenEnv, "the client generators"},
}

// TestMain lets a test re-run this binary as the real petstore process
// (for kill tests): with PETSTORE_TEST_MAIN=1 it is main. Otherwise it
// first says, in one line on stderr, which test variables are unset: go
// test shows it in local directory mode (the README's command) and with
// -v, where a skipped test's own line shows only with -v.
func TestMain(m *testing.M) {
	if os.Getenv("PETSTORE_TEST_MAIN") == "1" {
		main()
		return
	}
	if path := os.Getenv("PETSTORE_TEST_LOCK"); path != "" {
		lockDatabase(path)
	}
	var unset []string
	for _, v := range testVariables {
		if os.Getenv(v.name) == "" {
			unset = append(unset, v.name+" ("+v.what+")")
		}
	}
	if len(unset) > 0 {
		fmt.Fprintf(os.Stderr, "petstore tests: not set, so the tests that need them skip: %s; see the README's Quick start\n", strings.Join(unset, ", "))
	}
	os.Exit(m.Run())
}

func TestCategoriesCreateAndList(t *testing.T) {
	ts := startServer(t)
	r := ts.do(t, "GET", "/v1/categories", ts.key, "")
	if r.status != 200 || string(r.body) != "[]\n" {
		t.Fatalf("empty list: status %d body %q, want 200 []", r.status, r.body)
	}

	r = ts.do(t, "POST", "/v1/categories", ts.key, `{"name": "  Dog\t", "description": "Loyal"}`)
	if r.status != 201 {
		t.Fatalf("status = %d, want 201; %s", r.status, r.body)
	}
	if got := string(r.body); got != `{"id":1,"name":"Dog","description":"Loyal"}`+"\n" {
		t.Errorf("created body = %s", got)
	}
	if loc := r.header.Get("Location"); loc != "" {
		t.Errorf("Location = %q, want none", loc)
	}
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name": "Cat"}`)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name": "Rabbit", "description": ""}`)

	r = ts.do(t, "GET", "/v1/categories", ts.key, "")
	want := `[{"id":1,"name":"Dog","description":"Loyal"},{"id":2,"name":"Cat"},{"id":3,"name":"Rabbit","description":""}]` + "\n"
	if r.status != 200 || string(r.body) != want {
		t.Errorf("list: status %d body %s, want %s", r.status, r.body, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
}

func TestCategoryValidation(t *testing.T) {
	ts := startServer(t)
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"dog"}`); r.status != 201 {
		t.Fatalf("seed: status %d", r.status)
	}
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"école"}`); r.status != 201 {
		t.Fatalf("seed: status %d", r.status)
	}
	long := strings.Repeat("x", 101)
	tests := []struct {
		name       string
		body       string
		header     []string
		wantStatus int
		wantCode   string
	}{
		{"missing name", `{"description":"x"}`, nil, 400, "validation_failed"},
		{"null name", `{"name":null}`, nil, 400, "validation_failed"},
		{"empty name", `{"name":""}`, nil, 400, "validation_failed"},
		{"blank name", `{"name":" \t\n "}`, nil, 400, "validation_failed"},
		{"101 characters", `{"name":"` + long + `"}`, nil, 400, "validation_failed"},
		{"101 code points", `{"name":"` + strings.Repeat("é", 101) + `"}`, nil, 400, "validation_failed"},
		{"control character", `{"name":"a\u0007b"}`, nil, 400, "validation_failed"},
		{"NUL", `{"name":"a\u0000b"}`, nil, 400, "validation_failed"},
		{"newline inside", `{"name":"a\nb"}`, nil, 400, "validation_failed"},
		{"DEL", `{"name":"a\u007fb"}`, nil, 400, "validation_failed"},
		{"name number", `{"name":5}`, nil, 400, "validation_failed"},
		{"name object", `{"name":{}}`, nil, 400, "validation_failed"},
		{"description number", `{"name":"n1","description":5}`, nil, 400, "validation_failed"},
		{"description 1001", `{"name":"n2","description":"` + strings.Repeat("d", 1001) + `"}`, nil, 400, "validation_failed"},
		{"unknown field", `{"name":"n3","colour":"red"}`, nil, 400, "validation_failed"},
		{"duplicate", `{"name":"dog"}`, nil, 409, "conflict"},
		{"duplicate other case", `{"name":"DOG"}`, nil, 409, "conflict"},
		{"duplicate after trim", `{"name":"  Dog  "}`, nil, 409, "conflict"},
		{"duplicate accented upper", `{"name":"ÉCOLE"}`, nil, 409, "conflict"},
		{"trailing data", `{"name":"n4"} {}`, nil, 400, "invalid_json"},
		{"trailing garbage", `{"name":"n4"}x`, nil, 400, "invalid_json"},
		{"array", `[{"name":"n5"}]`, nil, 400, "invalid_json"},
		{"string", `"n6"`, nil, 400, "invalid_json"},
		{"null", `null`, nil, 400, "invalid_json"},
		{"malformed", `{"name":}`, nil, 400, "invalid_json"},
		{"truncated", `{"name":"n7"`, nil, 400, "invalid_json"},
		{"empty body", ``, []string{"Content-Type", "application/json"}, 400, "invalid_json"},
		{"invalid UTF-8", "{\"name\":\"a\xffb\"}", nil, 400, "invalid_json"},
		{"no content type", `{"name":"n8"}`, []string{"Content-Type", ""}, 415, "unsupported_media_type"},
		{"text/plain", `{"name":"n8"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"too large", `{"name":"n9","description":"` + strings.Repeat("d", 70000) + `"}`, nil, 413, "payload_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/categories", ts.key, tt.body, tt.header...)
			wantError(t, r, tt.wantStatus, tt.wantCode)
		})
	}

	valid := []struct{ name, body string }{
		{"100 characters", `{"name":"` + strings.Repeat("y", 100) + `"}`},
		{"100 code points", `{"name":"` + strings.Repeat("ü", 100) + `"}`},
		{"1000 description", `{"name":"d1000","description":"` + strings.Repeat("d", 1000) + `"}`},
		{"charset parameter", `{"name":"charset"}`},
		{"description with newline", `{"name":"nl","description":"two\nlines"}`},
		{"null description", `{"name":"nulldesc","description":null}`},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/categories", ts.key, tt.body, "Content-Type", "application/json; charset=utf-8")
			if r.status != 201 {
				t.Fatalf("status = %d, want 201; %s", r.status, r.body)
			}
		})
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

func TestRequestID(t *testing.T) {
	ts := startServer(t)
	r := ts.do(t, "GET", "/healthz", "", "", "X-Request-Id", "client-id.42:x_y")
	if got := r.header.Get("X-Request-Id"); got != "client-id.42:x_y" {
		t.Errorf("sane id: X-Request-Id = %q, want it echoed", got)
	}
	for _, bad := range []string{"has space", strings.Repeat("a", 129), "semi;colon", "<script>"} {
		r := ts.do(t, "GET", "/v1/categories", ts.key, "", "X-Request-Id", bad)
		if got := r.header.Get("X-Request-Id"); got == "" || got == bad {
			t.Errorf("id %q: X-Request-Id = %q, want a fresh one", bad, got)
		}
	}
	a := ts.do(t, "GET", "/nowhere", "", "").header.Get("X-Request-Id")
	b := ts.do(t, "GET", "/nowhere", "", "").header.Get("X-Request-Id")
	if a == "" || a == b {
		t.Errorf("generated ids %q and %q, want distinct", a, b)
	}
}

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
}

func TestConcurrentCreates(t *testing.T) {
	ts := startServer(t)
	const n = 200
	var wg sync.WaitGroup
	ids := make([]int64, n)
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"name":"cat-%03d"}`, i)
			req, _ := http.NewRequest("POST", ts.base+"/v1/categories", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+ts.key)
			resp, err := ts.client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var c Category
			if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 201 {
				errs <- fmt.Errorf("create %d: status %d, %v", i, resp.StatusCode, err)
				return
			}
			ids[i] = c.ID
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list := decode[[]Category](t, ts.do(t, "GET", "/v1/categories", ts.key, ""))
	if len(list) != n {
		t.Fatalf("listed %d categories, want %d", len(list), n)
	}
	seen := map[string]int64{}
	for i, c := range list {
		if i > 0 && c.ID <= list[i-1].ID {
			t.Errorf("ids not ascending at %d: %d after %d", i, c.ID, list[i-1].ID)
		}
		if _, dup := seen[c.Name]; dup {
			t.Errorf("%s listed twice", c.Name)
		}
		seen[c.Name] = c.ID
	}
	for i := range n {
		if got := seen[fmt.Sprintf("cat-%03d", i)]; got != ids[i] {
			t.Errorf("cat-%03d: listed with id %d, created with id %d", i, got, ids[i])
		}
	}
}

func TestBackupWhileWriting(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db") // backup is SQLite's
	ts := startServerOn(t, db, createKey(t, db, "--plan", "business"))
	stop := make(chan struct{})
	var created sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	created.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := ts.do(t, "POST", "/v1/categories", ts.key, fmt.Sprintf(`{"name":"b%d"}`, i))
			if r.status != 201 {
				t.Errorf("create during backup: %d %s", r.status, r.body)
				return
			}
			mu.Lock()
			acked++
			mu.Unlock()
		}
	})
	// Let some writes land before and during the backup.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := acked
		mu.Unlock()
		if n >= 20 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	before := acked
	mu.Unlock()
	dest := filepath.Join(t.TempDir(), "copy.db")
	out, errOut, err := runCLI(t, nil, "backup", "--db", ts.db, dest)
	close(stop)
	created.Wait()
	if err != nil {
		t.Fatalf("backup: %v %s", err, errOut)
	}
	if !strings.Contains(out, dest) {
		t.Errorf("backup printed %q", out)
	}
	if st, err := os.Stat(dest); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v, mode %v, want 0600", err, st.Mode())
	}
	if _, _, err := runCLI(t, nil, "backup", "--db", ts.db, dest); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second backup to the same file: %v, want a refusal", err)
	}

	copySrv := startServerOn(t, dest, ts.key)
	list := decode[[]Category](t, copySrv.do(t, "GET", "/v1/categories", ts.key, ""))
	if len(list) < before {
		t.Errorf("backup holds %d categories, want at least the %d acknowledged before it started", len(list), before)
	}
	for i, c := range list {
		if c.Name != fmt.Sprintf("b%d", i) {
			t.Fatalf("backup row %d is %q: the copy is not a consistent prefix", i, c.Name)
		}
	}
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

func TestSchemaMatchesMigrations(t *testing.T) {
	db := filepath.Join(t.TempDir(), "m.db")
	if _, _, err := runCLI(t, nil, "migrate", "--db", db); err != nil {
		t.Fatal(err)
	}
	migrated := testStore(t, db, false)
	fromMigrations := schemaOf(t, migrated)

	ref := testStore(t, filepath.Join(t.TempDir(), "ref.db"), true)
	sch, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.w.Exec("DROP TABLE deployment"); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.w.Exec("DROP TABLE idempotency; DROP TABLE orders; DROP TABLE pets; DROP TABLE usage; DROP TABLE categories; DROP TABLE api_keys; DROP TABLE schema_migrations;"); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.w.Exec(string(sch)); err != nil {
		t.Fatalf("schema.sql: %v", err)
	}
	fromSchema := schemaOf(t, ref)
	if fromSchema != fromMigrations {
		t.Errorf("schema.sql differs from the migrations:\nschema.sql:\n%s\nmigrations:\n%s", fromSchema, fromMigrations)
	}
}

// schemaOf lists a database's tables, indexes and triggers, normalised.
func schemaOf(t *testing.T, s *sqliteStore) string {
	t.Helper()
	rows, err := s.r.Query(`SELECT type, name, coalesce(sql, '') FROM sqlite_schema
		WHERE name NOT LIKE 'sqlite_%' AND name NOT IN ('schema_migrations', 'version_unique') ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	space := regexp.MustCompile(`\s+`)
	comment := regexp.MustCompile(`--[^\n]*`)
	renamed := regexp.MustCompile(`^CREATE TABLE "(\w+)"`) // SQLite quotes the name ALTER TABLE ... RENAME TO gives
	for rows.Next() {
		var typ, name, sql string
		if err := rows.Scan(&typ, &name, &sql); err != nil {
			t.Fatal(err)
		}
		sql = renamed.ReplaceAllString(sql, "CREATE TABLE $1")
		sql = space.ReplaceAllString(comment.ReplaceAllString(sql, ""), " ")
		// ALTER TABLE ... ADD COLUMN appends ", col TYPE" after the last
		// column's text, before the newline that closed it.
		sql = strings.ReplaceAll(strings.ReplaceAll(sql, " ,", ","), " )", ")")
		fmt.Fprintf(&b, "%s %s: %s\n", typ, name, sql)
	}
	return b.String()
}

func TestCategoryListCacheAndPages(t *testing.T) {
	// A trailing slash on --public-url must not give the Link an empty segment.
	ts := startServer(t, "--public-url", "https://api.example.net/v1/")
	for i := range 5 {
		ts.do(t, "POST", "/v1/categories", ts.key, fmt.Sprintf(`{"name":"c%d"}`, i))
	}
	r := ts.do(t, "GET", "/v1/categories", ts.key, "")
	etag := r.header.Get("ETag")
	if r.status != 200 || etag == "" || len(decode[[]Category](t, r)) != 5 {
		t.Fatalf("list: %d, ETag %q", r.status, etag)
	}
	r = ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", etag)
	if r.status != 304 || len(r.body) != 0 || r.header.Get("ETag") != etag {
		t.Errorf("If-None-Match with the current tag: %d %q", r.status, r.body)
	}
	// If-None-Match in two lines is one list (RFC 9110): the second names it.
	r = ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", `"other"`, "If-None-Match", etag)
	if r.status != 304 {
		t.Errorf("If-None-Match with the current tag on its second line: %d", r.status)
	}
	// A write makes the cached list stale.
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"c5"}`)
	r = ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", etag)
	if r.status != 200 || r.header.Get("ETag") == etag || len(decode[[]Category](t, r)) != 6 {
		t.Errorf("after a write: %d, ETag %q (was %q), body %s", r.status, r.header.Get("ETag"), etag, r.body)
	}

	r = ts.do(t, "GET", "/v1/categories?limit=4", ts.key, "")
	page := decode[[]Category](t, r)
	if len(page) != 4 || page[0].ID != 1 || page[3].ID != 4 {
		t.Fatalf("first page: %s", r.body)
	}
	if got, want := r.header.Get("Link"), `<https://api.example.net/v1/categories?limit=4&after_id=4>; rel="next"`; got != want {
		t.Errorf("Link = %q, want %q", got, want)
	}
	r = ts.do(t, "GET", "/v1/categories?limit=4&after_id=4", ts.key, "")
	if page := decode[[]Category](t, r); len(page) != 2 || page[0].ID != 5 || r.header.Get("Link") != "" {
		t.Errorf("last page: %s, Link %q", r.body, r.header.Get("Link"))
	}
	if r := ts.do(t, "GET", "/v1/categories?after_id=6", ts.key, ""); string(r.body) != "[]\n" {
		t.Errorf("past the end: %s", r.body)
	}
	// Pages are cached: a full page stays as it is (ids only grow), a page
	// at the end of the list sees the next write, and both have ETags.
	first := ts.do(t, "GET", "/v1/categories?limit=4", ts.key, "")
	if tag := first.header.Get("ETag"); tag == "" || ts.do(t, "GET", "/v1/categories?limit=4", ts.key, "", "If-None-Match", tag).status != 304 {
		t.Errorf("first page: ETag %q, not answered with 304 when the client has it", tag)
	}
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"c6"}`)
	if r := ts.do(t, "GET", "/v1/categories?limit=4", ts.key, ""); string(r.body) != string(first.body) || r.header.Get("ETag") != first.header.Get("ETag") {
		t.Errorf("first page changed after a write past it: %s", r.body)
	}
	r = ts.do(t, "GET", "/v1/categories?limit=4&after_id=4", ts.key, "")
	if page := decode[[]Category](t, r); len(page) != 3 || page[2].Name != "c6" {
		t.Errorf("last page after a write: %s (stale?)", r.body)
	}
	if page := decode[[]Category](t, ts.do(t, "GET", "/v1/categories?after_id=6", ts.key, "")); len(page) != 1 || page[0].Name != "c6" {
		t.Errorf("the page that was past the end, after a write: %v", page)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after_id=-1", "after_id=1.5"} {
		wantError(t, ts.do(t, "GET", "/v1/categories?"+q, ts.key, ""), 400, "validation_failed")
	}
}

func TestLargeListIsStreamed(t *testing.T) {
	db := filepath.Join(t.TempDir(), "large.db")
	key := createKey(t, db, "--plan", "business")
	s := testStore(t, db, true)
	_, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
		INSERT INTO categories (name, fold, description) SELECT printf('category %06d', i), printf('category %06d', i), printf('%0100d', i) FROM n`)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	ts := startServerOn(t, db, key)
	r := ts.do(t, "GET", "/v1/categories", key, "")
	list := decode[[]Category](t, r)
	if r.status != 200 || len(list) != 20000 || list[19999].Name != "category 020000" {
		t.Fatalf("large list: %d, %d rows", r.status, len(list))
	}
	if r.header.Get("ETag") != "" || len(r.body) < maxCachedList {
		t.Errorf("a %d-byte list got ETag %q: it should be streamed, not cached", len(r.body), r.header.Get("ETag"))
	}
}

// TestTooLargeListIsNotReadTwice checks that once the list outgrew the
// cache, a request streams it straight away, instead of first reading and
// serializing a cache's worth of it to find out again, and that the stream
// still sees new rows.
func TestTooLargeListIsNotReadTwice(t *testing.T) {
	s := testStore(t, filepath.Join(t.TempDir(), "big.db"), true)
	h := handleCategoryList(s, "http://127.0.0.1/v1", defaultBusyTimeout).(*categoryLists)
	get := func() []Category {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/categories", nil))
		var list []Category
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || w.Code != 200 {
			t.Fatalf("list: %d, %v", w.Code, err)
		}
		return list
	}
	if _, err := s.CreateCategory(context.Background(), Category{Name: "small"}, "small", nil); err != nil {
		t.Fatal(err)
	}
	if list := get(); len(list) != 1 || h.cached.Load() == nil {
		t.Fatalf("a one-row list: %d rows, cached %v", len(list), h.cached.Load() != nil)
	}
	if _, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
		INSERT INTO categories (name, fold, description) SELECT printf('c%06d', i), printf('c%06d', i), printf('%0100d', i) FROM n`); err != nil {
		t.Fatal(err)
	}
	s.categoriesGen.Add(1) // as a create through the API would
	if list := get(); len(list) != 20001 || !h.tooLarge.Load() || h.cached.Load() != nil {
		t.Fatalf("the large list: %d rows, too large %v, an old copy kept %v", len(list), h.tooLarge.Load(), h.cached.Load() != nil)
	}
	if _, err := s.CreateCategory(context.Background(), Category{Name: "last"}, "last", nil); err != nil {
		t.Fatal(err)
	}
	if list := get(); len(list) != 20002 || list[20001].Name != "last" {
		t.Errorf("after a create: %d rows", len(list))
	}
}

// TestListReadOnceAfterWrite checks that the GETs in flight after a write
// share one read of the list: each used to read and serialize it on its
// own, all 32 of them here, because each found the cached copy stale.
func TestListReadOnceAfterWrite(t *testing.T) {
	db := filepath.Join(t.TempDir(), "herd.db")
	key := createKey(t, db, "--plan", "business")
	s := testStore(t, db, true)
	// 5,000 rows, about 400 KB of JSON: cached, and long enough to read
	// that the GETs below overlap.
	if _, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
		INSERT INTO categories (name, fold, description) SELECT printf('category %06d', i), printf('category %06d', i), printf('%060d', i) FROM n`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ts := startServerOn(t, db, key)
	reads := func() int {
		m := ts.get(t, ts.admin+"/metrics")
		_, v, ok := strings.Cut(m, "\npetstore_category_list_reads_total ")
		n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(v, "\n", 2)[0]))
		if !ok || err != nil {
			t.Fatalf("no petstore_category_list_reads_total in the metrics")
		}
		return n
	}
	if r := ts.do(t, "POST", "/v1/categories", key, `{"name":"newest"}`); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	before := reads()
	start := make(chan struct{})
	etags := make([]string, 32)
	var wg sync.WaitGroup
	for i := range etags {
		wg.Go(func() {
			<-start
			r, err := ts.send("GET", "/v1/categories", key, "")
			if err != nil || r.status != 200 || !bytes.Contains(r.body, []byte(`"name":"newest"`)) {
				t.Errorf("GET: %d %v, without the new category", r.status, err)
			}
			etags[i] = r.header.Get("ETag")
		})
	}
	close(start)
	wg.Wait()
	if n := reads() - before; n != 1 {
		t.Errorf("32 GETs after a write read the list %d times, want 1", n)
	}
	for _, e := range etags {
		if e != etags[0] {
			t.Errorf("ETags differ: %q, %q", e, etags[0])
		}
	}
}

// lockDatabase is what this test binary does when TestMain finds
// PETSTORE_TEST_LOCK: it takes the write lock of that database, says
// "locked" on stdout, and holds the lock until stdin closes.
func lockDatabase(path string) {
	db, err := sql.Open("sqlite", dsn(path, false, time.Second))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	tx, err := db.Begin() // _txlock=immediate: takes the write lock now
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	tx.Rollback()
	os.Exit(0)
}
