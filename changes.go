// changes.go owns what the changes of one row share (PUT and DELETE of a
// pet, DELETE of an order): the row's strong ETag from its version,
// If-Match, the answers of a change's own outcomes, and the delete handler.

package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// versioned is a row that may change: its ETag names its version.
type versioned interface{ etag() string }

// etagOf is the strong ETag of a row's version: "1" when made, grown by
// each change. Ids are never reused, so a tag names one state of one row.
func etagOf(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

func (p Pet) etag() string   { return etagOf(p.Version) }
func (o Order) etag() string { return etagOf(o.Version) }

// writeRow answers with one row and its ETag.
func writeRow[Row versioned](w http.ResponseWriter, status int, row Row) {
	w.Header().Set("ETag", row.etag())
	writeJSON(w, status, row)
}

// createdTag gives a versioned create's 201, made now or replayed for an
// Idempotency-Key, the ETag of a row as made (version 1).
type createdTag struct{ http.ResponseWriter }

func (w createdTag) WriteHeader(status int) {
	if status == http.StatusCreated {
		w.Header().Set("ETag", etagOf(1))
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w createdTag) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ifMatch reads r's If-Match as the stores take it: "" for none or "*"
// (any existing row; without If-Match the last write wins), else the
// versions of its strong tags between commas (",3,4,"). A weak or
// malformed tag names no version (If-Match compares strongly), so a list
// of only such tags matches no row: 412.
func ifMatch(r *http.Request) string {
	lines := r.Header.Values("If-Match")
	set := ","
	for _, line := range lines {
		for tag := range strings.SplitSeq(line, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" {
				return ""
			}
			// Strong comparison is of the octets: "+5" or "05" is not "5".
			if len(tag) > 2 && tag[0] == '"' && tag[len(tag)-1] == '"' {
				inner := tag[1 : len(tag)-1]
				if v, ok := decimalInt(inner); ok && v > 0 && strconv.FormatInt(v, 10) == inner {
					set += inner + ","
				}
			}
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return set
}

// changeError is the answer to a change's own outcomes on the row what id
// names: a row that is not there (or no longer: a second DELETE) is 404,
// a stale If-Match 412; any other error is answered as it is.
func changeError(err error, what string, id int64) error {
	switch {
	case errors.Is(err, errNotFound):
		return errorf("not_found", "no %s with id %d", what, id)
	case errors.Is(err, errPrecondition):
		return errorf("precondition_failed", "the %s with id %d has changed since the version If-Match names: read it again for its ETag", what, id)
	}
	return err
}

// handleDelete answers the DELETE of one row, named by the path parameter
// param: 204, or its own outcome (404, 412, or refused's answer, such as
// 409 for a pet an order names). An Idempotency-Key is ignored: a retried
// DELETE is 404.
func handleDelete(store catalogStore, what, param string, del func(catalogStore, context.Context, int64, string) error, refused func(error) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, verr := positiveID(param, r.PathValue(param))
		if verr != nil {
			writeError(w, r, verr)
			return
		}
		if err := del(store, r.Context(), id, ifMatch(r)); err != nil {
			writeError(w, r, refused(changeError(err, what, id)))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// readRow answers the GET of one row, named by the path parameter param,
// with its ETag, or 404.
func readRow[Row versioned](store catalogStore, what, param string, read func(catalogStore, context.Context, int64) (Row, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, verr := positiveID(param, r.PathValue(param))
		if verr != nil {
			writeError(w, r, verr)
			return
		}
		row, err := read(store, r.Context(), id)
		if err != nil {
			writeError(w, r, changeError(err, what, id))
			return
		}
		writeRow(w, http.StatusOK, row)
	})
}

// matchesVersion reports whether match (ifMatch's, not "") names version.
func matchesVersion(match string, version int64) bool {
	return strings.Contains(match, ","+strconv.FormatInt(version, 10)+",")
}
