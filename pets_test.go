package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPets(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Cat"}`)

	r := ts.do(t, "POST", "/v1/pets", ts.key, `{"name":" Rex ","categoryId":1}`)
	if r.status != 201 || string(r.body) != `{"id":1,"name":"Rex","categoryId":1,"status":"available"}`+"\n" {
		t.Fatalf("create pet: %d %s", r.status, r.body)
	}
	for _, body := range []string{
		`{"name":"Rex","categoryId":1,"status":"sold"}`, // names need not be unique
		`{"name":"Tom","categoryId":2,"status":"pending"}`,
		`{"name":"Kit","categoryId":2}`,
	} {
		if r := ts.do(t, "POST", "/v1/pets", ts.key, body); r.status != 201 {
			t.Fatalf("create %s: %d %s", body, r.status, r.body)
		}
	}
	lists := map[string]string{
		"":                              `[{"id":1,"name":"Rex","categoryId":1,"status":"available"},{"id":2,"name":"Rex","categoryId":1,"status":"sold"},{"id":3,"name":"Tom","categoryId":2,"status":"pending"},{"id":4,"name":"Kit","categoryId":2,"status":"available"}]`,
		"?categoryId=2":                 `[{"id":3,"name":"Tom","categoryId":2,"status":"pending"},{"id":4,"name":"Kit","categoryId":2,"status":"available"}]`,
		"?status=available":             `[{"id":1,"name":"Rex","categoryId":1,"status":"available"},{"id":4,"name":"Kit","categoryId":2,"status":"available"}]`,
		"?categoryId=1&status=sold":     `[{"id":2,"name":"Rex","categoryId":1,"status":"sold"}]`,
		"?categoryId=99":                `[]`,
		"?categoryId=2&status=sold":     `[]`,
		"?status=pending&unrelated=yes": `[{"id":3,"name":"Tom","categoryId":2,"status":"pending"}]`,
	}
	for query, want := range lists {
		r := ts.do(t, "GET", "/v1/pets"+query, ts.key, "")
		if r.status != 200 || strings.TrimSpace(string(r.body)) != want {
			t.Errorf("GET /v1/pets%s: %d %s, want %s", query, r.status, r.body, want)
		}
	}
	r = ts.do(t, "GET", "/v1/pets/3", ts.key, "")
	if r.status != 200 || string(r.body) != `{"id":3,"name":"Tom","categoryId":2,"status":"pending"}`+"\n" {
		t.Errorf("GET /v1/pets/3: %d %s", r.status, r.body)
	}

	errorsTable := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"missing category", "POST", "/v1/pets", `{"name":"Ghost","categoryId":99}`, 400, "validation_failed"},
		{"no categoryId", "POST", "/v1/pets", `{"name":"Ghost"}`, 400, "validation_failed"},
		{"zero categoryId", "POST", "/v1/pets", `{"name":"Ghost","categoryId":0}`, 400, "validation_failed"},
		{"string categoryId", "POST", "/v1/pets", `{"name":"Ghost","categoryId":"1"}`, 400, "validation_failed"},
		{"fractional categoryId", "POST", "/v1/pets", `{"name":"Ghost","categoryId":1.5}`, 400, "validation_failed"},
		{"huge categoryId", "POST", "/v1/pets", `{"name":"Ghost","categoryId":1e30}`, 400, "validation_failed"},
		{"bad status", "POST", "/v1/pets", `{"name":"Ghost","categoryId":1,"status":"lost"}`, 400, "validation_failed"},
		{"no name", "POST", "/v1/pets", `{"categoryId":1}`, 400, "validation_failed"},
		{"long name", "POST", "/v1/pets", `{"name":"` + strings.Repeat("n", 101) + `","categoryId":1}`, 400, "validation_failed"},
		{"control in name", "POST", "/v1/pets", `{"name":"a\tb","categoryId":1}`, 400, "validation_failed"},
		{"unknown field", "POST", "/v1/pets", `{"name":"Ghost","categoryId":1,"age":3}`, 400, "validation_failed"},
		{"not JSON", "POST", "/v1/pets", `name=Ghost`, 400, "invalid_json"},
		{"filter categoryId text", "GET", "/v1/pets?categoryId=dog", "", 400, "validation_failed"},
		{"filter categoryId zero", "GET", "/v1/pets?categoryId=0", "", 400, "validation_failed"},
		{"filter categoryId empty", "GET", "/v1/pets?categoryId=", "", 400, "validation_failed"},
		{"filter status", "GET", "/v1/pets?status=lost", "", 400, "validation_failed"},
		{"unknown pet", "GET", "/v1/pets/99", "", 404, "not_found"},
		{"text pet id", "GET", "/v1/pets/abc", "", 400, "validation_failed"},
		{"zero pet id", "GET", "/v1/pets/0", "", 400, "validation_failed"},
		{"negative pet id", "GET", "/v1/pets/-1", "", 400, "validation_failed"},
		{"signed pet id", "GET", "/v1/pets/+1", "", 400, "validation_failed"},
		{"overflowing pet id", "GET", "/v1/pets/99999999999999999999", "", 400, "validation_failed"},
	}
	for _, tt := range errorsTable {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, tt.method, tt.path, ts.key, tt.body)
			wantError(t, r, tt.status, tt.code)
			if got := r.header.Get("X-API-Stability"); got != "beta" {
				t.Errorf("X-API-Stability = %q, want beta", got)
			}
		})
	}
	wantError(t, ts.do(t, "GET", "/v1/pets", "", ""), 401, "unauthorized")
}

func TestPetNeedsCategoryInTheDatabase(t *testing.T) {
	// The foreign key refuses an orphan pet even when the handler is
	// bypassed.
	db := filepath.Join(t.TempDir(), "fk.db")
	s := testStore(t, db, true)
	if _, err := s.w.Exec("INSERT INTO pets (name, category_id, status) VALUES ('x', 42, 'available')"); !sqliteIsForeignKeyViolation(err) {
		t.Errorf("orphan pet: %v, want a foreign key violation", err)
	}
	if _, err := s.CreateOrder(context.Background(), Order{PetID: 42, Quantity: 1, Status: "placed"}, nil); err != errNoReference {
		t.Errorf("order of a missing pet: %v, want errNoReference", err)
	}
}

func TestStagingEnvironment(t *testing.T) {
	db := filepath.Join(t.TempDir(), "staging.db")
	staging := createKey(t, db, "--plan", "pro", "--env", "staging")
	production := createKey(t, db, "--plan", "pro")
	if !strings.HasPrefix(staging, "ps_test_") {
		t.Fatalf("staging key %q", staging)
	}
	ts := startServerOn(t, db, staging, "--env", "staging", "--public-url", "https://staging.example.net/v1")
	if r := ts.do(t, "GET", "/v1/categories", staging, ""); r.status != 200 {
		t.Errorf("staging key on staging: %d", r.status)
	}
	wantError(t, ts.do(t, "GET", "/v1/categories", production, ""), 401, "unauthorized")
	if h := decode[map[string]string](t, ts.do(t, "GET", "/healthz", "", "")); h["env"] != "staging" {
		t.Errorf("/healthz env = %q, want staging", h["env"])
	}
	doc := ts.do(t, "GET", "/v1/openapi.json", "", "")
	if !bytes.Contains(doc.body, []byte(`"url": "https://staging.example.net/v1"`)) || !bytes.Contains(doc.body, []byte(`"description": "staging"`)) {
		t.Errorf("the document does not advertise the staging server")
	}
}

// TestSlowClientsDoNotHoldReadConnections checks that clients that do not
// read a long list leave the read pool (four connections) to everyone
// else: five of them must not stall every read, /readyz included, until
// the write timeout (60 s).
func TestSlowClientsDoNotHoldReadConnections(t *testing.T) {
	db := filepath.Join(t.TempDir(), "slow.db")
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "100000", "--rpd", "1000000")
	s := testStore(t, db, true)
	// About 8 MB of JSON: more than the server's socket send buffer takes
	// (4 MiB at most here), the clients' receive buffers being kept small.
	// The category list: the one list still streamed (the pet and order
	// lists are pages of at most 1,000 rows since issue 46), its names'
	// keys filled in (an ASCII name's is its fold), as the server would
	// at start.
	if _, err := s.w.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 90000)
		INSERT INTO categories (name, fold, name_cmp) SELECT printf('category number %06d of the long list', i),
			printf('category number %06d of the long list', i), printf('category number %06d of the long list', i) FROM n`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ts := startServerOn(t, db, key)
	addr := strings.TrimPrefix(ts.base, "http://")
	small := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	for range 5 {
		c, err := small.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET /v1/categories HTTP/1.1\r\nHost: petstore\r\nAuthorization: Bearer %s\r\n\r\n", key)
		// and never read
	}
	time.Sleep(500 * time.Millisecond) // for the five to fill their sockets
	// Far below the 60 s write timeout that would free a held pool, with room
	// for a loaded machine: the five are still writing JSON meanwhile.
	client := &http.Client{Timeout: 15 * time.Second}
	for _, u := range []string{ts.base + "/v1/categories?limit=1", ts.admin + "/readyz"} {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s beside five clients that do not read: %v", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", u, resp.StatusCode)
		}
	}
}
