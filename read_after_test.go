package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadPosToken(t *testing.T) {
	for _, pos := range []uint64{0, 1, 0x16b3748, 1<<64 - 1} {
		tok := formatReadPos(pos)
		if got, ok := parseReadPos(tok); !ok || got != pos || len(tok) != 16 {
			t.Errorf("%d: token %q reads as %d, %v", pos, tok, got, ok)
		}
	}
	for _, bad := range []string{"", "0/16B3748", "16b3748", "00000000016b374g", "000000000016b37480", " 00000000016b374", "+0000000016b3748"} {
		if _, ok := parseReadPos(bad); ok {
			t.Errorf("%q reads as a token", bad)
		}
	}
}

// TestReadAfterFloor: a read's floor is the highest of the client's valid
// tokens, its lineage's last write here, and what evicted lineages left;
// a malformed token is ignored.
func TestReadAfterFloor(t *testing.T) {
	ra := newReadAfter(true, 2)
	ra.remember(1, 100)
	ra.remember(1, 90) // never back
	ra.remember(2, 200)
	floor := func(lineage int64, tokens ...string) uint64 {
		var got uint64
		h := ra.reads(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = readStateOf(r.Context()).floor }))
		r := httptest.NewRequest("GET", "/v1/pets", nil)
		for _, tok := range tokens {
			r.Header.Add(readAfterHeader, tok)
		}
		r = withState(r, &reqState{key: &apiKey{Lineage: lineage}})
		h.ServeHTTP(httptest.NewRecorder(), r)
		return got
	}
	if got := floor(1); got != 100 {
		t.Errorf("lineage 1: floor %d, want its last write, 100", got)
	}
	if got := floor(3); got != 0 {
		t.Errorf("lineage 3, never wrote: floor %d, want 0", got)
	}
	if got := floor(1, formatReadPos(150), "junk", formatReadPos(120)); got != 150 {
		t.Errorf("lineage 1 with tokens: floor %d, want 150", got)
	}
	ra.remember(3, 50) // evicts lineage 1 or 2: its position is everyone's floor now
	_, has1 := ra.lineages[1]
	_, has2 := ra.lineages[2]
	want := uint64(100)
	if has1 {
		want = 200
	}
	if len(ra.lineages) != 2 || has1 == has2 {
		t.Fatalf("after a third lineage in a memory of 2: %v", ra.lineages)
	}
	if got := floor(3); got != want {
		t.Errorf("after an eviction, lineage 3: floor %d, want the evicted one's %d", got, want)
	}
	if got := floor(2); got != 200 {
		t.Errorf("lineage 2: floor %d, want 200", got)
	}
	if newReadAfter(false, 2) != nil {
		t.Error("a store without positions has a read-after memory")
	}
}

// TestReadAfterNotOnSQLite: SQLite's answers carry no Petstore-Read-After.
func TestReadAfterNotOnSQLite(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db")
	ts := startServerOn(t, db, createKey(t, db, "--plan", "business", "--name", "test"))
	for _, rq := range []struct{ method, path, body string }{
		{"POST", "/v1/categories", `{"name":"Dog"}`}, {"GET", "/v1/categories", ""}, {"GET", "/v1/pets", ""},
		{"POST", "/v1/pets", `{"name":"Rex","categoryId":1}`}, {"GET", "/v1/pets/1", ""}, {"GET", "/v1/store/orders", ""},
	} {
		r := ts.do(t, rq.method, rq.path, ts.key, rq.body, readAfterHeader, formatReadPos(1<<40))
		if r.status >= 300 {
			t.Fatalf("%s %s: %d %s", rq.method, rq.path, r.status, r.body)
		}
		if v := r.header.Values(readAfterHeader); len(v) > 0 {
			t.Errorf("%s %s on SQLite: Petstore-Read-After %q", rq.method, rq.path, v)
		}
	}
}

// TestReadAfterOnPostgres: on PostgreSQL every 201 (a replayed one too)
// and every read carries a token, and a read after a 201 carries one at
// least as high.
func TestReadAfterOnPostgres(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	ts := startServerOn(t, db, createKey(t, db, "--plan", "business", "--name", "test"))
	tokenOf := func(what string, r response, status int) uint64 {
		t.Helper()
		if r.status != status {
			t.Fatalf("%s: %d %s, want %d", what, r.status, r.body, status)
		}
		pos, ok := parseReadPos(r.header.Get(readAfterHeader))
		if !ok {
			t.Fatalf("%s: Petstore-Read-After %q, want a token", what, r.header.Get(readAfterHeader))
		}
		return pos
	}
	created := tokenOf("create", ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`), 201)
	list := ts.do(t, "GET", "/v1/categories", ts.key, "")
	if got := tokenOf("list", list, 200); got < created {
		t.Errorf("the list after the 201 carries %d, below the 201's %d", got, created)
	}
	tokenOf("list, not modified", ts.do(t, "GET", "/v1/categories", ts.key, "", "If-None-Match", list.header.Get("ETag")), 304)
	tokenOf("head", ts.do(t, "HEAD", "/v1/categories", ts.key, ""), 200)
	tokenOf("page", ts.do(t, "GET", "/v1/categories?limit=1", ts.key, ""), 200)
	pet := tokenOf("pet", ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`, "Idempotency-Key", `"k1"`), 201)
	replay := ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`, "Idempotency-Key", `"k1"`)
	if got := tokenOf("replay", replay, 201); got < pet || replay.header.Get("Idempotency-Replayed") != "true" {
		t.Errorf("the replay carries %d (replayed %q), want at least the 201's %d", got, replay.header.Get("Idempotency-Replayed"), pet)
	}
	tokenOf("pet get", ts.do(t, "GET", "/v1/pets/1", ts.key, ""), 200)
	tokenOf("pets", ts.do(t, "GET", "/v1/pets?status=available", ts.key, "", readAfterHeader, "nonsense"), 200)
	tokenOf("orders", ts.do(t, "GET", "/v1/store/orders", ts.key, ""), 200)
	tokenOf("inventory", ts.do(t, "GET", "/v1/store/inventory", ts.key, ""), 200)
}

// TestPostgresReplicaNotADependency: an instance whose replica cannot be
// reached starts, is ready, and answers its reads from the primary; one
// whose replica is the primary itself reads from it as a replica.
func TestPostgresReplicaNotADependency(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	key := createKey(t, db, "--plan", "business", "--name", "test")
	away := startServerOn(t, db, key, "--db-replica", pmViaProxy(t, db, "127.0.0.1:1"))
	same := startServerOn(t, db, key, "--db-replica", db)
	if r := away.do(t, "POST", "/v1/categories", key, `{"name":"Dog"}`); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	for _, ts := range []*testServer{away, same} {
		for _, path := range []string{"/v1/categories", "/v1/pets", "/v1/store/orders", "/v1/store/inventory"} {
			if r := ts.do(t, "GET", path, key, ""); r.status != 200 || r.header.Get(readAfterHeader) == "" {
				t.Errorf("GET %s: %d %s, Petstore-Read-After %q", path, r.status, r.body, r.header.Get(readAfterHeader))
			}
		}
		if r := ts.do(t, "GET", "/readyz", "", ""); r.status != 200 {
			t.Errorf("/readyz: %d %s", r.status, r.body)
		}
	}
	if r := rpReads(t, away); r["error"] != 4 || r["fresh"] != 0 {
		t.Errorf("replica away: reads by reason %v, want 4 for error", r)
	}
	rpWaitFresh(t, same, key) // the monitor's first look
	before := rpReads(t, same)["fresh"]
	if r := same.do(t, "GET", "/v1/categories", key, ""); r.status != 200 || !strings.Contains(string(r.body), "Dog") {
		t.Errorf("GET /v1/categories from the primary as a replica: %d %s", r.status, r.body)
	}
	if r := same.do(t, "GET", "/v1/store/inventory", key, ""); r.status != 200 {
		t.Errorf("GET /v1/store/inventory from the primary as a replica: %d %s", r.status, r.body)
	}
	if after := rpReads(t, same)["fresh"]; after != before+2 {
		t.Errorf("the primary as a replica: %v reads from it, want %v", after, before+2)
	}
}
