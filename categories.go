// categories.go owns the categories resource: validation of a new category
// (its name by names.go's rules), the create handler, and the list served
// from a serialized copy (with ETags), as pages, or streamed.

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	lru "github.com/hashicorp/golang-lru/v2"
)

const (
	maxDescriptionLen = 1000
	// descriptionPattern is the OpenAPI document's pattern of a
	// description: no U+0000, which PostgreSQL's text cannot hold.
	descriptionPattern = `^[^\x00]*$`
)

// newCategory is the request body of POST /v1/categories. Pointers tell an
// absent field from an empty one (and a null, which decodeBody refuses).
type newCategory struct {
	Name        *string `json:"name"`
	Description *string `json:"description"`
}

// validate checks a new category and returns it as it is to be stored,
// its name trimmed.
func (c newCategory) validate() (Category, *apiError) {
	name, err := validName("name", c.Name)
	if err != nil {
		return Category{}, err
	}
	if c.Description != nil {
		if l := utf8.RuneCountInString(*c.Description); l > maxDescriptionLen {
			return Category{}, errorf("validation_failed", "description must be at most %d characters, got %d", maxDescriptionLen, l)
		}
		// PostgreSQL's text cannot hold U+0000: refused on both stores alike.
		if strings.IndexByte(*c.Description, 0) >= 0 {
			return Category{}, errorf("validation_failed", "description must not contain U+0000 (NUL)")
		}
	}
	return Category{Name: name, Description: c.Description}, nil
}

func handleCategoryCreate(store catalogStore, idem *idempotency) http.Handler {
	return handleCreate[newCategory](store, idem,
		func(store catalogStore, ctx context.Context, c Category, w *idemWrite[Category]) (Category, error) {
			return store.CreateCategory(ctx, c, foldName(c.Name), w)
		},
		func(c Category, err error) *apiError {
			var taken *nameTaken
			switch {
			case errors.As(err, &taken) && taken.name != c.Name:
				return errorf("conflict", "a category named %q exists already, and %q is the same name (names are compared ignoring case, width and invisible characters)", taken.name, c.Name)
			case errors.Is(err, errConflict):
				return errorf("conflict", "a category named %q exists already (names are compared ignoring case, width and invisible characters)", c.Name)
			}
			return nil
		})
}

// maxCachedList is the largest list, serialized, that is kept in memory;
// a larger one is streamed from the database every time.
const maxCachedList = 1 << 20

// listSnapshot is a serialized category list of one generation.
type listSnapshot struct {
	gen  uint64
	body []byte
	etag string
	// The header values, made once: net/http never changes a value slice,
	// so every response can share them.
	etagHeader, lengthHeader []string
	linkHeader               []string // a page's Link to the next page: only a full page has one
	// pos is the database's position after the list was read, which its
	// every answer carries (Petstore-Read-After, read_after.go); 0: none.
	pos uint64
}

// categoryLists serves GET /v1/categories: the full list from a serialized
// copy that any write invalidates (answering If-None-Match with 304), or
// streamed when it is too large to keep; or one page of it.
type categoryLists struct {
	store     catalogStore
	local     localGen // store, when its generation is known in memory; else nil
	publicURL string
	cached    atomic.Pointer[listSnapshot]
	pages     *lru.Cache[pageKey, *listSnapshot]
	// tooLarge is set once the list outgrew maxCachedList: a list only
	// grows (catalogStore's rules, store.go), so from then on it is streamed
	// without first being read up to that size again, on every request,
	// to find out.
	tooLarge atomic.Bool
	// reading lets one request at a time read the list into a snapshot:
	// after a write, every GET in flight finds the copy stale at once, and
	// they wait for the first one's read instead of each reading it. It is
	// a channel, so that the wait ends with the request's deadline.
	reading chan struct{}
	// failed is when the last read failed, and why (under reading): those
	// who waited for that read are answered with its failure, not each
	// left to try again and wait as long.
	failedAt time.Time
	failure  error
	// busy bounds a request's work before it answers 503: its generation,
	// its wait for a read in flight, and its own read.
	busy time.Duration
}

// localGen is what a store whose CategoriesGen is a counter in this
// process's memory, never an error and never a wait, offers besides
// catalogStore (SQLite does; PostgreSQL's generation lives in the
// database). It is an optional interface, not a concrete type, so this file
// names no store; a store that wraps another (as a test's does) hides it
// and takes the path with a deadline.
type localGen interface{ localCategoriesGen() uint64 }

// pageKey names a page of the list: ?after_id=afterID&limit=limit.
type pageKey struct{ afterID, limit int64 }

// Pages are kept serialized too, the most recently used maxCachedPages of
// them, each at most maxCachedPage bytes: at most 4 MiB in all.
const (
	maxCachedPages = 128
	maxCachedPage  = 32 << 10
)

func handleCategoryList(store catalogStore, publicURL string, busy time.Duration) http.Handler {
	pages, err := lru.New[pageKey, *listSnapshot](maxCachedPages)
	if err != nil {
		panic(err) // only for a size below 1
	}
	if busy <= 0 {
		busy = defaultBusyTimeout
	}
	local, _ := store.(localGen)
	return &categoryLists{store: store, local: local, publicURL: publicURL, pages: pages, busy: busy, reading: make(chan struct{}, 1)}
}

func (l *categoryLists) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery != "" {
		q, err := parseQuery(r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if q.Has("limit") || q.Has("after_id") {
			l.servePage(w, r, q)
			return
		}
	}
	if l.local != nil && !l.tooLarge.Load() {
		// SQLite: the generation is a counter in memory, so a fresh copy is
		// served without a deadline, which costs seven allocations.
		if snap := l.cached.Load(); snap != nil && snap.gen == l.local.localCategoriesGen() {
			serveSnapshot(w, r, snap)
			return
		}
	}
	var snap *listSnapshot
	if !l.tooLarge.Load() {
		ctx, cancel := context.WithTimeout(r.Context(), l.busy)
		defer cancel()
		// On PostgreSQL this asks the database, every time: another
		// instance may have added a category since the copy was made.
		gen, err := l.store.CategoriesGen(ctx)
		if err == nil {
			// A later copy than gen serves too: a replica may be behind
			// the copy (read_after.go).
			if snap = l.cached.Load(); snap == nil || snap.gen < gen {
				snap, err = l.snapshot(ctx, gen)
			}
		}
		if err != nil {
			writeError(w, r, unavailableAfter(ctx, err))
			return
		}
	}
	if snap == nil { // too large to keep: stream
		writeJSONArray(w, r, func(fn func(Category) error) error { return l.store.EachCategory(r.Context(), fn) })
		return
	}
	serveSnapshot(w, r, snap)
}

// unavailableAfter is err, or, when ctx's deadline (the busy timeout) ended
// the work, errUnavailable: a 503, as the database took too long.
func unavailableAfter(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(err, errUnavailable) {
		return fmt.Errorf("%w: %w", errUnavailable, err)
	}
	return err
}

// serveSnapshot answers with a serialized list or page, or with 304 Not
// Modified when the client has it already.
func serveSnapshot(w http.ResponseWriter, r *http.Request, snap *listSnapshot) {
	readSaw(r.Context(), snap.pos)
	h := w.Header()
	if snap.linkHeader != nil {
		h["Link"] = snap.linkHeader
	}
	h["Etag"] = snap.etagHeader
	if etagMatches(r.Header.Values("If-None-Match"), snap.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = snap.lengthHeader
	w.WriteHeader(http.StatusOK)
	w.Write(snap.body)
}

// errTooLarge stops reading a list that will not be cached.
var errTooLarge = errors.New("list too large to cache")

// snapshot returns the list of generation gen or a later one: the one
// another request read while this one waited, or else it reads and
// serializes the whole list and keeps it, unless it is larger than
// maxCachedList. It returns nil, and no error, for a list too large to
// keep; an error when the read failed, or a read this one waited for.
func (l *categoryLists) snapshot(ctx context.Context, gen uint64) (*listSnapshot, error) {
	arrived := time.Now()
	select {
	case l.reading <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-l.reading }()
	if l.tooLarge.Load() {
		return nil, nil
	}
	if snap := l.cached.Load(); snap != nil && snap.gen >= gen {
		return snap, nil
	}
	if l.failure != nil && l.failedAt.After(arrived) {
		return nil, l.failure
	}
	buf := []byte{'['}
	err := l.store.EachCategory(ctx, func(c Category) error {
		item, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = append(buf, item...)
		if len(buf) > maxCachedList {
			return errTooLarge
		}
		return nil
	})
	if errors.Is(err, errTooLarge) {
		l.tooLarge.Store(true)
		l.cached.Store(nil) // never to be served again
		return nil, nil
	}
	if err != nil {
		err = unavailableAfter(ctx, err)
		if errors.Is(err, errUnavailable) { // not this reader's client going away
			l.failedAt, l.failure = time.Now(), err
		}
		return nil, err
	}
	buf = append(buf, "]\n"...)
	// Kept even when a write came in meanwhile: it holds at least all of
	// generation gen (the generation grows after the commit), which is all
	// a request that saw gen may be answered with; a request that sees the
	// later generation reads again.
	snap := newSnapshot(gen, buf)
	snap.pos = readPosOf(ctx)
	l.cached.Store(snap)
	return snap, nil
}

// newSnapshot returns the snapshot of a serialized body, with its ETag: a
// cryptographic hash of the body, so that no client can choose a name that
// makes a changed list keep its old ETag (and others keep a stale copy on a
// 304). It is computed once per snapshot, not per request.
func newSnapshot(gen uint64, body []byte) *listSnapshot {
	sum := sha256.Sum256(body)
	etag := `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`
	return &listSnapshot{gen: gen, body: body, etag: etag,
		etagHeader: []string{etag}, lengthHeader: []string{strconv.Itoa(len(body))}}
}

// etagMatches reports whether the If-None-Match header, perhaps sent as
// several lines (one list, RFC 9110), names etag.
func etagMatches(lines []string, etag string) bool {
	for _, line := range lines {
		for v := range strings.SplitSeq(line, ",") {
			v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
			if v == etag || v == "*" {
				return true
			}
		}
	}
	return false
}

// servePage answers ?limit=N&after_id=ID with up to N categories after ID,
// and a Link to the next page when the page is full.
func (l *categoryLists) servePage(w http.ResponseWriter, r *http.Request, q url.Values) {
	afterID, limit, err := parsePage(q, 100)
	if err != nil {
		writeError(w, r, err)
		return
	}
	key := pageKey{afterID: afterID, limit: limit}
	snap, ok := l.pages.Get(key)
	if ok && snap.linkHeader != nil { // a full page never goes stale (catalogStore's rules)
		serveSnapshot(w, r, snap)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.busy)
	defer cancel()
	gen, err := l.store.CategoriesGen(ctx)
	if err != nil {
		writeError(w, r, unavailableAfter(ctx, err))
		return
	}
	if !ok || snap.gen < gen {
		if snap, err = l.page(ctx, key, gen); err != nil {
			writeError(w, r, unavailableAfter(ctx, err))
			return
		}
	}
	serveSnapshot(w, r, snap)
}

// page reads and serializes one page of generation gen, and keeps it if it
// is small enough. By catalogStore's rules (store.go), a full page stays right
// forever; a page that is not full (the end of the list) is right until the
// next write. It is read after gen was, so it holds at least
// generation gen: a write that came in meanwhile only makes it newer.
func (l *categoryLists) page(ctx context.Context, key pageKey, gen uint64) (*listSnapshot, error) {
	page := make([]Category, 0, min(key.limit, 100))
	err := l.store.EachCategoryAfter(ctx, key.afterID, int(key.limit), func(c Category) error {
		page = append(page, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := encodeJSON(&buf, page); err != nil {
		return nil, err
	}
	snap := newSnapshot(gen, buf.Bytes())
	snap.pos = readPosOf(ctx)
	full := int64(len(page)) == key.limit
	if full {
		snap.linkHeader = []string{fmt.Sprintf("<%s/categories?limit=%d&after_id=%d>; rel=\"next\"", l.publicURL, key.limit, page[len(page)-1].ID)}
	}
	if len(snap.body) <= maxCachedPage {
		l.pages.Add(key, snap)
	}
	return snap, nil
}
