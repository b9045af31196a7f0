// orders.go owns the store area: the orders (validation, create and list)
// and the inventory.

package main

import (
	"errors"
	"net/http"
)

const maxOrderQuantity = 100

// orderStatuses are the statuses an order may have: it is placed, and
// nothing changes it yet.
var orderStatuses = []string{orderPlaced}

const orderPlaced = "placed"

// newOrder is the request body of POST /v1/store/orders.
type newOrder struct {
	PetID    *jsonInt `json:"petId"`
	Quantity *jsonInt `json:"quantity"`
}

// validate checks a new order and returns it as it is to be placed.
func (o newOrder) validate() (Order, *apiError) {
	switch {
	case o.PetID == nil:
		return Order{}, errorf("validation_failed", "petId is required")
	case *o.PetID < 1:
		return Order{}, errorf("validation_failed", "petId must be a positive integer")
	case o.Quantity == nil:
		return Order{}, errorf("validation_failed", "quantity is required")
	case *o.Quantity < 1 || *o.Quantity > maxOrderQuantity:
		return Order{}, errorf("validation_failed", "quantity must be 1 to %d, got %d", maxOrderQuantity, *o.Quantity)
	}
	return Order{PetID: int64(*o.PetID), Quantity: int64(*o.Quantity), Status: orderPlaced}, nil
}

func handleOrderCreate(store catalogStore, idem *idempotency) http.Handler {
	return handleCreate[newOrder](store, idem, catalogStore.CreateOrder, func(o Order, err error) *apiError {
		if errors.Is(err, errNoReference) {
			return errorf("validation_failed", "petId %d does not name an existing pet", o.PetID)
		}
		return nil
	})
}

// handleOrderList answers a page of the orders: the first maxPageSize
// when no limit is sent.
func handleOrderList(store catalogStore, publicURL string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := parseQuery(r)
		var afterID, limit int64
		if err == nil {
			afterID, limit, err = parsePage(q, maxPageSize)
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		writePage(w, r, publicURL+"/store/orders", q, afterID, limit, func(o Order) int64 { return o.ID },
			func(afterID int64, limit int, fn func(Order) error) error {
				return store.EachOrderAfter(r.Context(), afterID, limit, fn)
			})
	})
}

func handleOrderGet(store catalogStore) http.Handler {
	return readRow(store, "order", "orderId", catalogStore.Order)
}

// handleInventory answers with how many pets have each status, every
// status named (0 when no pet has it).
func handleInventory(store catalogStore) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		counts, err := store.PetInventory(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		inventory := make(map[string]int64, len(petStatuses))
		for _, status := range petStatuses {
			inventory[status] = counts[status]
		}
		writeJSON(w, http.StatusOK, inventory)
	})
}
