package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestValidName(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name    string
		in      *string
		want    string
		wantErr string
	}{
		{"absent", nil, "", "required"},
		{"plain", str("Dog"), "Dog", ""},
		{"trimmed", str(" \t Dog \n"), "Dog", ""},
		{"inner spaces kept", str("Guinea  pig"), "Guinea  pig", ""},
		{"unicode spaces trimmed", str("\u00a0Dog\u2003"), "Dog", ""},
		{"empty", str(""), "", "empty"},
		{"blank", str("   "), "", "empty"},
		{"100 code points", str(strings.Repeat("ß", 100)), strings.Repeat("ß", 100), ""},
		{"101 code points", str(strings.Repeat("ß", 101)), "", "at most 100"},
		{"100 after trim", str("  " + strings.Repeat("a", 100) + "  "), strings.Repeat("a", 100), ""},
		{"tab inside", str("a\tb"), "", "control"},
		{"NUL", str("a\x00b"), "", "control"},
		{"C1 control", str("a\u0085b"), "", "control"},
		{"emoji", str("🐶"), "🐶", ""},
		{"emoji with a variation selector", str("❤️ pets"), "❤️ pets", ""},
		{"emoji joined", str("👨\u200d👩\u200d👧"), "👨\u200d👩\u200d👧", ""},
		{"zero width space", str("dog\u200b"), "", "must not contain U+200B, an invisible"},
		{"soft hyphen", str("d\u00adog"), "", "U+00AD"},
		{"right-to-left override", str("\u202edog"), "", "must not contain U+202E, a bidirectional control"},
		{"byte order mark", str("dog\ufeff"), "", "U+FEFF"},
		{"word joiner", str("dog\u2060"), "", "U+2060"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := validName("name", tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Message, tt.wantErr) || err.Code != "validation_failed" {
					t.Fatalf("validName = %q, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("validName = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFoldName(t *testing.T) {
	same := [][2]string{
		{"Dog", "dog"},
		{"DOG", "dOg"},
		{"ÉCOLE", "école"},
		{"école", "e\u0301cole"}, // precomposed and combining accent
		{"Straße", "STRASSE"},
		{"Σίσυφος", "ΣΊΣΥΦΟΣ"},
	}
	for _, p := range same {
		if foldName(p[0]) != foldName(p[1]) {
			t.Errorf("foldName(%q) = %q, foldName(%q) = %q; want equal", p[0], foldName(p[0]), p[1], foldName(p[1]))
		}
	}
	for _, p := range [][2]string{{"Dog", "Dogs"}, {"cote", "côte"}} {
		if foldName(p[0]) == foldName(p[1]) {
			t.Errorf("foldName(%q) == foldName(%q); want distinct", p[0], p[1])
		}
	}
}

// stalledStore is a store whose category list never comes while the
// request waits: a database that stopped answering.
type stalledStore struct {
	Store
	gen   atomic.Uint64
	reads atomic.Int64
}

func (s *stalledStore) CategoriesGen(context.Context) (uint64, error) { return s.gen.Add(1), nil }

func (s *stalledStore) EachCategory(ctx context.Context, fn func(Category) error) error {
	s.reads.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// TestListAnswers503WithinBusyTimeout sends GETs at once to a list whose
// database stalls: each is answered 503 within about the busy timeout of
// its arrival, not one busy timeout after another as they queue for the
// read, and those that waited for a failed read share its failure.
func TestListAnswers503WithinBusyTimeout(t *testing.T) {
	const busy = 300 * time.Millisecond
	s := &stalledStore{}
	h := handleCategoryList(s, "http://127.0.0.1/v1", busy)
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/categories", nil))
			took := time.Since(start)
			if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
				t.Errorf("GET %d: %d %s, want 503 with Retry-After", i, w.Code, w.Body)
			}
			// Queued one behind the other, the last would take n x busy.
			if took > 3*busy {
				t.Errorf("GET %d answered after %v; the busy timeout is %v", i, took, busy)
			}
		})
	}
	wg.Wait()
	if r := s.reads.Load(); r >= n {
		t.Errorf("%d reads for %d GETs: the waiters did not share the failed read", r, n)
	}
}

// TestListReaderLeavingIsNotAFailure: the GET reading the list goes away
// (its client closed the connection) while others wait for its read. They
// must not be answered with its cancellation, a 500: they read themselves,
// and here, the database stalling, get 503.
func TestListReaderLeavingIsNotAFailure(t *testing.T) {
	const busy = 300 * time.Millisecond
	s := &stalledStore{}
	h := handleCategoryList(s, "http://127.0.0.1/v1", busy)
	ctx, cancel := context.WithCancel(context.Background())
	leaving := make(chan struct{})
	go func() {
		defer close(leaving)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/categories", nil).WithContext(ctx))
	}()
	for deadline := time.Now().Add(5 * time.Second); s.reads.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first GET did not start reading within 5s")
		}
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/categories", nil))
			if w.Code != http.StatusServiceUnavailable {
				t.Errorf("GET %d waiting for the read of a client that left: %d %s, want 503", i, w.Code, w.Body)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // let them queue for the read (if late, they pass without testing this)
	cancel()
	<-leaving
	wg.Wait()
}

// TestConflictNamesTheCategoryThatExists: a 409 names the category that
// holds the name, as it is spelled, not only the one sent; with an
// Idempotency-Key too, and when the two meet in one batch.
func TestConflictNamesTheCategoryThatExists(t *testing.T) {
	ts := startServer(t)
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`); r.status != 201 {
		t.Fatalf("seed: %d %s", r.status, r.body)
	}
	message := func(r response) string {
		t.Helper()
		wantError(t, r, http.StatusConflict, "conflict")
		return decode[apiError](t, r).Message
	}
	if m := message(ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"dog"}`)); !strings.Contains(m, `"Dog"`) || !strings.Contains(m, `"dog"`) {
		t.Errorf("message %q does not name both Dog, which exists, and dog, which was sent", m)
	}
	if m := message(ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)); strings.Count(m, "Dog") != 1 {
		t.Errorf("message %q, want Dog named once when it was sent as it exists", m)
	}
	keyed := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"DOG"}`, "Idempotency-Key", "conflict-1")
	if m := message(keyed); !strings.Contains(m, `"Dog"`) {
		t.Errorf("keyed: message %q does not name Dog", m)
	}
	if again := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"DOG"}`, "Idempotency-Key", "conflict-1"); string(again.body) != string(keyed.body) {
		t.Errorf("replay %s, want the stored %s", again.body, keyed.body)
	}

	// Two spellings at once, keyed and not: whichever is made, the other's
	// 409 names it (on SQLite they often share a batch).
	for i := range 20 {
		names := [2]string{fmt.Sprintf("Cat%d", i), fmt.Sprintf("CAT%d", i)}
		var rs [2]response
		var wg sync.WaitGroup
		for j := range 2 {
			wg.Go(func() {
				var hdr []string
				if j == 1 {
					hdr = []string{"Idempotency-Key", fmt.Sprintf("race-%d", i)}
				}
				rs[j], _ = ts.send("POST", "/v1/categories", ts.key, `{"name":"`+names[j]+`"}`, hdr...)
			})
		}
		wg.Wait()
		won := slices.IndexFunc(rs[:], func(r response) bool { return r.status == 201 })
		if won < 0 || rs[1-won].status != 409 {
			t.Fatalf("round %d: statuses %d and %d, want one 201 and one 409", i, rs[0].status, rs[1].status)
		}
		if m := message(rs[1-won]); !strings.Contains(m, `"`+names[won]+`"`) {
			t.Errorf("round %d: %q was made, but the other's 409 says %q", i, names[won], m)
		}
	}
}
