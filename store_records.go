// store_records.go owns the records that the Store's methods take and
// return: the catalog's rows, the API keys, the day counts' increments, an
// Idempotency-Key's request, answer and write, the store's counts and its
// replication (with the acknowledged writes found lost).

package main

import (
	"strings"
	"sync/atomic"
	"time"
)

// Category is a row of the categories table.
type Category struct {
	ID          int64   `json:"id"`
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
}

// Pet is a row of the pets table.
type Pet struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	CategoryID int64  `json:"categoryId"`
	Status     string `json:"status"`
	Version    int64  `json:"-"` // 1 when made, grown by each change: its ETag
}

// petFilter narrows a pet list; zero fields do not filter.
type petFilter struct {
	CategoryID int64
	Statuses   []string // any of them; none: any status
}

// statusSet is f's statuses as both stores' list query takes them: each
// between commas (",available,sold,"), or "" for any status.
func (f petFilter) statusSet() string {
	if len(f.Statuses) == 0 {
		return ""
	}
	return "," + strings.Join(f.Statuses, ",") + ","
}

// Order is a row of the orders table.
type Order struct {
	ID        int64  `json:"id"`
	PetID     int64  `json:"petId"`
	Quantity  int64  `json:"quantity"`
	Status    string `json:"status"`
	CreatedAt string `json:"createdAt"` // RFC 3339, UTC
	Version   int64  `json:"-"`         // 1 when made: its ETag
}

// apiKey is a row of api_keys. RPM and RPD are as stored (0 but for
// enterprise keys) until planLimits resolves them.
type apiKey struct {
	ID          int64
	Hash        [32]byte
	Name        string
	Plan        string
	RPM         int64
	RPD         int64
	Env         string
	CreatedAt   time.Time
	Revoked     bool
	BannedUntil time.Time // zero when not banned
	ExpiresAt   time.Time // zero: never; refused from then on
	Scope       string    // "write", or "read": GET and HEAD only
	Lineage     int64     // the id of the first key its rotations started from (its own, for that key)
	Replaces    int64     // the key it was rotated from; 0: none
	LastUsedAt  time.Time // the minute of its last request as last written; zero: never
	seq         int64     // grows with every change: KeysSince's cursor

	// used is set by the requests that carry the key and taken by the
	// upkeep, which writes LastUsedAt with the day counts. The keyring
	// hands it from a key's old record to its new one.
	used *atomic.Bool
}

// Key scopes (DECISIONS.md section 11).
const (
	scopeWrite = "write"
	scopeRead  = "read"
)

// keyScopes are the scopes a key may have.
var keyScopes = []string{scopeRead, scopeWrite}

// usableAt reports whether k, a key not revoked, is still valid at now.
func (k *apiKey) usableAt(now time.Time) bool {
	return k.ExpiresAt.IsZero() || now.Before(k.ExpiresAt)
}

// keySpec is a key to create: its hash and what keys create gives it.
type keySpec struct {
	Hash      [32]byte
	Name      string
	Plan      string
	RPM, RPD  int64 // stored for enterprise only
	Env       string
	Scope     string    // "" is write
	ExpiresAt time.Time // zero: never
}

// limits returns the stored rpm and rpd of spec: NULL but for enterprise.
func (spec keySpec) limits() (rpm, rpd any) {
	if spec.Plan == "enterprise" {
		return spec.RPM, spec.RPD
	}
	return nil, nil
}

func (spec keySpec) scope() string {
	if spec.Scope == "" {
		return scopeWrite
	}
	return spec.Scope
}

// dayDelta is an increment of a key's count for a UTC day ("2006-01-02").
type dayDelta struct {
	KeyID int64
	Day   string
	N     int64
}

// idemRequest is a request's Idempotency-Key as the store sees it.
type idemRequest struct {
	KeyID int64  // the API key it is scoped to
	Key   string // the Idempotency-Key, unquoted
	Owner int64  // a random token of this request: its running mark's
	Now   time.Time
	Since time.Time // answers stored at or before Since have expired
}

// idemAnswer is a stored answer and the fingerprint of its request.
type idemAnswer struct {
	Fingerprint [32]byte
	Status      int
	Body        []byte
	Pos         uint64 // the database's position when it was read, for a replayed 201's Petstore-Read-After; 0: unknown
}

// idemWrite is a create's Idempotency-Key: the store claims the key in the
// create's transaction (a stored answer makes the create errIdemExists),
// then asks answer what to store for the create's outcome (the row made,
// or the create's refusal) and stores it, or drops the claim when keep is
// false, before that transaction commits.
type idemWrite[Row any] struct {
	idemRequest
	Fingerprint [32]byte
	answer      func(Row, error) (status int, body []byte, keep bool)

	Status int // the answer stored, set by settle: 0 when none
	Body   []byte
	// Found is the answer stored before, which a store that looks for it
	// in the create's own statement (PostgreSQL) returns with
	// errIdemExists; nil: look it up.
	Found *idemAnswer
}

// settle asks for the answer to the create's outcome and notes it if it is
// to be kept.
func (w *idemWrite[Row]) settle(row Row, err error) (status int, body []byte, keep bool) {
	status, body, keep = w.answer(row, err)
	if keep {
		w.Status, w.Body = status, body
	}
	return status, body, keep
}

// replication is PostgreSQL's synchronous replication as the primary
// reports it (DECISIONS.md section 19): whether an acknowledged write
// survives the loss of the primary.
type replication struct {
	Shown        bool   // there is something to show: a PostgreSQL database
	Hosts        int    // hosts the URL lists
	SyncCommit   string // synchronous_commit
	SyncNames    string // synchronous_standby_names
	SyncStandbys int    // standbys that confirm commits (sync or quorum); -1: unknown, the role may not read them (pg_monitor)
	// Lost are the acknowledged creates found missing (or replaced) since
	// the process started (DECISIONS.md section 21), in the order found;
	// LostBy counts them by table: categories, pets, orders.
	Lost   []lostWrite
	LostBy [3]uint64
}

// lostWrite names an acknowledged create that the database lost.
type lostWrite struct {
	Table string `json:"table"`
	ID    int64  `json:"id"`
}

// lostTables are the tables of replication.LostBy, in its order.
var lostTables = [3]string{"categories", "pets", "orders"}

// safe reports whether an acknowledged write is on a standby too: a
// synchronous standby, and synchronous_commit that waits for it.
func (r replication) safe() bool {
	return r.SyncStandbys > 0 && r.SyncCommit != "off" && r.SyncCommit != "local"
}
