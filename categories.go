package main

import (
	"errors"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

const (
	maxNameLen        = 100
	maxDescriptionLen = 1000
)

// newCategory is the request body of POST /v1/categories. Pointers tell an
// absent (or null) field from an empty one.
type newCategory struct {
	Name        *string `json:"name"`
	Description *string `json:"description"`
}

// validName trims name and checks it against the name rules: 1 to 100
// code points, no control characters. field names the field in errors.
func validName(field string, name *string) (string, *apiError) {
	if name == nil {
		return "", errorf(http.StatusBadRequest, "validation_failed", "%s is required", field)
	}
	n := strings.TrimSpace(*name)
	switch l := utf8.RuneCountInString(n); {
	case l == 0:
		return "", errorf(http.StatusBadRequest, "validation_failed", "%s must not be empty", field)
	case l > maxNameLen:
		return "", errorf(http.StatusBadRequest, "validation_failed", "%s must be at most %d characters, got %d", field, maxNameLen, l)
	}
	if strings.IndexFunc(n, unicode.IsControl) >= 0 {
		return "", errorf(http.StatusBadRequest, "validation_failed", "%s must not contain control characters", field)
	}
	return n, nil
}

// validate checks a new category and returns its trimmed name.
func (c newCategory) validate() (string, *apiError) {
	name, err := validName("name", c.Name)
	if err != nil {
		return "", err
	}
	if c.Description != nil {
		if l := utf8.RuneCountInString(*c.Description); l > maxDescriptionLen {
			return "", errorf(http.StatusBadRequest, "validation_failed", "description must be at most %d characters, got %d", maxDescriptionLen, l)
		}
	}
	return name, nil
}

// foldName is the key under which category names are unique: Unicode full
// case folding, then NFC, so "Dog" and "dog", "ÉCOLE" and "école", and
// "Straße" and "STRASSE" collide.
func foldName(name string) string {
	return norm.NFC.String(cases.Fold().String(norm.NFC.String(name)))
}

func handleCategoryCreate(store *Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in newCategory
		if err := decodeJSON(w, r, &in); err != nil {
			writeError(w, r, err)
			return
		}
		name, verr := in.validate()
		if verr != nil {
			writeError(w, r, verr)
			return
		}
		c, err := store.CreateCategory(r.Context(), name, foldName(name), in.Description)
		if errors.Is(err, errConflict) {
			writeError(w, r, errorf(http.StatusConflict, "conflict", "a category named %q exists already (names are compared ignoring case)", name))
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusCreated, c)
	})
}

func handleCategoryList(store *Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSONArray(w, r, func(fn func(Category) error) error { return store.EachCategory(r.Context(), fn) })
	})
}
