// idempotency.go owns Idempotency-Key (DECISIONS.md, section 9): reading
// the header, the request's fingerprint, the keys running in this process,
// what a keyed create adds to handleCreate's (lookup, marks, the answer to
// store, replays), and the purge of expired answers. The stores keep the answers (sqlite_idempotency.go,
// postgres_idempotency.go).

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	// maxIdemKeyLen bounds an Idempotency-Key, unquoted.
	maxIdemKeyLen = 255
	// maxStoredBody bounds an answer's body in the store. The creates'
	// answers are far smaller (TestStoredAnswersFitTheCap); one above it
	// would be answered but not kept.
	maxStoredBody = 8 << 10
	// defaultIdemTTL is --idempotency-ttl's default: how long answers are
	// kept.
	defaultIdemTTL = 24 * time.Hour
	// purgeEvery is how often expired answers are purged, purgeBatch how
	// many one statement deletes (a short hold of SQLite's writer), and
	// purgeBudget how long one round of them may go on.
	purgeEvery  = 10 * time.Second
	purgeBatch  = 1000
	purgeBudget = 2 * time.Second
)

// idempotencyKey reads r's Idempotency-Key: a structured-field string
// ("abc") or the same characters bare (abc), 1 to 255 printable ASCII
// characters. ok is false when there is none.
func idempotencyKey(h http.Header) (key string, ok bool, _ *apiError) {
	vs := h.Values("Idempotency-Key")
	switch {
	case len(vs) == 0:
		return "", false, nil
	case len(vs) > 1:
		return "", false, errorf("validation_failed", "send one Idempotency-Key header, not %d", len(vs))
	}
	v := strings.Trim(vs[0], " \t")
	if strings.HasPrefix(v, `"`) {
		var bad bool
		if v, bad = unquoteSFString(v); bad {
			return "", false, errorf("validation_failed", `Idempotency-Key is not a valid quoted string: only \" and \\ may be escaped, and it must end in "`)
		}
	}
	if len(v) < 1 || len(v) > maxIdemKeyLen || strings.IndexFunc(v, func(c rune) bool { return c < 0x20 || c > 0x7e }) >= 0 {
		return "", false, errorf("validation_failed", "Idempotency-Key must be 1 to %d printable ASCII characters, optionally in double quotes", maxIdemKeyLen)
	}
	return v, true, nil
}

// idemKeyPattern is the OpenAPI document's pattern of an Idempotency-Key
// as HTTP carries it (without surrounding white space), the forms that
// idempotencyKey takes: 1 to maxIdemKeyLen printable ASCII characters,
// bare (not starting with a double quote, which would begin the quoted
// form) or between double quotes with \" and \\ as their only escapes.
// idemKeyMaxLength is the longest: every character quoted and escaped.
// TestDocumentPatterns holds the document to both.
func idemKeyPattern() string {
	return fmt.Sprintf(`^(?:[\x21\x23-\x7e](?:[\x20-\x7e]{0,%d}[\x21-\x7e])?|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x22\x5c]){1,%d}")$`,
		maxIdemKeyLen-2, maxIdemKeyLen)
}

const idemKeyMaxLength = 2 + 2*maxIdemKeyLen

// unquoteSFString unquotes an RFC 8941 string: "..." with \" and \\ as its
// only escapes.
func unquoteSFString(v string) (s string, bad bool) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			if i+1 == len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", true
			}
			i++
			b.WriteByte(v[i])
		case '"':
			return b.String(), i != len(v)-1
		default:
			b.WriteByte(c)
		}
	}
	return "", true // no closing quote
}

// fingerprint identifies a request for its Idempotency-Key: its method,
// path and body.
func fingerprint(r *http.Request, body []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.Path))
	h.Write([]byte{0})
	h.Write(body)
	var fp [32]byte
	h.Sum(fp[:0])
	return fp
}

// idemKey is an Idempotency-Key in the scope of its API key.
type idemKey struct {
	keyID int64
	key   string
}

// idempotency is the server's side of Idempotency-Key: its settings and
// the keys of the requests running in this process.
type idempotency struct {
	store idemStore
	ttl   time.Duration // how long answers are kept
	now   func() time.Time

	mu      sync.Mutex
	running map[idemKey]struct{}
}

func newIdempotency(store idemStore, ttl time.Duration, now func() time.Time) *idempotency {
	return &idempotency{store: store, ttl: ttl, now: now, running: map[idemKey]struct{}{}}
}

// enter marks k running in this process, or reports that it is already.
func (idem *idempotency) enter(k idemKey) bool {
	idem.mu.Lock()
	defer idem.mu.Unlock()
	if _, ok := idem.running[k]; ok {
		return false
	}
	idem.running[k] = struct{}{}
	return true
}

func (idem *idempotency) leave(k idemKey) {
	idem.mu.Lock()
	delete(idem.running, k)
	idem.mu.Unlock()
}

func (idem *idempotency) request(k idemKey) idemRequest {
	now := idem.now()
	return idemRequest{KeyID: k.keyID, Key: k.key, Owner: int64(rand.Uint64() >> 1),
		Now: now, Since: now.Add(-idem.ttl)}
}

// idemCall is a keyed create while it runs: its key, marked running in
// this process (and, on PostgreSQL, locked), and its request's fingerprint.
// The zero idemCall is a create without a key.
type idemCall struct {
	idem   *idempotency
	k      idemKey
	req    idemRequest
	fp     [32]byte
	marked bool // marked running (not on a store that IdemWaits)
}

// start begins the keyed create of r, whose body is body: it marks the key
// running and looks up its stored answer, which it replays (or refuses the
// key's reuse for another request). It reports whether it answered (with
// that, or the key in use, or the lookup's error); if not, the create runs
// and finish follows it.
func (idem *idempotency) start(w http.ResponseWriter, r *http.Request, key string, body []byte) (c idemCall, answered bool) {
	k := idemKey{stateOf(r).key.Lineage, key} // one scope for a lineage: a retry with the rotated key replays
	c = idemCall{idem: idem, k: k, req: idem.request(k), fp: fingerprint(r, body)}
	if idem.store.IdemWaits() { // the store's create looks, and waits for a running one
		return c, false
	}
	if !idem.enter(k) {
		writeInUse(w, r)
		return idemCall{}, true
	}
	c.marked = true
	if idem.begin(w, r, c.req, c.fp) {
		idem.leave(k)
		return idemCall{}, true
	}
	return c, false
}

// finish ends c's marks: the store's (after the create's transaction,
// whatever its outcome), then this process's.
func (c *idemCall) finish(r *http.Request) {
	if c.marked {
		c.idem.end(r, c.req)
		c.idem.leave(c.k)
	}
}

// refuse answers err, the request's refusal; but a key used before
// answers with its stored answer, or 422 for its reuse, first.
func (c *idemCall) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if c.idem == nil || !c.idem.replay(w, r, c.req, c.fp) {
		writeError(w, r, err)
	}
}

// answerExisting answers a create that found c's key answered (neither
// store looks before the create), or answered meanwhile by another
// instance: that answer (found, when the store returned it with the
// create's outcome; else looked up), or the key's reuse.
func (c *idemCall) answerExisting(w http.ResponseWriter, r *http.Request, found *idemAnswer) {
	if found != nil {
		c.idem.answer(w, r, found, c.fp)
		return
	}
	if !c.idem.replay(w, r, c.req, c.fp) {
		writeInUse(w, r) // it expired this very moment: try again
	}
}

// idemWriteFor is c's key as the create of a Row stores it, nil without
// one: the answer kept with the row is the 201 with the row made, or a 409
// conflict (refused's), encoded as the first answer and every replay send
// it; any other refusal, or an answer over maxStoredBody, is not kept.
func idemWriteFor[Row any](c *idemCall, refused refuseFunc[Row]) *idemWrite[Row] {
	if c.idem == nil {
		return nil
	}
	return &idemWrite[Row]{idemRequest: c.req, Fingerprint: c.fp, answer: func(row Row, err error) (int, []byte, bool) {
		var v any = row
		status := http.StatusCreated
		if err != nil {
			ae := refused(row, err)
			if ae == nil || ae.Code != "conflict" {
				return 0, nil, false
			}
			v, status = ae, ae.Status
		}
		var buf bytes.Buffer
		if encodeJSON(&buf, v) != nil || buf.Len() > maxStoredBody {
			return 0, nil, false
		}
		return status, buf.Bytes(), true
	}}
}

// begin looks up req's stored answer and, when there is one, replays it
// (or refuses the key's reuse for another request); it reports whether it
// answered. Without one, the key is marked running for this request. (On
// SQLite it does neither: the create finds a stored answer itself, and
// replay looks on the other paths that need to know.)
func (idem *idempotency) begin(w http.ResponseWriter, r *http.Request, req idemRequest, fp [32]byte) (answered bool) {
	a, err := idem.store.BeginIdempotent(r.Context(), req)
	switch {
	case errors.Is(err, errInFlight):
		writeInUse(w, r)
	case err != nil:
		writeError(w, r, err) // no mark: the store made none, or dropped its connection
	default:
		return idem.answer(w, r, a, fp)
	}
	return true
}

// replay answers with req's stored answer, or refuses the key's reuse, if
// there is one; it reports whether it answered.
func (idem *idempotency) replay(w http.ResponseWriter, r *http.Request, req idemRequest, fp [32]byte) bool {
	a, err := idem.store.IdempotentAnswer(r.Context(), req)
	if err != nil {
		noteError(r, err) // the request's own answer goes out instead
		return false
	}
	return idem.answer(w, r, a, fp)
}

// answer replays a, or refuses the key's reuse if a answered another
// request; with no a, it does nothing and returns false.
func (idem *idempotency) answer(w http.ResponseWriter, r *http.Request, a *idemAnswer, fp [32]byte) bool {
	switch {
	case a == nil:
		return false
	case a.Fingerprint != fp:
		writeError(w, r, errorf("idempotency_key_reused",
			"this Idempotency-Key was sent with another request (method, path or body); send a new key for a new request"))
	default:
		w.Header().Set("Idempotency-Replayed", "true")
		if a.Pos > 0 && a.Status == http.StatusCreated {
			readSaw(r.Context(), a.Pos) // read with the answer
		} else {
			readAtReplay(r.Context(), idem.store, a.Status) // a 201 carries the position now
		}
		writeRaw(w, a.Status, a.Body)
	}
	return true
}

// end ends req's in-flight mark, if it has one. It may fail as the
// request did (the database is away): the mark then goes with its
// connection to the database.
func (idem *idempotency) end(r *http.Request, req idemRequest) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := idem.store.EndIdempotent(ctx, req); err != nil {
		noteError(r, err)
	}
}

// writeInUse refuses a request whose Idempotency-Key another request,
// on this instance or another, is running with.
func writeInUse(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "1")
	writeError(w, r, errorf("idempotency_key_in_use", "a request with this Idempotency-Key is running; retry after it ends"))
}

// purge deletes expired answers now and every purgeEvery until ctx ends, a
// purgeBatch at a time for at most purgeBudget a round, so that a large
// backlog never holds the database for long.
func (idem *idempotency) purge(ctx context.Context, log *slog.Logger) {
	for {
		start, now := time.Now(), idem.now()
		for total := 0; ; {
			n, err := idem.store.PurgeIdempotency(ctx, now.Add(-idem.ttl), now, purgeBatch)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("purge expired idempotent answers; will retry", "err", err)
				}
				break
			}
			if total += n; n < purgeBatch || time.Since(start) > purgeBudget {
				if total > 0 {
					log.Debug("purged expired idempotent answers", "count", total)
				}
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(purgeEvery):
		}
	}
}
