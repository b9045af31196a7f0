// pets.go owns the pets resource: validation, create, the filtered list
// and the deprecated single-pet read.

package main

import (
	"errors"
	"net/http"
	"slices"
	"strings"
)

var petStatuses = []string{"available", "pending", "sold"}

// newPet is the request body of POST /v1/pets.
type newPet struct {
	Name       *string  `json:"name"`
	CategoryID *jsonInt `json:"categoryId"`
	Status     *string  `json:"status"`
}

// validate checks a new pet and returns it as it is to be stored.
func (p newPet) validate() (Pet, *apiError) {
	name, err := validName("name", p.Name)
	if err != nil {
		return Pet{}, err
	}
	if p.CategoryID == nil {
		return Pet{}, errorf("validation_failed", "categoryId is required")
	}
	if *p.CategoryID < 1 {
		return Pet{}, errorf("validation_failed", "categoryId must be a positive integer")
	}
	status := "available"
	if p.Status != nil {
		status = *p.Status
		if !slices.Contains(petStatuses, status) {
			return Pet{}, errorf("validation_failed", "status must be one of %s", strings.Join(petStatuses, ", "))
		}
	}
	return Pet{Name: name, CategoryID: int64(*p.CategoryID), Status: status}, nil
}

func handlePetCreate(store catalogStore, idem *idempotency) http.Handler {
	return handleCreate[newPet](store, idem, catalogStore.CreatePet, func(p Pet, err error) *apiError {
		if errors.Is(err, errNoReference) {
			return errorf("validation_failed", "categoryId %d does not name an existing category", p.CategoryID)
		}
		return nil
	})
}

// handlePetList answers a page of the pets that match the filters:
// categoryId, and status, a comma-separated list of statuses (Swagger's
// findByStatus); the first maxPageSize when no limit is sent.
func handlePetList(store catalogStore, publicURL string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var f petFilter
		q, err := parseQuery(r)
		if err == nil {
			err = onceEach(q, "categoryId", "status")
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		afterID, limit, err := parsePage(q, maxPageSize)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if q.Has("categoryId") {
			id, err := positiveID("categoryId", q.Get("categoryId"))
			if err != nil {
				writeError(w, r, err)
				return
			}
			f.CategoryID = id
		}
		if q.Has("status") {
			for status := range strings.SplitSeq(q.Get("status"), ",") {
				if !slices.Contains(petStatuses, status) {
					writeError(w, r, errorf("validation_failed", "status must be a comma-separated list of %s, got %q", strings.Join(petStatuses, ", "), clipField(status)))
					return
				}
				f.Statuses = append(f.Statuses, status)
			}
		}
		writePage(w, r, publicURL+"/pets", q, afterID, limit, func(p Pet) int64 { return p.ID },
			func(afterID int64, limit int, fn func(Pet) error) error {
				return store.EachPetAfter(r.Context(), f, afterID, limit, fn)
			})
	})
}

// handlePetReplace answers PUT /v1/pets/{petId}: the pet replaced by the
// body, which is a create's (the same required fields and defaults), 200
// with it and its new ETag.
func handlePetReplace(store catalogStore) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, verr := positiveID("petId", r.PathValue("petId"))
		if verr != nil {
			writeError(w, r, verr)
			return
		}
		var in newPet
		if err := decodeJSON(w, r, &in); err != nil {
			writeError(w, r, err)
			return
		}
		p, verr := in.validate()
		if verr != nil {
			writeError(w, r, verr)
			return
		}
		p.ID = id
		changed, err := store.ReplacePet(r.Context(), p, ifMatch(r))
		if errors.Is(err, errNoReference) {
			err = errorf("validation_failed", "categoryId %d does not name an existing category", p.CategoryID)
		}
		if err != nil {
			writeError(w, r, changeError(err, "pet", id))
			return
		}
		writeRow(w, http.StatusOK, changed)
	})
}

// refusePetDelete answers the refusal of a pet's delete: an order names it.
func refusePetDelete(err error) error {
	if errors.Is(err, errConflict) {
		return errorf("conflict", "an order names this pet; delete its orders first")
	}
	return err
}

func handlePetGet(store catalogStore) http.Handler {
	return readRow(store, "pet", "petId", catalogStore.Pet)
}
