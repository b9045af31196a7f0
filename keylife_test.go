package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// setClock is a server's clock that a test sets to a moment: the keyring
// checks expiry on it.
type setClock struct{ at atomic.Pointer[time.Time] }

func (c *setClock) set(t time.Time) { c.at.Store(&t) }
func (c *setClock) now() time.Time  { return *c.at.Load() }
func (c *setClock) context() context.Context {
	return context.WithValue(context.Background(), clockKey{}, c.now)
}

// createKeyJSON runs keys create --json with args and returns what it
// printed.
func createKeyJSON(t *testing.T, db string, args ...string) keyView {
	t.Helper()
	out, _, err := runCLI(t, nil, append([]string{"keys", "create", "--db", db, "--json"}, args...)...)
	if err != nil {
		t.Fatalf("keys create %v: %v", args, err)
	}
	var v keyView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("keys create --json printed %q: %v", out, err)
	}
	return v
}

func listKeysJSON(t *testing.T, db string) map[int64]map[string]any {
	t.Helper()
	out, _, err := runCLI(t, nil, "keys", "list", "--db", db, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var views []map[string]any
	if err := json.Unmarshal([]byte(out), &views); err != nil {
		t.Fatalf("keys list --json: %q: %v", out, err)
	}
	byID := map[int64]map[string]any{}
	for _, v := range views {
		byID[int64(v["id"].(float64))] = v
	}
	return byID
}

func TestKeysCreateExpiresAndScope(t *testing.T) {
	db := testDB(t)
	before := time.Now().UTC().Truncate(time.Second)
	days := createKeyJSON(t, db, "--plan", "free", "--expires", "90d")
	after := time.Now().UTC()
	if days.ExpiresAt == nil || days.ExpiresAt.Before(before.Add(90*24*time.Hour)) || days.ExpiresAt.After(after.Add(90*24*time.Hour)) {
		t.Errorf("--expires 90d: expiresAt %v, want 90 days from now", days.ExpiresAt)
	}
	if days.Scope != "write" {
		t.Errorf("default scope %q, want write", days.Scope)
	}
	for in, want := range map[string]string{
		"2099-01-01":                "2099-01-01T00:00:00Z",
		"2099-03-04T05:06:07+02:00": "2099-03-04T03:06:07Z",
	} {
		v := createKeyJSON(t, db, "--plan", "pro", "--expires", in, "--scope", "read")
		if v.ExpiresAt == nil || v.ExpiresAt.Format(time.RFC3339) != want || v.Scope != "read" {
			t.Errorf("--expires %s --scope read: expiresAt %v scope %q, want %s and read", in, v.ExpiresAt, v.Scope, want)
		}
	}
	hours := createKeyJSON(t, db, "--plan", "free", "--expires", "12h")
	if d := time.Until(*hours.ExpiresAt); d < 12*time.Hour-time.Minute || d > 12*time.Hour {
		t.Errorf("--expires 12h: expires in %v", d)
	}
	never := createKeyJSON(t, db, "--plan", "free")
	if never.ExpiresAt != nil {
		t.Errorf("no --expires: expiresAt %v, want null", never.ExpiresAt)
	}

	listed := listKeysJSON(t, db)
	if got := listed[days.ID]["expiresAt"]; got != days.ExpiresAt.Format(time.RFC3339) {
		t.Errorf("keys list --json expiresAt %v, want %s", got, days.ExpiresAt.Format(time.RFC3339))
	}
	if got, ok := listed[never.ID]["expiresAt"]; !ok || got != nil {
		t.Errorf("keys list --json expiresAt of a key that never expires: %v (present %v), want null", got, ok)
	}
	if got := listed[hours.ID]["scope"]; got != "write" {
		t.Errorf("keys list --json scope %v, want write", got)
	}
	text, _, err := runCLI(t, nil, "keys", "list", "--db", db)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "SCOPE") || !strings.Contains(text, "EXPIRES") || !strings.Contains(text, "2099-01-01T00:00:00Z") || !strings.Contains(text, "never") {
		t.Errorf("keys list lacks the scope and expiry columns:\n%s", text)
	}

	for _, tt := range []struct{ args []string }{
		{[]string{"--expires", "2020-01-01"}},
		{[]string{"--expires", "0d"}},
		{[]string{"--expires", "-1h"}},
		{[]string{"--expires", "0s"}},
		{[]string{"--expires", "soon"}},
		{[]string{"--expires", "1.5d"}},
		{[]string{"--expires", "99999999d"}},
		{[]string{"--expires", time.Now().Add(-time.Second).UTC().Format(time.RFC3339)}},
		{[]string{"--scope", "admin"}},
		{[]string{"--scope", ""}},
	} {
		_, _, err := runCLI(t, nil, append([]string{"keys", "create", "--db", db, "--plan", "free"}, tt.args...)...)
		var msg bytes.Buffer
		if code := exitCode(err, &msg); code != 2 || strings.Count(msg.String(), "\n") != 1 || !strings.Contains(msg.String(), tt.args[0]) {
			t.Errorf("keys create %v: exit %d, %q; want 2 and one line naming %s", tt.args, code, msg.String(), tt.args[0])
		}
	}
}

// TestKeyExpiresAtItsMoment: a key works until the second it expires, on
// the server's clock, and is then a 401 that says so; other 401s do not.
func TestKeyExpiresAtItsMoment(t *testing.T) {
	db := testDB(t)
	expiry := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	v := createKeyJSON(t, db, "--plan", "free", "--expires", expiry.Format(time.RFC3339))
	clock := &setClock{}
	clock.set(expiry.Add(-time.Nanosecond))
	ts := startServerIn(t, clock.context(), db, v.Key)
	if r := ts.do(t, "GET", "/v1/categories", v.Key, ""); r.status != 200 {
		t.Fatalf("a nanosecond before its expiry: %d %s", r.status, r.body)
	}
	clock.set(expiry)
	r := ts.do(t, "GET", "/v1/categories", v.Key, "")
	wantError(t, r, 401, "unauthorized")
	msg := decode[apiError](t, r).Message
	if !strings.Contains(msg, "expired") || strings.Contains(msg, v.Key) || strings.Contains(string(r.body), v.Key[8:]) {
		t.Errorf("expired: message %q, want one that says so and does not echo the key", msg)
	}
	if r.header.Get("WWW-Authenticate") == "" {
		t.Error("expired: no WWW-Authenticate")
	}
	if r := ts.do(t, "POST", "/v1/categories", v.Key, `{"name":"Late"}`); r.status != 401 {
		t.Errorf("expired POST: %d, want 401", r.status)
	}
	// A key that never existed gets the usual message: expiry says
	// something only to whoever holds the key.
	other := ts.do(t, "GET", "/v1/categories", newKeySecret("production"), "")
	if m := decode[apiError](t, other).Message; strings.Contains(m, "expired") {
		t.Errorf("an unknown key's 401 says %q", m)
	}
	clock.set(expiry.Add(-time.Second))
	if r := ts.do(t, "GET", "/v1/categories", v.Key, ""); r.status != 200 {
		t.Errorf("the clock back before the expiry: %d, want 200 (expiry is checked on the clock)", r.status)
	}
	if got := listKeysJSON(t, db)[v.ID]["expiresAt"]; got != expiry.Format(time.RFC3339) {
		t.Errorf("keys list: expiresAt %v", got)
	}
}

// TestReadKeyMayNotWrite: a read key GETs and HEADs; each POST is 403
// forbidden, counted against its limits, with the rate-limit and area
// headers a 201 would carry; nothing is created, keyed or not.
func TestReadKeyMayNotWrite(t *testing.T) {
	ts := startServer(t)
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`); r.status != 201 {
		t.Fatalf("seed: %d", r.status)
	}
	// The day (50) binds, not the minute: its count only grows, so each
	// counted request takes exactly one from X-RateLimit-Remaining.
	read := createKeyJSON(t, ts.db, "--plan", "enterprise", "--rpm", "1000", "--rpd", "50", "--scope", "read").Key
	waitStatus(t, ts, read, 200)
	if r := ts.do(t, "HEAD", "/v1/categories", read, ""); r.status != 200 {
		t.Errorf("HEAD with a read key: %d", r.status)
	}
	remaining := -1
	for _, tt := range []struct{ path, body, stability string }{
		{"/v1/categories", `{"name":"Cat"}`, ""},
		{"/v1/pets", `{"name":"Rex","categoryId":1}`, "beta"},
		{"/v1/store/orders", `{"petId":1,"quantity":1}`, "experimental"},
	} {
		for _, hdr := range [][]string{nil, {"Idempotency-Key", "read-" + tt.path}} {
			r := ts.do(t, "POST", tt.path, read, tt.body, hdr...)
			wantError(t, r, 403, "forbidden")
			if got := r.header.Get("X-API-Stability"); got != tt.stability {
				t.Errorf("POST %s: X-API-Stability %q, want %q", tt.path, got, tt.stability)
			}
			n, err := strconv.Atoi(r.header.Get("X-Ratelimit-Remaining"))
			if err != nil || (remaining >= 0 && n != remaining-1) {
				t.Errorf("POST %s: X-RateLimit-Remaining %q after %d: a 403 must count", tt.path, r.header.Get("X-Ratelimit-Remaining"), remaining)
			}
			remaining = n
			if r.header.Get("Idempotency-Replayed") != "" {
				t.Errorf("POST %s: a 403 replayed", tt.path)
			}
		}
	}
	list := decode[[]Category](t, ts.do(t, "GET", "/v1/categories", read, ""))
	if len(list) != 1 {
		t.Errorf("after the read key's POSTs the list is %v, want Dog alone", list)
	}
	// The same Idempotency-Key with a write key is fresh: the 403 was not
	// kept (it is scoped to the other key anyway, but nothing was stored).
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Cat"}`, "Idempotency-Key", "read-/v1/categories"); r.status != 201 {
		t.Errorf("a write key's POST: %d %s", r.status, r.body)
	}
}
