// reqstate.go owns the request's state: what the layers of one request
// tell each other (the key, the route, the cause of an error), carried in
// its context, and the recorder that watches its response for the log. It
// sits below the middleware, the handlers and the JSON codec, which all
// write to it.

package main

import (
	"context"
	"net/http"
)

// reqState is what the layers of one request tell each other: the key
// that authenticate resolved, the route that the router matched, and the
// cause of an error, for the log. It travels in the request's context, so
// that no check depends on how the ResponseWriter happens to be wrapped.
type reqState struct {
	rec     recorder // the response, as logRequests watches it
	key     *apiKey  // nil: no usable key
	expired bool     // the key sent was one that has expired
	served  bool     // requireKey let it through to an operation: its log line is never held back
	pattern string
	err     error
	trace   *span // its trace (trace.go): nil without one
}

type reqStateKey struct{}

// stateOf returns r's state, or nil when no layer gave it one.
func stateOf(r *http.Request) *reqState {
	st, _ := r.Context().Value(reqStateKey{}).(*reqState)
	return st
}

// withState returns r with st as its state.
func withState(r *http.Request, st *reqState) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), reqStateKey{}, st))
}

// noteError hands err, the cause of an error answer, to the request log.
func noteError(r *http.Request, err error) {
	if st := stateOf(r); st != nil {
		st.err = err
	}
}

// recorder watches a response for the request log: its status and size.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 && status >= 200 {
		rec.status = status
	}
	rec.ResponseWriter.WriteHeader(status)
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	n, err := rec.ResponseWriter.Write(b)
	rec.bytes += int64(n)
	return n, err
}

func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// recorderOf returns the request log's recorder, which logRequests hands
// on as the ResponseWriter, or nil. Only recoverPanics asks, to know
// whether the status went out: no security check depends on it.
func recorderOf(w http.ResponseWriter) *recorder {
	rec, _ := w.(*recorder)
	return rec
}
