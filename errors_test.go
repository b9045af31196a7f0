package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestWriteError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantRetry  string
	}{
		{"api error", errorf("conflict", "taken"), 409, "conflict", ""},
		{"wrapped api error", fmt.Errorf("ctx: %w", errorf("validation_failed", "bad")), 400, "validation_failed", ""},
		{"database unavailable", fmt.Errorf("insert: %w", errUnavailable), 503, "unavailable", "5"},
		{"database away", fmt.Errorf("insert: %w: dial: refused", errDBAway), 503, "unavailable", "1"},
		{"anything else", errors.New("secret cause"), 500, "internal_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeError(w, httptest.NewRequest("GET", "/", nil), tt.err)
			var e apiError
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
				t.Fatal(err)
			}
			if w.Code != tt.wantStatus || e.Status != tt.wantStatus || e.Code != tt.wantCode {
				t.Errorf("got %d %+v, want %d %s", w.Code, e, tt.wantStatus, tt.wantCode)
			}
			if got := w.Header().Get("Retry-After"); got != tt.wantRetry {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetry)
			}
			if strings.Contains(w.Body.String(), "secret cause") {
				t.Errorf("the cause reached the client: %s", w.Body.String())
			}
		})
	}
}

func TestRecoverPanics(t *testing.T) {
	h := recoverPanics(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 500 || !strings.Contains(w.Body.String(), `"code":"internal_error"`) {
		t.Errorf("panic answered %d %s, want a 500 Error", w.Code, w.Body.String())
	}
}

func TestCheckJSONShape(t *testing.T) {
	tests := []struct {
		body, wantErr string
	}{
		{`{"name":"a"}`, ""},
		{`{"name":"a","description":"b"}`, ""},
		{`{"a":{"x":1},"b":{"x":2}}`, ""}, // the same key in different objects
		{`{"a":[{"x":1},{"x":2}]}`, ""},
		{`{"a":"a","b":"a"}`, ""}, // equal values are not keys
		{`{"name":"a","name":"b"}`, "twice"},
		{`{"name":"a","n\u0061me":"b"}`, "twice"}, // escapes name the same key
		{`{"a":{"x":1,"x":2}}`, "twice"},
		{`{"a":[{"x":1,"x":2}]}`, "twice"},
		{`{"a":` + strings.Repeat("[", 31) + strings.Repeat("]", 31) + `}`, ""},
		{`{"a":` + strings.Repeat("[", 32) + strings.Repeat("]", 32) + `}`, "nested"},
		{`{"a":` + strings.Repeat("[", 100000), "nested"},
		{`{"a":1e400}`, ""},
		{`{"a":`, ""}, // syntax errors are the decoder's
	}
	for _, tt := range tests {
		_, err := checkJSONShape([]byte(tt.body))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("checkJSONShape(%.40q) = %v, want nil", tt.body, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Message, tt.wantErr) || err.Code != "invalid_json"):
			t.Errorf("checkJSONShape(%.40q) = %v, want an invalid_json error with %q", tt.body, err, tt.wantErr)
		}
	}
}

// TestTrailingDataIsInvalidJSON checks that a body with data after its
// object is invalid_json whatever the object holds: a field of the wrong
// type or an unknown one must not make it validation_failed, or a client
// that fixes that field then meets invalid_json for the same body.
func TestTrailingDataIsInvalidJSON(t *testing.T) {
	for _, c := range []struct {
		body string
		dst  func() any
	}{
		{`{"name":5}x`, func() any { return new(newCategory) }},
		{`{"colour":"red"} {}`, func() any { return new(newCategory) }},
		{`{"NAME":1} {}`, func() any { return new(newCategory) }},
		{`{"name":"Dog"} {}`, func() any { return new(newOrder) }},
		{`{"petId":"1","quantity":1}garbage`, func() any { return new(newOrder) }},
		{`{"name":"p","categoryId":1.5}]`, func() any { return new(newPet) }},
		{`{"name":"Dog"}x`, func() any { return new(newCategory) }},
	} {
		r := httptest.NewRequest("POST", "/v1/x", strings.NewReader(c.body))
		r.Header.Set("Content-Type", "application/json")
		err := decodeJSON(httptest.NewRecorder(), r, c.dst())
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_json" {
			t.Errorf("%T %s: %v, want 400 invalid_json", c.dst(), c.body, err)
		}
	}
}

// TestErrorCodesMatchDocument checks that errorf's table holds exactly the
// codes of the OpenAPI document's Error.code enum, so that every code a
// handler may use has its status, and no documented code lacks one.
func TestErrorCodesMatchDocument(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Code struct {
							Enum []string `json:"enum"`
						} `json:"code"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPISource, &doc); err != nil {
		t.Fatal(err)
	}
	enum := doc.Components.Schemas.Error.Properties.Code.Enum
	if len(enum) == 0 {
		t.Fatal("no Error.code enum in openapi.json")
	}
	for _, code := range enum {
		if _, ok := errorStatus[code]; !ok {
			t.Errorf("documented code %q has no status in errorStatus", code)
		}
	}
	for code := range errorStatus {
		if !slices.Contains(enum, code) {
			t.Errorf("errorStatus has %q, which the document does not list", code)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("errorf with an unknown code did not panic")
		}
	}()
	errorf("no_such_code", "x")
}

// TestWriteRawContentLength: every body writeRaw sends has a Content-Length
// and goes out whole, never chunked, on GET and HEAD alike, whether
// net/http computes the length (up to autoLengthMax) or writeRaw sets it.
func TestWriteRawContentLength(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		writeRaw(w, http.StatusTeapot, []byte(strings.Repeat("x", n)))
	}))
	defer srv.Close()
	for _, n := range []int{0, 1, 112, autoLengthMax - 1, autoLengthMax, autoLengthMax + 1, 5000, 100_000} {
		for _, method := range []string{"GET", "HEAD"} {
			req, _ := http.NewRequest(method, srv.URL+"?n="+strconv.Itoa(n), nil)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			wantBody := n
			if method == "HEAD" {
				wantBody = 0
			}
			if resp.StatusCode != http.StatusTeapot || resp.ContentLength != int64(n) || len(resp.TransferEncoding) != 0 || len(body) != wantBody ||
				resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s %d bytes: status %d, Content-Length %d, Transfer-Encoding %v, %d bytes read, Content-Type %q",
					method, n, resp.StatusCode, resp.ContentLength, resp.TransferEncoding, len(body), resp.Header.Get("Content-Type"))
			}
		}
	}
}

// clipField shows a request's field escaped, as the inside of a Go string
// literal, and at most maxFieldBytes of it, never cutting an escape.
func TestClipField(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"GET", "GET"},
		{"", ""},
		{"a\nb\r\x00", `a\nb\r\x00`},
		{"\xff\xfe", `\xff\xfe`},
		{`say "hi" \ bye`, `say \"hi\" \\ bye`},
		{"école 日本 \u2028", `école 日本 \u2028`},
		{strings.Repeat("a", maxFieldBytes), strings.Repeat("a", maxFieldBytes)},
		{strings.Repeat("a", maxFieldBytes+1), strings.Repeat("a", maxFieldBytes-len(fieldCut)) + fieldCut},
		{strings.Repeat("\x00", 100), strings.Repeat(`\x00`, (maxFieldBytes-len(fieldCut))/4) + fieldCut},
		{strings.Repeat("é", 200), strings.Repeat("é", (maxFieldBytes-len(fieldCut))/2) + fieldCut},
		{strings.Repeat("\n", 64), strings.Repeat(`\n`, 64)}, // 128 bytes escaped: whole
	} {
		if got := clipField(tt.in); got != tt.want {
			t.Errorf("clipField(%.40q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// Whatever comes in, what goes out is short, printable, valid UTF-8,
	// and, when not cut, reads back as what came in.
	pieces := []string{"a", "\n", "\xff", "é", "\u2028", `"`, `\`, "\x7f", "日", " "}
	for i := range 2000 {
		var b strings.Builder
		for j := range i % 400 {
			b.WriteString(pieces[(i*7+j*j)%len(pieces)])
		}
		in := b.String()
		out := clipField(in)
		if len(out) > maxFieldBytes || !utf8.ValidString(out) || strings.ContainsAny(out, "\n\r\x00\x7f\u2028") {
			t.Fatalf("clipField(%q) = %q: longer than %d, or not printable", in, out, maxFieldBytes)
		}
		if !strings.HasSuffix(out, fieldCut) {
			if back, err := strconv.Unquote(`"` + out + `"`); err != nil || back != in {
				t.Fatalf("clipField(%q) = %q reads back as %q (%v)", in, out, back, err)
			}
		}
	}
}

// An error message shows at most maxFieldBytes of each field of the
// request it echoes, escaped: a 405's method, a 404's path, a query value.
func TestErrorsClipRequestFields(t *testing.T) {
	ts := startServer(t)
	client := &http.Client{}
	huge := strings.Repeat("A", 10000)
	for _, tt := range []struct {
		name, method, path string
		status             int
	}{
		{"405 method", huge, "/healthz", 405},
		{"404 path", "GET", "/nothere/" + strings.Repeat("%0a%00x", 3000), 404},
		{"404 non-canonical path", "GET", "/a//" + strings.Repeat("%0ax", 3000), 404},
		{"404 docs asset", "GET", "/docs/" + strings.Repeat("%0ax", 3000), 404},
		{"400 path parameter", "GET", "/v1/pets/" + strings.Repeat("%0ax", 3000), 400},
		{"400 query", "GET", "/v1/pets?categoryId=" + strings.Repeat("%0ax", 3000), 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, ts.base+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+ts.key)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e apiError
			if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d; body %.300s", resp.StatusCode, tt.status, body)
			}
			if len(e.Message) > maxFieldBytes+150 || !strings.Contains(e.Message, fieldCut) || strings.ContainsAny(e.Message, "\n\x00") {
				t.Errorf("a message of %d bytes, not cut or not escaped: %.400q", len(e.Message), e.Message)
			}
		})
	}
	ts.stop()
	for ln := range strings.Lines(ts.stderr.String()) {
		if len(ln) > 2048 {
			t.Errorf("a log line of %d bytes: %.300s", len(ln), ln)
		}
	}
}
