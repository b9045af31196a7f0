package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// idemPost sends a POST with an Idempotency-Key.
func idemPost(t *testing.T, ts *testServer, path, key, idemKey, body string) response {
	t.Helper()
	return ts.do(t, "POST", path, key, body, "Idempotency-Key", idemKey)
}

// wantReplay checks that r replays first: the same status and body, byte
// for byte, with Idempotency-Replayed, which first did not have.
func wantReplay(t *testing.T, first, r response) {
	t.Helper()
	if first.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("the first answer has Idempotency-Replayed: %q", first.header.Get("Idempotency-Replayed"))
	}
	if r.status != first.status || !bytes.Equal(r.body, first.body) {
		t.Fatalf("replay = %d %s, want %d %s", r.status, r.body, first.status, first.body)
	}
	if got := r.header.Get("Idempotency-Replayed"); got != "true" {
		t.Fatalf("replay has Idempotency-Replayed %q, want true", got)
	}
}

// countPets returns how many pets are named name.
func countPets(t *testing.T, ts *testServer, name string) int {
	t.Helper()
	r := ts.do(t, "GET", "/v1/pets", ts.key, "")
	n := 0
	for _, p := range decode[[]Pet](t, r) {
		if p.Name == name {
			n++
		}
	}
	return n
}

func TestIdempotencyReplaysEachCreate(t *testing.T) {
	ts := startServer(t)
	cat := idemPost(t, ts, "/v1/categories", ts.key, "cat-1", `{"name":"Dogs"}`)
	if cat.status != 201 {
		t.Fatalf("create category: %d %s", cat.status, cat.body)
	}
	catID := decode[Category](t, cat).ID
	pet := idemPost(t, ts, "/v1/pets", ts.key, "pet-1", fmt.Sprintf(`{"name":"Rex","categoryId":%d}`, catID))
	if pet.status != 201 {
		t.Fatalf("create pet: %d %s", pet.status, pet.body)
	}
	petID := decode[Pet](t, pet).ID
	order := idemPost(t, ts, "/v1/store/orders", ts.key, "order-1", fmt.Sprintf(`{"petId":%d,"quantity":2}`, petID))
	if order.status != 201 {
		t.Fatalf("create order: %d %s", order.status, order.body)
	}
	for _, c := range []struct {
		path, key, body string
		first           response
	}{
		{"/v1/categories", "cat-1", `{"name":"Dogs"}`, cat},
		{"/v1/pets", "pet-1", fmt.Sprintf(`{"name":"Rex","categoryId":%d}`, catID), pet},
		{"/v1/store/orders", "order-1", fmt.Sprintf(`{"petId":%d,"quantity":2}`, petID), order},
	} {
		wantReplay(t, c.first, idemPost(t, ts, c.path, ts.key, c.key, c.body))
		// The quoted form is the same key.
		wantReplay(t, c.first, idemPost(t, ts, c.path, ts.key, `"`+c.key+`"`, c.body))
	}
	if n := countPets(t, ts, "Rex"); n != 1 {
		t.Fatalf("%d pets named Rex, want 1", n)
	}
	if orders := decode[[]Order](t, ts.do(t, "GET", "/v1/store/orders", ts.key, "")); len(orders) != 1 {
		t.Fatalf("%d orders, want 1", len(orders))
	}
	// A key that was never used, quoted with escapes, creates.
	if r := idemPost(t, ts, "/v1/categories", ts.key, `"a\"b\\c"`, `{"name":"Cats"}`); r.status != 201 {
		t.Fatalf("quoted key with escapes: %d %s", r.status, r.body)
	}
	if r := idemPost(t, ts, "/v1/categories", ts.key, `a"b\c`, `{"name":"Cats"}`); r.header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf(`a"b\c is not the key "a\"b\\c": %d %s`, r.status, r.body)
	}
}

func TestIdempotencyConflictIsStored(t *testing.T) {
	ts := startServer(t)
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dogs"}`); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	first := idemPost(t, ts, "/v1/categories", ts.key, "k", `{"name":"dogs"}`)
	wantError(t, first, 409, "conflict")
	wantReplay(t, first, idemPost(t, ts, "/v1/categories", ts.key, "k", `{"name":"dogs"}`))
}

func TestIdempotencyKeyReusedForAnotherRequest(t *testing.T) {
	ts := startServer(t)
	cat := decode[Category](t, ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dogs"}`))
	body := fmt.Sprintf(`{"name":"Rex","categoryId":%d}`, cat.ID)
	if r := idemPost(t, ts, "/v1/pets", ts.key, "k", body); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ path, body string }{
		{"/v1/pets", fmt.Sprintf(`{"name":"Max","categoryId":%d}`, cat.ID)}, // another body
		{"/v1/pets", body + " "},               // the same JSON, other bytes
		{"/v1/categories", `{"name":"Rex"}`},   // another path
		{"/v1/categories", `{"name":"Dogs"}`},  // another path, and an invalid request
		{"/v1/store/orders", `{"petId":0}`},    // an invalid body
		{"/v1/pets", `not json`},               // not even JSON
		{"/v1/pets", strings.Repeat(" ", 100)}, // blank
	} {
		wantError(t, idemPost(t, ts, c.path, ts.key, "k", c.body), 422, "idempotency_key_reused")
	}
	if n := countPets(t, ts, "Max"); n != 0 {
		t.Fatalf("a reused key created %d pets named Max", n)
	}
}

func TestIdempotencyKeysAreScopedToTheAPIKey(t *testing.T) {
	ts := startServer(t)
	other := createKey(t, ts.db, "--plan", "business", "--name", "other")
	cat := decode[Category](t, ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dogs"}`))
	body := fmt.Sprintf(`{"name":"Rex","categoryId":%d}`, cat.ID)
	waitStatus(t, ts, other, 200)
	a := idemPost(t, ts, "/v1/pets", ts.key, "shared", body)
	b := idemPost(t, ts, "/v1/pets", other, "shared", body)
	if a.status != 201 || b.status != 201 || b.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("two API keys, one Idempotency-Key: %d %s and %d %s (replayed %q)", a.status, a.body, b.status, b.body, b.header.Get("Idempotency-Replayed"))
	}
	if decode[Pet](t, a).ID == decode[Pet](t, b).ID {
		t.Fatal("two API keys got one pet")
	}
	// Each key's retry gets its own answer.
	if r := idemPost(t, ts, "/v1/pets", other, "shared", body); r.header.Get("Idempotency-Replayed") != "true" || !bytes.Equal(r.body, b.body) {
		t.Fatalf("the other key's retry: %d %s", r.status, r.body)
	}
}

func TestIdempotencyMalformedKeys(t *testing.T) {
	ts := startServer(t)
	for name, header := range map[string][]string{
		"empty":                   {"Idempotency-Key", ""},
		"empty quoted":            {"Idempotency-Key", `""`},
		"256 characters":          {"Idempotency-Key", strings.Repeat("k", 256)},
		"256 characters quoted":   {"Idempotency-Key", `"` + strings.Repeat("k", 256) + `"`},
		"a tab":                   {"Idempotency-Key", "a\tb"},
		"non-ASCII":               {"Idempotency-Key", "clé"},
		"unclosed quote":          {"Idempotency-Key", `"abc`},
		"data after the quote":    {"Idempotency-Key", `"abc"d`},
		"a bad escape":            {"Idempotency-Key", `"a\nb"`},
		"two headers":             {"Idempotency-Key", "a", "Idempotency-Key", "b"},
		"a quote then a bare key": {"Idempotency-Key", `"a"`, "Idempotency-Key", "a"},
	} {
		r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dogs"}`, header...)
		wantError(t, r, 400, "validation_failed")
		if !strings.Contains(string(r.body), "Idempotency-Key") {
			t.Errorf("%s: the error does not name the header: %s", name, r.body)
		}
	}
	// A control character never reaches the handler: net/http refuses the
	// request line by line. Sent raw, it is a 400 and creates nothing.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"name":"Dogs"}`
	fmt.Fprintf(conn, "POST /v1/categories HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Idempotency-Key: a\x01b\r\nContent-Length: %d\r\n\r\n%s", ts.key, len(body), body)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("control character: %d, want 400", resp.StatusCode)
	}
	// Nothing was created by any of them: the name is free.
	if r := idemPost(t, ts, "/v1/categories", ts.key, strings.Repeat("k", 255), body); r.status != 201 {
		t.Fatalf("a 255-character key: %d %s", r.status, r.body)
	}
}

func TestIdempotencyRefusalsAreNotStored(t *testing.T) {
	ts := startServer(t)
	first := decode[Category](t, ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dogs"}`))
	// A pet of a category that does not exist yet: 400, not stored.
	body := fmt.Sprintf(`{"name":"Rex","categoryId":%d}`, first.ID+1)
	wantError(t, idemPost(t, ts, "/v1/pets", ts.key, "k", body), 400, "validation_failed")
	if second := decode[Category](t, ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Cats"}`)); second.ID != first.ID+1 {
		t.Fatalf("the next category got id %d, want %d", second.ID, first.ID+1)
	}
	// The same request again, now valid: created, not replayed.
	r := idemPost(t, ts, "/v1/pets", ts.key, "k", body)
	if r.status != 201 || r.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("after the fix: %d %s (replayed %q)", r.status, r.body, r.header.Get("Idempotency-Replayed"))
	}
	// A body that fails validation, then a fixed one, with one key.
	wantError(t, idemPost(t, ts, "/v1/categories", ts.key, "v", `{"name":""}`), 400, "validation_failed")
	if r := idemPost(t, ts, "/v1/categories", ts.key, "v", `{"name":"Birds"}`); r.status != 201 {
		t.Fatalf("after a validation error: %d %s", r.status, r.body)
	}
	// 415 and 413, then the right request.
	r = ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Fish"}`, "Idempotency-Key", "m", "Content-Type", "text/plain")
	wantError(t, r, 415, "unsupported_media_type")
	wantError(t, idemPost(t, ts, "/v1/categories", ts.key, "m", `{"name":"`+strings.Repeat("x", maxBodyBytes)+`"}`), 413, "payload_too_large")
	if r := idemPost(t, ts, "/v1/categories", ts.key, "m", `{"name":"Fish"}`); r.status != 201 {
		t.Fatalf("after 415 and 413: %d %s", r.status, r.body)
	}
	// 401: an unknown API key stores nothing under anyone's scope.
	wantError(t, idemPost(t, ts, "/v1/categories", newKeySecret("production"), "u", `{"name":"Frogs"}`), 401, "unauthorized")
	if r := idemPost(t, ts, "/v1/categories", ts.key, "u", `{"name":"Frogs"}`); r.status != 201 {
		t.Fatalf("after a 401: %d %s", r.status, r.body)
	}
}

func TestIdempotencyAnswersExpire(t *testing.T) {
	clock := &testClock{}
	db := testDB(t)
	key := createKey(t, db, "--plan", "business")
	ts := startServerIn(t, clock.context(), db, key)
	cat := decode[Category](t, ts.do(t, "POST", "/v1/categories", key, `{"name":"Dogs"}`))
	body := fmt.Sprintf(`{"name":"Rex","categoryId":%d}`, cat.ID)
	first := idemPost(t, ts, "/v1/pets", key, "k", body)
	clock.add(defaultIdemTTL - time.Minute)
	wantReplay(t, first, idemPost(t, ts, "/v1/pets", key, "k", body))
	clock.add(time.Minute)
	again := idemPost(t, ts, "/v1/pets", key, "k", body)
	if again.status != 201 || again.header.Get("Idempotency-Replayed") != "" || decode[Pet](t, again).ID == decode[Pet](t, first).ID {
		t.Fatalf("after the TTL: %d %s (replayed %q), first %s", again.status, again.body, again.header.Get("Idempotency-Replayed"), first.body)
	}
	// The new answer is kept as the first was.
	wantReplay(t, again, idemPost(t, ts, "/v1/pets", key, "k", body))

	// A shorter --idempotency-ttl applies to the answers kept already, and
	// the purge, which runs at the start, deletes the expired ones.
	ts.stop()
	clock.add(2 * time.Minute)
	ts = startServerIn(t, clock.context(), db, key, "--idempotency-ttl", "1m")
	store := openTestStore(t, db)
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err := store.IdempotentAnswer(context.Background(), idemRequest{KeyID: 1, Key: "k", Owner: 1, Now: clock.now(), Since: time.Unix(0, 0)})
		if err != nil && !errors.Is(err, errInFlight) {
			t.Fatal(err)
		}
		if a == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired answer is still stored 10s after the start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := idemPost(t, ts, "/v1/pets", key, "k", body)
	if r.status != 201 || r.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("after the purge: %d %s", r.status, r.body)
	}
}

// TestIdempotencyConcurrentRequestsCreateOnce sends one key from 50
// goroutines at once: one pet, and every answer is its 201 (first or
// replayed) or 409 idempotency_key_in_use.
func TestIdempotencyConcurrentRequestsCreateOnce(t *testing.T) {
	ts := startServer(t)
	cat := decode[Category](t, ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dogs"}`))
	idemConcurrent(t, []*testServer{ts}, ts.key, "same", fmt.Sprintf(`{"name":"Rex","categoryId":%d}`, cat.ID))
	if n := countPets(t, ts, "Rex"); n != 1 {
		t.Fatalf("%d pets, want 1", n)
	}
}

// idemConcurrent sends body with one Idempotency-Key from 50 goroutines at
// once, spread over servers, and checks the answers: each is the one 201,
// or a 409 idempotency_key_in_use with Retry-After: 1.
func idemConcurrent(t *testing.T, servers []*testServer, key, idemKey, body string) {
	t.Helper()
	const n = 50
	answers := make([]response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = servers[i%len(servers)].send("POST", "/v1/pets", key, body, "Idempotency-Key", idemKey)
		})
	}
	close(start)
	wg.Wait()
	var created []byte
	inUse, fresh := 0, 0
	for i, r := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch r.status {
		case 201:
			if created != nil && !bytes.Equal(r.body, created) {
				t.Fatalf("two different 201s: %s and %s", created, r.body)
			}
			created = r.body
			if r.header.Get("Idempotency-Replayed") == "" {
				fresh++
			}
		case 409:
			wantError(t, r, 409, "idempotency_key_in_use")
			if r.header.Get("Retry-After") != "1" {
				t.Fatalf("409 in use with Retry-After %q", r.header.Get("Retry-After"))
			}
			inUse++
		default:
			t.Fatalf("answer %d %s", r.status, r.body)
		}
	}
	if created == nil || fresh != 1 {
		t.Fatalf("%d 201s not replayed among %d answers (%d in use), want 1", fresh, n, inUse)
	}
	t.Logf("%d answers: %d in use, the rest the 201", n, inUse)
}

// TestIdempotencyStoreBackstop claims one key from many writes at once in
// the store itself, with no server's in-flight check before it: exactly
// one creates, in one batch or across batches, and the others are
// errIdemExists.
func TestIdempotencyStoreBackstop(t *testing.T) {
	store := openTestStore(t, testDB(t))
	ctx := context.Background()
	if _, _, err := store.CreateFirstKey(ctx, hashKey("x"), "k", "production"); err != nil {
		t.Fatal(err)
	}
	cat, err := store.CreateCategory(ctx, Category{Name: "Dogs"}, "dogs", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			now := time.Now()
			w := &idemWrite[Pet]{idemRequest: idemRequest{KeyID: 1, Key: "same", Owner: int64(i), Now: now, Since: now.Add(-time.Hour)},
				answer: func(p Pet, err error) (int, []byte, bool) { return 201, []byte(fmt.Sprint(p.ID)), err == nil }}
			<-start
			_, errs[i] = store.CreatePet(ctx, Pet{Name: "Rex", CategoryID: cat.ID, Status: "available"}, w)
		})
	}
	close(start)
	wg.Wait()
	made := 0
	for _, err := range errs {
		switch {
		case err == nil:
			made++
		case !errors.Is(err, errIdemExists):
			t.Fatalf("create: %v", err)
		}
	}
	var pets int
	if err := store.EachPetAfter(ctx, petFilter{}, 0, maxPageSize, func(Pet) error { pets++; return nil }); err != nil {
		t.Fatal(err)
	}
	if made != 1 || pets != 1 {
		t.Fatalf("%d creates succeeded and %d pets exist, want 1 and 1", made, pets)
	}
}

func TestIdempotencyKeyHeader(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"abc", "abc", true},
		{`"abc"`, "abc", true},
		{`"a\"b"`, `a"b`, true},
		{`"a\\b"`, `a\b`, true},
		{`a"b`, `a"b`, true},
		{" abc ", "abc", true},
		{"a b", "a b", true},
		{strings.Repeat("x", 255), strings.Repeat("x", 255), true},
		{`"` + strings.Repeat("x", 255) + `"`, strings.Repeat("x", 255), true},
		{"", "", false},
		{`""`, "", false},
		{`"`, "", false},
		{`"a`, "", false},
		{`"a"b`, "", false},
		{`"a\b"`, "", false},
		{`"a\"`, "", false},
		{strings.Repeat("x", 256), "", false},
		{"a\tb", "", false},
		{"a\x7fb", "", false},
		{"é", "", false},
		{"\xff", "", false},
	} {
		h := http.Header{"Idempotency-Key": {c.in}}
		got, present, err := idempotencyKey(h)
		if (err == nil) != c.ok || (c.ok && (got != c.want || !present)) {
			t.Errorf("idempotencyKey(%q) = %q, %v, %v; want %q, ok %v", c.in, got, present, err, c.want, c.ok)
		}
	}
	if _, present, err := idempotencyKey(http.Header{}); present || err != nil {
		t.Errorf("no header: present %v, err %v", present, err)
	}
}

// TestIdemKeyPatternMatchesServer holds the document's Idempotency-Key
// pattern and idempotencyKey to one answer, on values as HTTP carries
// them (no white space around): the cases above, both forms at and past
// the length bound, escapes, and random values of printable ASCII,
// quotes, backslashes and a few others.
func TestIdemKeyPatternMatchesServer(t *testing.T) {
	re := regexp.MustCompile(idemKeyPattern())
	check := func(v string) {
		t.Helper()
		if v != strings.Trim(v, " \t") {
			return // not a value HTTP carries
		}
		_, _, err := idempotencyKey(http.Header{"Idempotency-Key": {v}})
		if got, want := re.MatchString(v), err == nil; got != want {
			t.Fatalf("%q: the pattern says %v, idempotencyKey %v (%v)", v, got, want, err)
		}
		if re.MatchString(v) && len(v) > idemKeyMaxLength {
			t.Fatalf("%q: %d characters, above the maxLength %d", v, len(v), idemKeyMaxLength)
		}
	}
	x := strings.Repeat
	for _, v := range []string{
		"abc", `"abc"`, `"a\"b"`, `"a\\b"`, `a"b`, `ab"`, "a b", `" a "`, `"`, `""`, `"a`, `"a"b`, `"a\b"`, `"a\"`,
		x("x", 255), x("x", 256), `"` + x("x", 255) + `"`, `"` + x("x", 256) + `"`, `"` + x(`\"`, 255) + `"`,
		`"` + x(`\\`, 256) + `"`, "a\tb", "a\x7fb", "é", "\xff", "", `\`, `"\\"`, `x\`,
	} {
		check(v)
	}
	if n := len(`"` + x(`\"`, maxIdemKeyLen) + `"`); n != idemKeyMaxLength {
		t.Errorf("the longest quoted key is %d characters, idemKeyMaxLength %d", n, idemKeyMaxLength)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	const alphabet = "ab \"\\~!\x7f\t\x00é"
	for range 20000 {
		n := rng.IntN(12)
		if rng.IntN(8) == 0 {
			n = 250 + rng.IntN(10)
		}
		var b strings.Builder
		if rng.IntN(2) == 0 {
			b.WriteByte('"')
		}
		for range n {
			if rng.IntN(3) == 0 {
				b.WriteByte(alphabet[rng.IntN(len(alphabet))])
			} else {
				b.WriteByte(byte('a' + rng.IntN(26)))
			}
		}
		if rng.IntN(2) == 0 {
			b.WriteByte('"')
		}
		check(b.String())
	}
}

// TestStoredAnswersFitTheCap builds the largest answers the creates can
// give (names and descriptions at their length limits, of the characters
// that JSON and %q escape the longest) and checks that they fit
// maxStoredBody, so that every 201 and 409 is kept.
func TestStoredAnswersFitTheCap(t *testing.T) {
	largest := 0
	for _, r := range []string{"\x01", "\u2028", "\U0010FFFF", `"`, `\`, "<", "\ufffd", "é"} {
		name := strings.Repeat(r, maxNameLen)
		desc := strings.Repeat(r, maxDescriptionLen)
		for _, v := range []any{
			Category{ID: 1 << 62, Name: name, Description: &desc},
			Pet{ID: 1 << 62, Name: name, CategoryID: 1 << 62, Status: "available"},
			Order{ID: 1 << 62, PetID: 1 << 62, Quantity: maxOrderQuantity, Status: "placed", CreatedAt: time.Now().UTC().Format(time.RFC3339)},
			errorf("conflict", "a category named %q exists already (names are compared ignoring case, width and invisible characters)", name),
		} {
			var buf bytes.Buffer
			if err := encodeJSON(&buf, v); err != nil {
				t.Fatal(err)
			}
			largest = max(largest, buf.Len())
		}
	}
	if largest > maxStoredBody {
		t.Fatalf("the largest answer is %d bytes, above maxStoredBody (%d)", largest, maxStoredBody)
	}
	t.Logf("the largest answer is %d bytes; the cap is %d", largest, maxStoredBody)
}

// TestIdempotencyCrashRetries kills the real program with SIGKILL in the
// middle of a burst of keyed creates, restarts it, and resends every
// request that got no answer, with its key: each is then replayed (it had
// committed) or created now, and no pet exists twice.
func TestIdempotencyCrashRetries(t *testing.T) {
	const rounds, clients = 3, 8
	db := testDB(t)
	key := createKey(t, db, "--plan", "enterprise", "--rpm", "100000000", "--rpd", "100000000")
	p := startProcess(t, db, "--busy-timeout", "1s")
	ts := &testServer{base: "http://" + p.addr, key: key, client: contractClient(t, nil)}
	cat := decode[Category](t, ts.do(t, "POST", "/v1/categories", key, `{"name":"Dogs"}`))
	type sent struct {
		idemKey, body string
		answer        []byte // the 201's body; nil while it had none
	}
	var all []*sent
	replayed, createdLate := 0, 0
	for round := range rounds {
		var mu sync.Mutex
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for c := range clients {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					s := &sent{idemKey: fmt.Sprintf("r%d-c%d-%d", round, c, i)}
					s.body = fmt.Sprintf(`{"name":%q,"categoryId":%d}`, s.idemKey, cat.ID)
					mu.Lock()
					all = append(all, s)
					mu.Unlock()
					r, err := ts.send("POST", "/v1/pets", key, s.body, "Idempotency-Key", s.idemKey)
					if err != nil {
						return // the server is gone; the request is to be resent
					}
					if r.status != 201 {
						t.Errorf("%s: %d %s", s.idemKey, r.status, r.body)
						return
					}
					mu.Lock()
					s.answer = r.body
					mu.Unlock()
				}
			})
		}
		time.Sleep(time.Duration(100+50*round) * time.Millisecond) // the kill point
		p.cmd.Process.Signal(syscall.SIGKILL)
		close(stop)
		wg.Wait()
		p.wait(t, 10*time.Second)

		p = startProcess(t, db, "--busy-timeout", "1s")
		ts = &testServer{base: "http://" + p.addr, key: key, client: ts.client}
		for _, s := range all {
			if s.answer != nil {
				continue
			}
			r := ts.do(t, "POST", "/v1/pets", key, s.body, "Idempotency-Key", s.idemKey)
			// A killed request holds its key no longer (on PostgreSQL,
			// its advisory lock went with its session): no 409 in use.
			if r.status != 201 {
				t.Fatalf("resent %s: %d %s", s.idemKey, r.status, r.body)
			}
			if r.header.Get("Idempotency-Replayed") == "true" {
				replayed++
			} else {
				createdLate++
			}
			s.answer = r.body
		}
	}
	pets := map[string][]int64{}
	for _, pet := range decode[[]Pet](t, ts.do(t, "GET", "/v1/pets", key, "")) {
		pets[pet.Name] = append(pets[pet.Name], pet.ID)
	}
	for _, s := range all {
		var want Pet
		if err := json.Unmarshal(s.answer, &want); err != nil {
			t.Fatalf("%s: %v", s.idemKey, err)
		}
		if ids := pets[s.idemKey]; len(ids) != 1 || ids[0] != want.ID {
			t.Errorf("%s: pets %v, want exactly [%d]", s.idemKey, ids, want.ID)
		}
	}
	if len(pets) != len(all) {
		t.Errorf("%d pets for %d requests", len(pets), len(all))
	}
	if replayed+createdLate == 0 {
		t.Errorf("no request was in flight at any of the %d kills: the test proves little", rounds)
	}
	t.Logf("%d kills, %d requests; of those resent, %d had committed (replayed) and %d were created then",
		rounds, len(all), replayed, createdLate)
}

// TestIdempotencyConcurrentAcrossInstances sends one key from 50
// goroutines spread over three instances on one PostgreSQL database.
func TestIdempotencyConcurrentAcrossInstances(t *testing.T) {
	base := needPostgres(t)
	db := postgresSchema(t, base)
	key := pmBigKey(t, db)
	servers := pmStart(t, db, key, 3)
	cat := decode[Category](t, servers[0].do(t, "POST", "/v1/categories", key, `{"name":"Dogs"}`))
	for round := range 5 {
		name := fmt.Sprintf("Rex %d", round)
		idemConcurrent(t, servers, key, name, fmt.Sprintf(`{"name":%q,"categoryId":%d}`, name, cat.ID))
		for _, ts := range servers {
			if n := countPets(t, ts, name); n != 1 {
				t.Fatalf("round %d: %d pets on %s, want 1", round, n, ts.base)
			}
		}
	}
}

// TestPostgresOutageRetriedWithKeys cuts two instances' connections to
// PostgreSQL in the middle of a burst of keyed creates, COMMITs among
// them, and restores them; then every create that got no 201 (a 503, a
// broken connection) is sent again with its key until it gets one. Each is
// replayed (it had committed: its answer was lost, not its row) or created
// then, and no category exists twice (DECISIONS.md, section 8).
func TestPostgresOutageRetriedWithKeys(t *testing.T) {
	t.Parallel()
	base := needPostgres(t)
	db := postgresSchema(t, base)
	key := pmBigKey(t, db)
	proxy := pmStartProxy(t, pmTarget(t, db))
	servers := pmStart(t, pmViaProxy(t, db, proxy.addr()), key, 2, "--busy-timeout", "1s")
	type sent struct {
		name   string
		answer []byte
	}
	var mu sync.Mutex
	var all []*sent
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			ts := servers[w%2]
			for i := 0; i < 400; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s := &sent{name: fmt.Sprintf("w%d-%d", w, i)}
				r, _, err := pmSend(ts, 10*time.Second, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":%q}`, s.name), "Idempotency-Key", s.name)
				mu.Lock()
				all = append(all, s)
				if err == nil && r.status == 201 {
					s.answer = r.body
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	time.Sleep(400 * time.Millisecond)
	proxy.cut()
	time.Sleep(1500 * time.Millisecond)
	proxy.restore()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	replayed, created, lost := 0, 0, 0
	for i, s := range all {
		if s.answer != nil {
			continue
		}
		lost++
		ts := servers[i%2]
		deadline := time.Now().Add(30 * time.Second) // a mark of a broken request lapses within 2 x 1s + 5s
		for {
			r, _, err := pmSend(ts, 10*time.Second, "POST", "/v1/categories", key, fmt.Sprintf(`{"name":%q}`, s.name), "Idempotency-Key", s.name)
			if err == nil && r.status == 201 {
				s.answer = r.body
				if r.header.Get("Idempotency-Replayed") == "true" {
					replayed++
				} else {
					created++
				}
				break
			}
			if err == nil && r.status != 503 && (r.status != 409 || pmErrorCode(r.body) != "idempotency_key_in_use") {
				t.Fatalf("resent %s: %d %s", s.name, r.status, r.body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("resent %s: still no 201 after 30s (%v)", s.name, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	cats := map[string]int64{}
	for _, c := range decode[[]Category](t, servers[0].do(t, "GET", "/v1/categories", key, "")) {
		if _, dup := cats[c.Name]; dup {
			t.Errorf("category %q exists twice", c.Name)
		}
		cats[c.Name] = c.ID
	}
	for _, s := range all {
		var c Category
		if err := json.Unmarshal(s.answer, &c); err != nil || cats[s.name] != c.ID {
			t.Errorf("%s: answered %s, stored with id %d", s.name, s.answer, cats[s.name])
		}
	}
	if len(cats) != len(all) {
		t.Errorf("%d categories for %d creates", len(cats), len(all))
	}
	if lost == 0 {
		t.Error("no create went without its 201 during the outage: the test proves little")
	}
	t.Logf("%d creates; %d without a 201 during the outage, of which %d had committed (replayed) and %d were created on retry", len(all), lost, replayed, created)
}
