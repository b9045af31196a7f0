// handlers.go owns the skeleton that every create handler shares: decode,
// validate, create, map the store's refusal, answer 201; with an
// Idempotency-Key, createKeyed (idempotency.go) takes over.

package main

import (
	"context"
	"net/http"
)

// creatable is a request body that validates into the row it asks to
// create.
type creatable[Row any] interface {
	validate() (Row, *apiError)
}

// createFunc creates a row in store: a method expression such as
// Store.CreatePet, so that the route table can be built without a store.
type createFunc[Row any] func(Store, context.Context, Row, *idemWrite[Row]) (Row, error)

// refuseFunc says what an error of a create means to the client for that
// row (a name taken, a reference to nothing); when it returns nil, the
// error is answered as it is (a 503 or a 500).
type refuseFunc[Row any] func(Row, error) *apiError

// handleCreate answers a POST that creates one row: it decodes the body
// into an In, validates it into the row, creates that in store, and
// answers 201 with the row created. A request with an Idempotency-Key goes
// to createKeyed.
func handleCreate[In creatable[Row], Row any](store Store, idem *idempotency, create createFunc[Row], refused refuseFunc[Row]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, keyed, kerr := idempotencyKey(r.Header)
		if kerr != nil {
			writeError(w, r, kerr)
			return
		}
		if keyed {
			createKeyed[In](w, r, idem, key, create, refused)
			return
		}
		var in In
		if err := decodeJSON(w, r, &in); err != nil {
			writeError(w, r, err)
			return
		}
		row, verr := in.validate()
		if verr != nil {
			writeError(w, r, verr)
			return
		}
		created, err := create(store, r.Context(), row, nil)
		if err != nil {
			if ae := refused(row, err); ae != nil {
				err = ae
			}
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusCreated, created)
	})
}
