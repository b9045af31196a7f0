// read_after.go owns read-your-writes (DECISIONS.md section 20): the
// Petstore-Read-After token, the request's read state (the position a
// read must include, which the store reads; the positions its reads and
// writes reflect, which the store hands back in it), the header set from
// it as the answer goes out, and this instance's memory of each key
// lineage's last write. It knows nothing of any database: a position is
// a number that grows with every commit, which the store alone reads and
// compares; and the store knows nothing of HTTP.

package main

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// readAfterHeader carries a position: on every 201 and every read of the
// database (PostgreSQL only), and back from a client that wants a read to
// include it.
const readAfterHeader = "Petstore-Read-After"

// The defaults of --replica-wait and --replica-max-lag.
const (
	defaultReplicaWait   = 50 * time.Millisecond
	defaultReplicaMaxLag = 2 * time.Second
)

// maxLineages bounds the lineages whose last write an instance remembers
// (about 40 bytes each); the position of one evicted becomes a floor for
// every read.
const maxLineages = 1 << 16

// formatReadPos writes a position as the token clients see: 16 hex
// digits, opaque to them.
func formatReadPos(pos uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[pos&0xf]
		pos >>= 4
	}
	return string(b[:])
}

// parseReadPos reads a token; ok is false for anything but 16 hex digits
// (a malformed token is ignored, never refused).
func parseReadPos(s string) (pos uint64, ok bool) {
	if len(s) != 16 {
		return 0, false
	}
	pos, err := strconv.ParseUint(s, 16, 64)
	return pos, err == nil
}

// readState is what one request's reads and writes tell the store and
// learn from it. The store reads floor and replica, decides the source of
// the request's reads once (source), and hands back every position it
// reads or commits (saw, wrote); the highest becomes the answer's header,
// which readAfter's writer sets (no HTTP in the store).
type readState struct {
	ra      *readAfter
	lineage int64  // the key's lineage; 0: none
	floor   uint64 // what a read must include: the client's token, the lineage's last write here, the evicted floor
	replica bool   // a read operation: the replica may answer it
	pos     uint64 // the highest position seen: the header's value; 0: none yet
	// source is the store's choice for this request's reads: 0 until its
	// first read, then readFromReplica or readFromPrimary.
	source int
}

// The values of readState.source.
const (
	readFromReplica = 1
	readFromPrimary = 2
)

type readStateKey struct{}

// readStateOf returns the read state of ctx's request, or nil: no read
// state (SQLite, or not an API operation), nothing to track.
func readStateOf(ctx context.Context) *readState {
	st, _ := ctx.Value(readStateKey{}).(*readState)
	return st
}

// saw notes that the answer reflects position pos: the header says the
// highest one.
func (st *readState) saw(pos uint64) {
	st.pos = max(st.pos, pos)
}

// wrote notes a write committed at pos, which this instance then
// remembers for the key's lineage.
func (st *readState) wrote(pos uint64) {
	st.saw(pos)
	st.ra.remember(st.lineage, pos)
}

// readPosOf returns the highest position the request has seen, or 0.
func readPosOf(ctx context.Context) uint64 {
	if st := readStateOf(ctx); st != nil {
		return st.pos
	}
	return 0
}

// readSaw notes pos, a position the request's answer reflects (a cached
// list's), if the request is tracked.
func readSaw(ctx context.Context, pos uint64) {
	if st := readStateOf(ctx); st != nil {
		st.saw(pos)
	}
}

// positions is the part of the Store that read-your-writes asks
// directly (the rest it learns through the read state).
type positions interface {
	ReadPosition(ctx context.Context) (pos uint64, ok bool, err error)
}

// readAtReplay gives a replayed 201 the database's current position: a
// stored answer carries no position of its own.
func readAtReplay(ctx context.Context, store positions, status int) {
	st := readStateOf(ctx)
	if st == nil || status != http.StatusCreated {
		return
	}
	if pos, ok, err := store.ReadPosition(ctx); ok && err == nil {
		st.saw(pos)
	}
}

// readAfter is an instance's memory of the last write it made for each key
// lineage (bounded: when it is full, a lineage chosen at random goes, and
// the highest position of those gone is a floor for every read), and the
// middleware that gives each API operation its read state.
type readAfter struct {
	mu       sync.Mutex
	lineages map[int64]uint64
	size     int
	evicted  uint64
}

// newReadAfter returns the memory of a store that has positions
// (PostgreSQL), or nil for one that has none: its middleware then does
// nothing.
func newReadAfter(positions bool, size int) *readAfter {
	if !positions {
		return nil
	}
	return &readAfter{lineages: map[int64]uint64{}, size: max(size, 1)}
}

// remember notes that lineage's last write here is at pos.
func (ra *readAfter) remember(lineage int64, pos uint64) {
	if lineage == 0 {
		return
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	old, ok := ra.lineages[lineage]
	if ok && pos <= old {
		return
	}
	if !ok && len(ra.lineages) >= ra.size {
		for l, p := range ra.lineages { // one at random (map order)
			ra.evicted = max(ra.evicted, p)
			delete(ra.lineages, l)
			break
		}
	}
	ra.lineages[lineage] = pos
}

// floorOf is what every read of lineage must include without a token:
// its last write here, and the floor evicted lineages left.
func (ra *readAfter) floorOf(lineage int64) uint64 {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	return max(ra.evicted, ra.lineages[lineage])
}

// reads gives a read operation's requests their read state: the replica
// may answer them. On a store without positions (ra nil) it is h.
func (ra *readAfter) reads(h http.Handler) http.Handler { return ra.track(h, true) }

// writes gives a create's requests their read state: their 201 carries the
// commit's position, which the instance remembers for the key's lineage.
func (ra *readAfter) writes(h http.Handler) http.Handler { return ra.track(h, false) }

func (ra *readAfter) track(h http.Handler, replica bool) http.Handler {
	if ra == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &readAfterWriter{ResponseWriter: w, st: readState{ra: ra, replica: replica}}
		st := &tw.st
		if rs := stateOf(r); rs != nil && rs.key != nil {
			st.lineage = rs.key.Lineage
		}
		if replica {
			st.floor = ra.floorOf(st.lineage)
			for _, v := range r.Header.Values(readAfterHeader) {
				if pos, ok := parseReadPos(v); ok && pos > st.floor {
					st.floor = pos
				}
			}
		}
		h.ServeHTTP(tw, r.WithContext(context.WithValue(r.Context(), readStateKey{}, st)))
	})
}

// readAfterWriter sets Petstore-Read-After from the request's read state
// as the answer's header goes out: the highest position the store handed
// back until then. A streamed list's header goes with its first chunk,
// which the store read whole before.
type readAfterWriter struct {
	http.ResponseWriter
	st   readState // the request's, in one allocation with its writer
	sent bool
}

func (w *readAfterWriter) WriteHeader(status int) {
	w.send()
	w.ResponseWriter.WriteHeader(status)
}

func (w *readAfterWriter) Write(b []byte) (int, error) {
	w.send()
	return w.ResponseWriter.Write(b)
}

func (w *readAfterWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *readAfterWriter) send() {
	if w.sent {
		return
	}
	w.sent = true
	if w.st.pos > 0 {
		w.ResponseWriter.Header()[readAfterHeader] = []string{formatReadPos(w.st.pos)}
	}
}

// replicaStats are the counts of a store's reads by source, for the
// metrics (Shown: the store has a replica).
type replicaStats struct {
	Shown bool
	// Reads by where they went and why: from the replica; from the primary
	// because the replica lagged more than --replica-max-lag, because it
	// had not replayed the token within --replica-wait, or because it
	// failed or could not be reached.
	Replica, Lag, Wait, Error uint64
	// Waits are the reads that waited for the replica to replay their
	// floor (either way it ended), WaitSeconds how long they waited in all.
	Waits       uint64
	WaitSeconds float64
	LagSeconds  float64 // how long it has been short of the primary's last known position
}
