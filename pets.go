package main

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

var petStatuses = []string{"available", "pending", "sold"}

// newPet is the request body of POST /v1/pets.
type newPet struct {
	Name       *string `json:"name"`
	CategoryID *int64  `json:"categoryId"`
	Status     *string `json:"status"`
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
	return Pet{Name: name, CategoryID: *p.CategoryID, Status: status}, nil
}

func handlePetCreate(store Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		created, err := store.CreatePet(r.Context(), p)
		if errors.Is(err, errNoReference) {
			writeError(w, r, errorf("validation_failed", "categoryId %d does not name an existing category", p.CategoryID))
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusCreated, created)
	})
}

func handlePetList(store Store) http.Handler {
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
		if q.Has("categoryId") {
			id, err := positiveID("categoryId", q.Get("categoryId"))
			if err != nil {
				writeError(w, r, err)
				return
			}
			f.CategoryID = id
		}
		if q.Has("status") {
			f.Status = q.Get("status")
			if !slices.Contains(petStatuses, f.Status) {
				writeError(w, r, errorf("validation_failed", "status must be one of %s", strings.Join(petStatuses, ", ")))
				return
			}
		}
		writeJSONArray(w, r, func(fn func(Pet) error) error { return store.EachPet(r.Context(), f, fn) })
	})
}

func handlePetGet(store Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, verr := positiveID("petId", r.PathValue("petId"))
		if verr != nil {
			writeError(w, r, verr)
			return
		}
		p, err := store.Pet(r.Context(), id)
		if errors.Is(err, errNotFound) {
			writeError(w, r, errorf("not_found", "no pet with id %d", id))
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, p)
	})
}

// positiveID parses an id given as text: decimal digits naming a positive int64.
func positiveID(name, s string) (int64, *apiError) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 || s[0] < '0' || s[0] > '9' {
		return 0, errorf("validation_failed", "%s must be a positive integer, got %q", name, s)
	}
	return id, nil
}

// deprecation is the timeline of the deprecated GET /v1/pets/{petId}.
type deprecation struct {
	deprecatedAt time.Time
	sunsetAt     time.Time
	successor    string // the URL of what replaces it
}

// headers sets what every response of a deprecated operation carries:
// Deprecation (RFC 9745), Sunset (RFC 8594) and the successor's Link.
func (d deprecation) headers(h http.Header) {
	h.Set("Deprecation", "@"+strconv.FormatInt(d.deprecatedAt.Unix(), 10))
	h.Set("Sunset", d.sunsetAt.UTC().Format(http.TimeFormat))
	h.Set("Link", "<"+d.successor+`>; rel="successor-version"`)
}

// sunset answers 410 gone once the operation's sunset has passed, with or
// without a key; before, it hands the request to next.
func sunset(d deprecation, now func() time.Time, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !now().Before(d.sunsetAt) {
			writeError(w, r, errorf("gone",
				"this operation was retired on %s; use %s", d.sunsetAt.UTC().Format(time.RFC3339), d.successor))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// unescapeSegments undoes the escapes of an escaped path but for "/", which
// stays %2F inside its segment: the path as the router matches it, so that
// /v1/p%65ts/1 gets the headers of the operation it reaches.
func unescapeSegments(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if u, err := url.PathUnescape(s); err == nil {
			segs[i] = strings.ReplaceAll(u, "/", "%2F")
		}
	}
	return strings.Join(segs, "/")
}

// areaHeaders marks the responses of the API's areas, errors included:
// X-API-Stability on the beta pets and experimental store areas, and the
// deprecation headers on GET /v1/pets/{petId}. It runs before the limiter,
// so a 429 carries them too.
func areaHeaders(d deprecation, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath() // so that an escaped "/" stays inside its segment
		if strings.IndexByte(p, '%') >= 0 {
			p = unescapeSegments(p)
		}
		switch {
		case p == "/v1/pets" || strings.HasPrefix(p, "/v1/pets/"):
			w.Header().Set("X-API-Stability", "beta")
			// Only for a path the router takes to GET /v1/pets/{petId}: not
			// for "." or ".." segments, which it answers with 404.
			if rest := strings.TrimPrefix(p, "/v1/pets/"); rest != p && rest != "" && !strings.Contains(rest, "/") && isCanonicalPath(r.URL.Path) {
				d.headers(w.Header())
			}
		case p == "/v1/store" || strings.HasPrefix(p, "/v1/store/"):
			w.Header().Set("X-API-Stability", "experimental")
		}
		next.ServeHTTP(w, r)
	})
}
