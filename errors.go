// errors.go owns what a client sees of an error: the Error object, the
// code-to-status table, and writeError, the one way a handler answers with
// an error.

package main

import (
	"errors"
	"fmt"
	"net/http"
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
// rarely clears within a second.
const retryAfterUnavailable = "5"

// writeError answers with err as an Error object: an *apiError as it is,
// errUnavailable as a 503, anything else as a 500 whose cause goes to the
// log only.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, errUnavailable):
		noteError(r, err)
		w.Header().Set("Retry-After", retryAfterUnavailable)
		ae = errorf("unavailable", "the database is busy or cannot be written; retry later")
	default:
		noteError(r, err)
		ae = errorf("internal_error", "internal error; the request id is in the X-Request-Id header")
	}
	writeJSON(w, ae.Status, ae)
}
