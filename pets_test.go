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
	if _, err := s.w.Exec("INSERT INTO pets (name, category_id, status) VALUES ('x', 42, 'available')"); !isForeignKeyViolation(err) {
		t.Errorf("orphan pet: %v, want a foreign key violation", err)
	}
	if _, err := s.CreateOrder(context.Background(), Order{PetID: 42, Quantity: 1, Status: "placed"}, nil); err != errNoReference {
		t.Errorf("order of a missing pet: %v, want errNoReference", err)
	}
}

func TestOrders(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)

	before := time.Now().UTC().Truncate(time.Second)
	r := ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":3}`)
	if r.status != 201 {
		t.Fatalf("create order: %d %s", r.status, r.body)
	}
	o := decode[Order](t, r)
	created, err := time.Parse(time.RFC3339, o.CreatedAt)
	if o.ID != 1 || o.PetID != 1 || o.Quantity != 3 || o.Status != "placed" || err != nil ||
		!strings.HasSuffix(o.CreatedAt, "Z") || created.Before(before) || created.After(time.Now()) {
		t.Errorf("order = %+v (createdAt %v), want id 1, pet 1, 3, placed, now in UTC", o, err)
	}
	if got := r.header.Get("X-API-Stability"); got != "experimental" {
		t.Errorf("X-API-Stability = %q, want experimental", got)
	}
	ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":100}`)
	list := decode[[]Order](t, ts.do(t, "GET", "/v1/store/orders", ts.key, ""))
	if len(list) != 2 || list[0].ID != 1 || list[1].ID != 2 || list[1].Quantity != 100 {
		t.Errorf("orders = %+v", list)
	}

	for _, tt := range []struct{ name, body string }{
		{"missing pet", `{"petId":9,"quantity":1}`},
		{"zero quantity", `{"petId":1,"quantity":0}`},
		{"too many", `{"petId":1,"quantity":101}`},
		{"no quantity", `{"petId":1}`},
		{"no pet", `{"quantity":1}`},
		{"text quantity", `{"petId":1,"quantity":"1"}`},
		{"fractional quantity", `{"petId":1,"quantity":1.5}`},
		{"status given", `{"petId":1,"quantity":1,"status":"placed"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/v1/store/orders", ts.key, tt.body)
			wantError(t, r, 400, "validation_failed")
			if got := r.header.Get("X-API-Stability"); got != "experimental" {
				t.Errorf("X-API-Stability = %q, want experimental", got)
			}
		})
	}
	if r := ts.do(t, "GET", "/v1/store/orders", "", ""); r.header.Get("X-API-Stability") != "experimental" || r.status != 401 {
		t.Errorf("401 of the store: status %d, X-API-Stability %q", r.status, r.header.Get("X-API-Stability"))
	}
	if r := ts.do(t, "GET", "/v1/categories", ts.key, ""); r.header.Get("X-API-Stability") != "" {
		t.Errorf("categories carry X-API-Stability %q, want none", r.header.Get("X-API-Stability"))
	}
}

func TestPetByIDDeprecation(t *testing.T) {
	ts := startServer(t, "--public-url", "https://api.example.net/v1")
	limited := createKey(t, ts.db, "--plan", "enterprise", "--rpm", "1", "--rpd", "100")
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	waitStatus(t, ts, limited, 200)

	wantHeaders := map[string]string{
		"Deprecation":     "@1767225600", // 2026-01-01T00:00:00Z
		"Sunset":          "Thu, 01 Jul 2027 00:00:00 GMT",
		"Link":            `<https://api.example.net/v1/pets>; rel="successor-version"`,
		"X-API-Stability": "beta",
	}
	for _, tt := range []struct {
		name, path, key string
		status          int
	}{
		{"found", "/v1/pets/1", ts.key, 200},
		{"not found", "/v1/pets/2", ts.key, 404},
		{"bad id", "/v1/pets/x", ts.key, 400},
		{"no key", "/v1/pets/1", "", 401},
		{"rate limited", "/v1/pets/1", limited, 429},
		{"wrong method", "/v1/pets/1", ts.key, 405},
	} {
		t.Run(tt.name, func(t *testing.T) {
			method := "GET"
			if tt.status == 405 {
				method = "DELETE"
			}
			r := ts.do(t, method, tt.path, tt.key, "")
			if r.status != tt.status {
				t.Fatalf("status = %d, want %d", r.status, tt.status)
			}
			for name, want := range wantHeaders {
				if got := r.header.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
	for _, path := range []string{"/v1/pets", "/v1/categories"} {
		if r := ts.do(t, "GET", path, ts.key, ""); r.header.Get("Deprecation") != "" || r.header.Get("Sunset") != "" {
			t.Errorf("%s carries deprecation headers", path)
		}
	}
}

func TestPetByIDAfterSunset(t *testing.T) {
	ts := startServer(t, "--pets-deprecated-at", "2025-06-01", "--pets-sunset-at", "2026-02-01T12:00:00Z")
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	for _, key := range []string{ts.key, ""} {
		r := ts.do(t, "GET", "/v1/pets/1", key, "")
		wantError(t, r, 410, "gone")
		if r.header.Get("Sunset") != "Sun, 01 Feb 2026 12:00:00 GMT" || r.header.Get("Deprecation") != fmt.Sprintf("@%d", time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC).Unix()) {
			t.Errorf("410: Sunset %q, Deprecation %q", r.header.Get("Sunset"), r.header.Get("Deprecation"))
		}
	}
	if r := ts.do(t, "GET", "/v1/pets", ts.key, ""); r.status != 200 {
		t.Errorf("the successor after the sunset: %d", r.status)
	}

	for _, args := range [][]string{
		{"--pets-sunset-at", "next year"},
		{"--pets-deprecated-at", "2026-13-01"},
		{"--pets-deprecated-at", "2027-01-01", "--pets-sunset-at", "2026-01-01"},
	} {
		_, _, err := runCLI(t, nil, append([]string{"serve", "--admin-addr", "off"}, args...)...)
		if code := exitCode(err, &bytes.Buffer{}); code != 2 {
			t.Errorf("serve %v: exit %d (%v), want 2", args, code, err)
		}
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

// TestEscapedPathKeepsAreaHeaders checks that an escaped letter in the
// path, which the router decodes and so still reaches the operation, does
// not lose the stability and deprecation headers.
func TestEscapedPathKeepsAreaHeaders(t *testing.T) {
	ts := startServer(t)
	addr := strings.TrimPrefix(ts.base, "http://")
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	auth := []string{"Authorization", "Bearer " + ts.key}
	for _, tt := range []struct {
		path, stability string
		deprecated      bool
	}{
		{"/v1/p%65ts/1", "beta", true}, // GET /v1/pets/{petId}
		{"/%761/pets/1", "beta", true},
		{"/v1/p%65ts", "beta", false},                 // GET /v1/pets
		{"/v1/st%6fre/orders", "experimental", false}, // GET /v1/store/orders
	} {
		res, err := rawExchange(addr, rawRequest("GET", tt.path, auth, ""), false)
		if err != nil || res.closed {
			t.Fatalf("%s: no answer: %v", tt.path, err)
		}
		if res.status != 200 {
			t.Errorf("%s: status %d: %s", tt.path, res.status, res.body)
		}
		if got := res.header.Get("X-API-Stability"); got != tt.stability {
			t.Errorf("%s: X-API-Stability %q, want %q", tt.path, got, tt.stability)
		}
		for _, h := range []string{"Deprecation", "Sunset", "Link"} {
			if got := res.header.Get(h); (got != "") != tt.deprecated {
				t.Errorf("%s: %s %q, want it only on the deprecated operation", tt.path, h, got)
			}
		}
	}
	// Paths the router answers with 404 reach no operation, so they are
	// told of no deprecation.
	for _, p := range []string{"/v1/pets/.", "/v1/pets/..", "/v1/pets/%2E", "/v1/pets/%2F"} {
		res, err := rawExchange(addr, rawRequest("GET", p, auth, ""), false)
		if err != nil || res.status != 404 {
			t.Fatalf("%s: %v, status %d, want 404", p, err, res.status)
		}
		for _, h := range []string{"Deprecation", "Sunset", "Link"} {
			if got := res.header.Get(h); got != "" {
				t.Errorf("%s: 404 not_found, yet %s %q", p, h, got)
			}
		}
	}
}

// TestMalformedQueryIs400 checks that a filter or page parameter that does
// not parse, or is given twice, is refused, not dropped: the client would
// get the whole list, or another part of it, than it asked for.
func TestMalformedQueryIs400(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Cat"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Tom","categoryId":2}`)
	for _, path := range []string{"/v1/pets?categoryId=2%", "/v1/pets?categoryId=%zz", "/v1/pets?categoryId=2;x=1",
		"/v1/pets?status=%zz", "/v1/categories?limit=%zz", "/v1/categories?limit=1;x",
		// Given twice, the second value would be dropped, bad or not.
		"/v1/pets?status=available&status=lost", "/v1/pets?status=available&status=pending",
		"/v1/pets?categoryId=1&categoryId=dog", "/v1/categories?limit=1&limit=abc",
		"/v1/categories?after_id=1&after_id=2"} {
		wantError(t, ts.do(t, "GET", path, ts.key, ""), 400, "validation_failed")
	}
	if got := decode[[]Pet](t, ts.do(t, "GET", "/v1/pets?categoryId=2", ts.key, "")); len(got) != 1 || got[0].Name != "Tom" {
		t.Errorf("a well-formed filter: %v", got)
	}
}

// TestSlowClientsDoNotHoldReadConnections checks that clients that do not
// read a long list leave the read pool (four connections) to everyone
// else: five of them used to stall every read, /readyz included, until the
// write timeout (60 s).
func TestSlowClientsDoNotHoldReadConnections(t *testing.T) {
	db := filepath.Join(t.TempDir(), "slow.db")
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "100000", "--rpd", "1000000")
	s := testStore(t, db, true)
	// About 8 MB of JSON: more than the server's socket send buffer takes
	// (4 MiB at most here), the clients' receive buffers being kept small.
	if _, err := s.w.Exec(`INSERT INTO categories (name, fold) VALUES ('c', 'c');
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 90000)
		INSERT INTO pets (name, category_id, status) SELECT printf('pet number %06d of the long list', i), 1, 'available' FROM n`); err != nil {
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
		fmt.Fprintf(c, "GET /v1/pets HTTP/1.1\r\nHost: petstore\r\nAuthorization: Bearer %s\r\n\r\n", key)
		// and never read
	}
	time.Sleep(500 * time.Millisecond) // for the five to fill their sockets
	// Far below the 60 s write timeout that used to free the pool, with room
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
