// errors.go owns what a client sees of an error: the Error object, the
// code-to-status table, and writeError, the one way a handler answers with
// an error.

package main

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// apiError is what a client may see of an error.
type apiError struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// errorStatus is every code an Error may carry, with the status it comes
// with: the enum of the OpenAPI document's Error.code, and what makes a
// code and its status agree everywhere.
var errorStatus = map[string]int{
	"invalid_json":           http.StatusBadRequest,
	"validation_failed":      http.StatusBadRequest,
	"unauthorized":           http.StatusUnauthorized,
	"forbidden":              http.StatusForbidden,
	"not_found":              http.StatusNotFound,
	"method_not_allowed":     http.StatusMethodNotAllowed,
	"conflict":               http.StatusConflict,
	"idempotency_key_in_use": http.StatusConflict,
	"idempotency_key_reused": http.StatusUnprocessableEntity,
	"gone":                   http.StatusGone,
	"precondition_failed":    http.StatusPreconditionFailed,
	"payload_too_large":      http.StatusRequestEntityTooLarge,
	"unsupported_media_type": http.StatusUnsupportedMediaType,
	"rate_limited":           http.StatusTooManyRequests,
	"quota_exceeded":         http.StatusTooManyRequests,
	"key_banned":             http.StatusTooManyRequests,
	"internal_error":         http.StatusInternalServerError,
	"unavailable":            http.StatusServiceUnavailable,
}

// errorf returns the Error of code, with the status errorStatus gives it.
// A code missing from the table is a bug: it panics, and the panic becomes
// a 500 (TestErrorCodesMatchDocument keeps the table whole).
func errorf(code, format string, args ...any) *apiError {
	status, ok := errorStatus[code]
	if !ok {
		panic("errorf: unknown error code " + code)
	}
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// retryAfterUnavailable is the Retry-After of a 503: a lock or a full disk
// rarely clears within a second. retryAfterAway is that of errDBAway: a
// promoted standby takes writes within seconds (DECISIONS.md section 19).
const (
	retryAfterUnavailable = "5"
	retryAfterAway        = "1"
)

// writeError answers with err as an Error object: an *apiError as it is,
// errUnavailable as a 503, anything else as a 500 whose cause goes to the
// log only.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, errUnavailable):
		noteError(r, err)
		if errors.Is(err, errDBAway) {
			w.Header().Set("Retry-After", retryAfterAway)
		} else {
			w.Header().Set("Retry-After", retryAfterUnavailable)
		}
		ae = errorf("unavailable", "the database is busy or cannot be written; retry later")
	default:
		noteError(r, err)
		ae = errorf("internal_error", "internal error; the request id is in the X-Request-Id header")
	}
	writeJSON(w, ae.Status, ae)
}

// maxFieldBytes bounds what an error message or a log line shows of one
// field of a request (its method, path, query, X-Request-Id, User-Agent),
// counted after escaping; fieldCut ends a field cut there.
const (
	maxFieldBytes = 256
	fieldCut      = "...(truncated)"
)

// clipField returns s as it may be shown in an error message or a log
// line: escaped as the inside of a Go string literal (strconv.Quote
// without its quotes: a newline is \n, invalid UTF-8 \xff, a quote \"),
// then cut to at most maxFieldBytes, ending in fieldCut when cut. An
// escape is never cut in two. A short printable s is returned as it is.
func clipField(s string) string {
	if len(s) <= maxFieldBytes && printableField(s) {
		return s
	}
	var b, q []byte
	cut := 0 // where b ends with room left for fieldCut
	for i := 0; i < len(s); {
		_, size := utf8.DecodeRuneInString(s[i:])
		q = strconv.AppendQuote(q[:0], s[i:i+size])
		piece := q[1 : len(q)-1]
		if len(b)+len(piece) > maxFieldBytes {
			return string(b[:cut]) + fieldCut
		}
		b = append(b, piece...)
		if len(b) <= maxFieldBytes-len(fieldCut) {
			cut = len(b)
		}
		i += size
	}
	return string(b)
}

// printableField reports whether strconv.Quote would leave s as it is.
func printableField(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f || c == '"' || c == '\\' {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || !strconv.IsPrint(r) {
			return false
		}
		i += size
	}
	return true
}
