// create.go owns the one create path that every POST shares, with or
// without an Idempotency-Key: read the body, decode, validate, create, map
// the store's refusal, answer 201. A key wraps its steps (idempotency.go's
// idemCall): it may answer before them, stores the create's answer with
// its row, and puts a stored answer before a refusal.

package main

import (
	"context"
	"errors"
	"net/http"
)

// creatable is a request body that validates into the row it asks to
// create.
type creatable[Row any] interface {
	validate() (Row, *apiError)
}

// createFunc creates a row in store: a method expression such as
// catalogStore.CreatePet, so that the route table can be built without a store.
type createFunc[Row any] func(catalogStore, context.Context, Row, *idemWrite[Row]) (Row, error)

// refuseFunc says what an error of a create means to the client for that
// row (a name taken, a reference to nothing); when it returns nil, the
// error is answered as it is (a 503 or a 500).
type refuseFunc[Row any] func(Row, error) *apiError

// handleCreate answers a POST that creates one row: it reads the body,
// decodes it into an In, validates that into the row, creates the row in
// store, and answers 201 with the row created, or the store's refusal.
// With an Idempotency-Key, a stored answer is replayed before the body is
// decoded (or, on SQLite, found by the create), the key's reuse for another
// request is refused (422) before anything wrong with the body, and the
// create's answer, a 201 or a 409 conflict, is stored in its transaction
// and sent byte for byte as a replay will send it. Nothing is stored for a
// request refused before it could write.
func handleCreate[In creatable[Row], Row any](store catalogStore, idem *idempotency, create createFunc[Row], refused refuseFunc[Row]) http.Handler {
	var row Row
	_, tagged := any(row).(versioned)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tagged { // a row that may change: its 201 carries its ETag
			w = createdTag{w}
		}
		key, keyed, kerr := idempotencyKey(r.Header)
		if kerr != nil {
			writeError(w, r, kerr)
			return
		}
		body, done, err := readBody(w, r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		var call idemCall // the zero idemCall without a key
		if keyed {
			c, answered := idem.start(w, r, key, body)
			if answered {
				done()
				return
			}
			call = c
			defer call.finish(r) // after the create's transaction, whatever its outcome
		}
		var in In
		err = decodeBody(body, &in)
		done() // the decoded values are copies; nothing keeps the bytes
		if err != nil {
			call.refuse(w, r, err)
			return
		}
		row, verr := in.validate()
		if verr != nil {
			call.refuse(w, r, verr)
			return
		}
		iw := idemWriteFor(&call, refused)
		created, err := create(store, r.Context(), row, iw)
		switch {
		case keyed && errors.Is(err, errIdemExists): // nothing was written
			call.answerExisting(w, r, iw.Found)
		case err != nil && !isRefusal(err):
			writeError(w, r, err) // 503: not acknowledged; a retry with the same Idempotency-Key is safe (a cut COMMIT may have landed)
		case iw != nil && iw.Status != 0:
			writeRaw(w, iw.Status, iw.Body) // as kept: what a replay will send
		case err != nil:
			if ae := refused(row, err); ae != nil {
				err = ae
			}
			call.refuse(w, r, err)
		default:
			writeJSON(w, http.StatusCreated, created)
		}
	})
}
