// handlers.go owns the skeleton that every create handler shares: decode,
// validate, create, map the store's refusal, answer 201.

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

// handleCreate answers a POST that creates one row: it decodes the body
// into an In, validates it into the row, creates that in store with create
// (a method expression such as Store.CreatePet, so that the route table
// can be built without a store), and answers 201 with the row created.
// refused says what an error of create means to the client for that row
// (a name taken, a reference to nothing); when it returns nil, the error
// is answered as it is (a 503 or a 500).
func handleCreate[In creatable[Row], Row any](store Store, create func(Store, context.Context, Row) (Row, error), refused func(Row, error) *apiError) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		created, err := create(store, r.Context(), row)
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
