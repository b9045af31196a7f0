// params.go owns the query-string and path-parameter helpers of the
// resources: strict parsing, at most one value per name, positive ids.

package main

import (
	"net/http"
	"net/url"
	"strconv"
)

// parseQuery parses r's query string, or fails with 400 when any of it is
// malformed (a bad escape, a ";"): r.URL.Query() drops such pairs quietly,
// and a filter the client asked for would be ignored.
func parseQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errorf("validation_failed", "the query string is malformed: %s", clipField(err.Error()))
	}
	return q, nil
}

// onceEach fails with 400 when any of names is given more than once in q:
// q.Get would take the first value and quietly drop the others, bad or not.
func onceEach(q url.Values, names ...string) error {
	for _, name := range names {
		if len(q[name]) > 1 {
			return errorf("validation_failed", "%s must be given at most once", name)
		}
	}
	return nil
}

// positiveID parses an id given as text: decimal digits naming a positive int64.
func positiveID(name, s string) (int64, *apiError) {
	id, ok := decimalInt(s)
	if !ok || id < 1 {
		return 0, errorf("validation_failed", "%s must be a positive integer, got \"%s\"", name, clipField(s))
	}
	return id, nil
}

// decimalInt parses an integer of a query or a path: decimal digits only,
// at least one, within int64. strconv.ParseInt alone takes a sign ("+1",
// "-0"), which the document's integer parameters do not allow (DECISIONS.md
// section 21): every query and path integer goes through here.
func decimalInt(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// maxPageSize bounds ?limit= of a list page; it is also the page of a pet
// or order list sent without limit.
const maxPageSize = 1000

// parsePage reads a page's limit (1 to maxPageSize; def when absent) and
// after_id (a non-negative id; 0 when absent), each given at most once.
func parsePage(q url.Values, def int64) (afterID, limit int64, err error) {
	if err := onceEach(q, "limit", "after_id"); err != nil {
		return 0, 0, err
	}
	limit = def
	if q.Has("limit") {
		n, ok := decimalInt(q.Get("limit"))
		if !ok || n < 1 || n > maxPageSize {
			return 0, 0, errorf("validation_failed", "limit must be an integer from 1 to %d", maxPageSize)
		}
		limit = n
	}
	if q.Has("after_id") {
		n, ok := decimalInt(q.Get("after_id"))
		if !ok {
			return 0, 0, errorf("validation_failed", "after_id must be a non-negative integer")
		}
		afterID = n
	}
	return afterID, limit, nil
}

// writePage answers with one page of a list read by read (the rows after
// afterID, at most limit), and, when the page is full, a Link to the next
// page: base (the list's URL) with the query q, its filters kept, and
// after_id the page's last id. A page is read for each request and never
// kept, so a delete cannot leave a stale copy of it.
func writePage[T any](w http.ResponseWriter, r *http.Request, base string, q url.Values, afterID, limit int64, idOf func(T) int64,
	read func(afterID int64, limit int, fn func(T) error) error) {
	page := make([]T, 0, min(limit, 100))
	if err := read(afterID, int(limit), func(v T) error { page = append(page, v); return nil }); err != nil {
		writeError(w, r, err)
		return
	}
	if int64(len(page)) == limit {
		q.Set("limit", strconv.FormatInt(limit, 10))
		q.Set("after_id", strconv.FormatInt(idOf(page[len(page)-1]), 10))
		w.Header().Set("Link", "<"+base+"?"+q.Encode()+`>; rel="next"`)
	}
	writeJSON(w, http.StatusOK, page)
}
