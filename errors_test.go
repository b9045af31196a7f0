package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWriteError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantRetry  string
	}{
		{"api error", errorf(409, "conflict", "taken"), 409, "conflict", ""},
		{"wrapped api error", fmt.Errorf("ctx: %w", errorf(400, "validation_failed", "bad")), 400, "validation_failed", ""},
		{"database unavailable", fmt.Errorf("insert: %w", errUnavailable), 503, "unavailable", "5"},
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
	h := recoverPanics(slog.New(slog.NewTextHandler(io.Discard, nil)), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != 500 || !strings.Contains(w.Body.String(), `"code":"internal_error"`) {
		t.Errorf("panic answered %d %s, want a 500 Error", w.Code, w.Body.String())
	}
}
