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
