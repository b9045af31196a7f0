package main

import (
	"errors"
	"net/http"
)

const maxOrderQuantity = 100

// newOrder is the request body of POST /v1/store/orders.
type newOrder struct {
	PetID    *int64 `json:"petId"`
	Quantity *int64 `json:"quantity"`
}

func (o newOrder) validate() *apiError {
	switch {
	case o.PetID == nil:
		return errorf("validation_failed", "petId is required")
	case *o.PetID < 1:
		return errorf("validation_failed", "petId must be a positive integer")
	case o.Quantity == nil:
		return errorf("validation_failed", "quantity is required")
	case *o.Quantity < 1 || *o.Quantity > maxOrderQuantity:
		return errorf("validation_failed", "quantity must be 1 to %d, got %d", maxOrderQuantity, *o.Quantity)
	}
	return nil
}

func handleOrderCreate(store Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in newOrder
		if err := decodeJSON(w, r, &in); err != nil {
			writeError(w, r, err)
			return
		}
		if verr := in.validate(); verr != nil {
			writeError(w, r, verr)
			return
		}
		o, err := store.CreateOrder(r.Context(), Order{PetID: *in.PetID, Quantity: *in.Quantity, Status: "placed"})
		if errors.Is(err, errNoReference) {
			writeError(w, r, errorf("validation_failed", "petId %d does not name an existing pet", *in.PetID))
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusCreated, o)
	})
}

func handleOrderList(store Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSONArray(w, r, func(fn func(Order) error) error { return store.EachOrder(r.Context(), fn) })
	})
}
