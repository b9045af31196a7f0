// reqstate.go owns the request's state: what the layers of one request
// tell each other (the key, the route, the cause of an error), carried in
// its context. It sits below the middleware, the handlers and the JSON
// codec, which all write to it.

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
	pattern string
	err     error
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
