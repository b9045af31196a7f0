// store.go owns the store's interface: the operations that the handlers,
// the keyring, the upkeep and the CLI use, by role, and the errors they may
// get back (the records they read and write are store_records.go's). The interface knows nothing of HTTP or
// SQL; openStore and isDBError are where its implementations plug in:
// SQLite (sqlite*.go), the default, and PostgreSQL (postgres*.go), for
// several instances on one database.

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

var (
	errNotFound    = errors.New("not found")
	errConflict    = errors.New("conflict")
	errRevoked     = errors.New("revoked")
	errNoReference = errors.New("referenced row does not exist")
	// errPrecondition: a change's If-Match names another version of the
	// row; nothing was changed.
	errPrecondition = errors.New("precondition failed")
	errUnavailable  = errors.New("database unavailable")
	// errDBAway is errUnavailable for a database that cannot be reached, or
	// that answers as a standby or as shutting down: an outage or a
	// failover, which a retry a second later may find over (its 503 says
	// Retry-After: 1, retryAfterAway).
	errDBAway = fmt.Errorf("%w: no read-write server reached", errUnavailable)
	// errIdemExists: a create's Idempotency-Key has an answer stored
	// already (or one committed meanwhile); nothing was written.
	errIdemExists = errors.New("idempotency key has a stored answer")
	// errInFlight: another request with the Idempotency-Key is running.
	errInFlight = errors.New("idempotency key in use")
)

// isRefusal reports whether err is a create's own refusal: the write was
// undone alone, or never made, and the batch's transaction is as it was.
func isRefusal(err error) bool {
	return errors.Is(err, errConflict) || errors.Is(err, errNoReference) || errors.Is(err, errIdemExists)
}

// isOwnOutcome reports whether err is a write's own outcome in the group
// commit (groupcommit.go), which fails that write alone: refused
// (isRefusal), not found (errNotFound) or precondition failed
// (errPrecondition). The write changed nothing, and the batch's
// transaction is as it was, so its neighbours commit. Any other error is
// the batch's failure.
func isOwnOutcome(err error) bool {
	return isRefusal(err) || errors.Is(err, errNotFound) || errors.Is(err, errPrecondition)
}

// Store is the database as the rest of petstore sees it: the union of its
// roles, each of which a caller that needs no more takes alone (a catalog
// handler a catalogStore, the upkeep an upkeepStore). Errors that a retry
// may cure (a lock, a full disk, I/O) wrap errUnavailable. Each store's
// var _ Store line (sqlite.go, postgres.go) holds it to every role.
type Store interface {
	catalogStore
	keyStore
	idemStore
	countStore
	acmeStore
	healthStore
	adminStore
}

// catalogStore is the catalog: categories, pets and orders, which the
// handlers create, list, change and delete.
//
// Every implementation keeps these rules about the catalog, and the code
// that relies on them points here; an operation that would break them
// must first rework each of those places:
//
//   - Categories are never deleted or renamed: once committed, a category
//     keeps its id and what a reader sees of it for good (no migration may
//     change one; filling in a key no reader sees, as name_cmp, is no
//     change). Pets may be replaced and deleted, orders deleted; each
//     change grows the row's version (its ETag).
//   - Ids ascend and are never reused. A row never becomes visible with an
//     id lower than a visible row's (SQLite has one writer; PostgreSQL's
//     creates take turns under pgLockCatalog until they commit), and no id
//     that was ever handed out is handed out again, deleted or not
//     (PostgreSQL's identity sequences; SQLite's AUTOINCREMENT on pets and
//     orders, schema 11; categories, never deleted, need none).
//   - A delete never makes a concurrent create fail: on PostgreSQL every
//     change and delete runs in the group commit's batches, under
//     pgLockCatalog as the creates do, so a create's check that the row it
//     names exists (WHERE EXISTS) cannot be overtaken by a delete of that
//     row before its insert, which the foreign key would refuse and abort
//     the whole batch with.
//   - What follows: rows read by ascending id, in chunks or pages each read
//     on its own, give every row that exists throughout once, and no row
//     twice (inChunks, the pet and order pages); a row deleted meanwhile
//     may be missing, a changed one appears as one of its versions. For
//     categories alone, a list may assume that the rows up to the highest
//     id it read are all there is up to that id, for good: a full page
//     never changes and the list only grows (the category list cache,
//     categories.go), and the highest visible id names the whole set
//     (PostgreSQL's CategoriesGen). Pet and order pages are never cached.
type catalogStore interface {
	// CreateCategory inserts c; fold is its name's uniqueness key, and the
	// store adds compareName's (names.go). A name that folds or compares
	// like an existing one is errConflict. Each create takes an
	// idemWrite when the request had an Idempotency-Key (nil otherwise),
	// and stores its answer in the create's transaction.
	CreateCategory(ctx context.Context, c Category, fold string, idem *idemWrite[Category]) (Category, error)
	// EachCategory calls fn for every category in ascending id order and
	// stops at fn's first error.
	EachCategory(ctx context.Context, fn func(Category) error) error
	// EachCategoryAfter calls fn for at most limit categories with ids
	// above afterID, in ascending id order.
	EachCategoryAfter(ctx context.Context, afterID int64, limit int, fn func(Category) error) error
	// CategoriesGen returns the generation of the categories: it grows
	// after every committed change, made by this process or any other, so
	// that a cached list knows it is stale. A list read after CategoriesGen
	// returned g holds every category of generation g.
	CategoriesGen(ctx context.Context) (uint64, error)

	// CreatePet inserts p; a category that does not exist is errNoReference.
	CreatePet(ctx context.Context, p Pet, idem *idemWrite[Pet]) (Pet, error)
	// EachPetAfter calls fn for at most limit pets that match f, with ids
	// above afterID, in ascending id order.
	EachPetAfter(ctx context.Context, f petFilter, afterID int64, limit int, fn func(Pet) error) error
	// Pet returns the pet with the given id, its version included, or
	// errNotFound.
	Pet(ctx context.Context, id int64) (Pet, error)

	// The changes: each is one write of the group commit, and on
	// PostgreSQL runs under pgLockCatalog (the rules above). match is the
	// versions If-Match names (ifMatch, changes.go: "" for any, else
	// ",3,4,"), checked in the write's own statement on the primary. A row
	// that does not exist is errNotFound; one at another version
	// errPrecondition; nothing is changed then.

	// ReplacePet replaces pet p.ID's name, category and status with p's and
	// grows its version; it returns the pet as changed. A category that
	// does not exist is errNoReference.
	ReplacePet(ctx context.Context, p Pet, match string) (Pet, error)
	// DeletePet deletes pet id; while an order names it, errConflict.
	DeletePet(ctx context.Context, id int64, match string) error
	// Order returns the order with the given id, its version included, or
	// errNotFound.
	Order(ctx context.Context, id int64) (Order, error)
	// DeleteOrder deletes order id.
	DeleteOrder(ctx context.Context, id int64, match string) error

	// CreateOrder places o, stamped with the store's clock; a pet that
	// does not exist is errNoReference.
	CreateOrder(ctx context.Context, o Order, idem *idemWrite[Order]) (Order, error)
	// EachOrderAfter calls fn for at most limit orders with ids above
	// afterID, in ascending id order.
	EachOrderAfter(ctx context.Context, afterID int64, limit int, fn func(Order) error) error
	// PetInventory returns how many pets have each status; a status that
	// no pet has is absent.
	PetInventory(ctx context.Context) (map[string]int64, error)
}

// keyStore is the API keys: the keyring reads them, the keys commands
// change them.
type keyStore interface {
	// CreateKey stores a new key by its hash. rpm and rpd are stored only
	// for enterprise keys; the others take theirs from the plan table.
	CreateKey(ctx context.Context, spec keySpec) (apiKey, error)
	// KeysSince returns the keys changed after seq (all of them for
	// seq < 0), revoked ones included, in ascending id order.
	KeysSince(ctx context.Context, seq int64) ([]apiKey, error)
	// CreateFirstKey stores a new free key as CreateKey does, but only
	// when no key, revoked or not, exists; it reports whether it did. Of
	// processes that call it at once on a new database, one creates it.
	CreateFirstKey(ctx context.Context, hash [32]byte, name, env string) (apiKey, bool, error)
	// RevokeKey revokes key id for good; an unknown id is errNotFound.
	// Revoking a revoked key changes nothing and is no error.
	RevokeKey(ctx context.Context, id int64) error
	// SetKeyBan bans the lineage of key id until the given time, on the
	// row of every key in it; the zero time lifts a ban. An unknown id is
	// errNotFound.
	SetKeyBan(ctx context.Context, id int64, until time.Time) error
	// RotateKey stores a new key by its hash with the name, plan, limits,
	// environment, scope and ban of key id, in id's lineage and replacing
	// it, and makes id expire at until (or at its own expiry, when that
	// is sooner). An unknown id is errNotFound, a revoked one errRevoked.
	RotateKey(ctx context.Context, id int64, hash [32]byte, until time.Time) (apiKey, error)
}

// idemStore is the answers kept for Idempotency-Keys (idempotency.go).
type idemStore interface {
	// BeginIdempotent is the start of a keyed create on a store that does
	// not IdemWaits: it returns the answer stored for r's key
	// after r.Since, or nil when there is none, and then marks the key
	// running until EndIdempotent, or until this process or its
	// connection dies; a key that another live request's mark holds is
	// errInFlight. An error leaves no mark. SQLite has one process, which
	// keeps its marks in memory: it returns nil without looking, and its
	// create finds a stored answer itself (errIdemExists).
	BeginIdempotent(ctx context.Context, r idemRequest) (*idemAnswer, error)
	// IdempotentAnswer returns the answer stored for r's key after
	// r.Since, or nil.
	IdempotentAnswer(ctx context.Context, r idemRequest) (*idemAnswer, error)
	// IdemWaits reports whether a keyed create looks for an earlier answer
	// in its own transaction, after the commit of any other request with
	// the key (PostgreSQL: section 22): then nothing marks a key running,
	// and a request whose key another is running waits for that one's
	// commit and gets its answer, rather than 409 idempotency_key_in_use
	// (SQLite, whose marks are the process's own); and BeginIdempotent and
	// EndIdempotent are not called.
	IdemWaits() bool
	// EndIdempotent removes r's running mark, if BeginIdempotent made one,
	// once the create's transaction has ended (committed or not).
	EndIdempotent(ctx context.Context, r idemRequest) error
	// PurgeIdempotency deletes at most limit answers stored at or before
	// before, oldest first, and returns how many it deleted; running marks
	// that lapsed before now go too.
	PurgeIdempotency(ctx context.Context, before, now time.Time, limit int) (int, error)
	// A replayed 201 carries the database's position now (positions,
	// read_after.go).
	positions
}

// countStore is the requests counted per key and day.
type countStore interface {
	// DayCounts returns the stored request counts of day (YYYY-MM-DD) by
	// key id.
	DayCounts(ctx context.Context, day string) (map[int64]int64, error)
	// AddDayCounts adds each delta to its key's stored count of its day,
	// all or none, and stamps the keys used with the minute of at.
	AddDayCounts(ctx context.Context, deltas []dayDelta, used []int64, at time.Time) error
}

// upkeepStore is what the upkeep (limits_upkeep.go) writes: the day counts
// and, as they come, the bans (keyStore's SetKeyBan).
type upkeepStore interface {
	countStore
	SetKeyBan(ctx context.Context, id int64, until time.Time) error
}

// acmeStore is HTTPS from an ACME CA's cache and issuer lock
// (acme_cache.go).
type acmeStore interface {
	// ACMEGet returns the blob that HTTPS from an ACME CA (acme_cache.go)
	// stored under key for the CA whose directory URL is dir, or
	// errNotFound.
	ACMEGet(ctx context.Context, dir, key string) ([]byte, error)
	// ACMEPut stores data under dir and key, replacing what was there.
	ACMEPut(ctx context.Context, dir, key string, data []byte) error
	// ACMEDelete removes what is stored under dir and key, if anything.
	ACMEDelete(ctx context.Context, dir, key string) error
	// ACMELock takes the database's ACME issuer lock, waiting for it until
	// ctx ends, and returns its unlock: instances that share the database
	// take turns at asking the CA for a certificate (acme_cache.go). A
	// lock that cannot be taken (the database is away) is an error at
	// once. SQLite, which one process serves, has nothing to take.
	ACMELock(ctx context.Context) (unlock func(), err error)
}

// healthStore is what /readyz and the metrics read of the database.
type healthStore interface {
	// Ready reports whether the database answers a query.
	Ready(ctx context.Context) error
	// Stats returns counts of the store's work, for the metrics.
	Stats() storeStats
	// Replication returns what the database says of the copies of a
	// committed write, as last read (PostgreSQL: at open and each minute);
	// the zero value where there is nothing to say (SQLite).
	Replication() replication
}

// adminStore is the database as a whole, as serve and the commands handle
// it.
type adminStore interface {
	// SchemaVersion returns the version of the database's schema.
	SchemaVersion(ctx context.Context) (uint, error)
	// DeploymentID returns the database's deployment id: random, made by
	// a migration, the same for every instance on the database, and
	// carried by petstore copy. The default --redis-prefix holds it.
	DeploymentID(ctx context.Context) (string, error)
	// Checkpoint makes the database complete in itself, for a copy of it
	// taken after the server stopped.
	Checkpoint(ctx context.Context) error
	Close() error
}

// storeStats are counts of a store's work since it was opened.
type storeStats struct {
	Batches           int64        // transactions of the group commit
	Writes            int64        // creates they held
	CategoryListReads uint64       // whole category lists read
	Replica           replicaStats // reads by source, with --db-replica
}

// storeOptions are how a store is opened.
type storeOptions struct {
	// migrate applies the migrations the database lacks (creating a
	// missing SQLite file); without it the schema is taken as it is.
	migrate bool
	now     func() time.Time
	// busy bounds how long an operation waits for a lock, a connection or
	// an answer before it fails with errUnavailable.
	busy time.Duration
	// maxConns bounds PostgreSQL's connection pool (0: the default).
	maxConns int
	// replica is serve's --db-replica (PostgreSQL; empty: none), with
	// --replica-wait and --replica-max-lag (read_after.go).
	replica       string
	replicaWait   time.Duration
	replicaMaxLag time.Duration
	// log gets what the store notices while it runs (PostgreSQL: a lost
	// write, the last synchronous standby gone); nil: nothing is logged.
	log *slog.Logger
}

// storeWrapKey carries a test's wrapper of serve's store (one that counts
// its reads, say) into serve through run's context, as clockKey carries a
// clock; main never sets one.
type storeWrapKey struct{}

// wrapStore returns store wrapped by the wrapper that ctx carries, if any.
func wrapStore(ctx context.Context, store Store) Store {
	if wrap, ok := ctx.Value(storeWrapKey{}).(func(Store) Store); ok {
		return wrap(store)
	}
	return store
}

// openStore opens the database that db names: a PostgreSQL URL
// (openPostgres) or the path of a SQLite file (openSQLite).
func openStore(ctx context.Context, db string, o storeOptions) (Store, error) {
	if isPostgresURL(db) {
		return openPostgres(ctx, db, o)
	}
	s, err := openSQLite(ctx, db, o.migrate, o.now, o.busy)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// isDBError reports whether err came from the database.
func isDBError(err error) bool {
	return errors.Is(err, errUnavailable) || isSQLiteError(err) || isPostgresError(err)
}

// listChunk is how many rows a list reads at a time.
const listChunk = 1000

// inChunks calls fn with every row of a list, in ascending id order, that
// read returns listChunk at a time: read returns the rows after an id, and
// idOf gives a row's id. Each chunk is read whole before fn sees any of it.
// By catalogStore's rules (above), the chunks, each read on its own, add up to
// the list with every row that exists throughout once, and perhaps rows
// created meanwhile at its end (only the category list, whose rows are
// never deleted, reads in chunks today).
func inChunks[T any](read func(after int64) ([]T, error), idOf func(T) int64, fn func(T) error) error {
	after := int64(0)
	for {
		chunk, err := read(after)
		if err != nil {
			return err
		}
		for _, v := range chunk {
			if err := fn(v); err != nil {
				return err
			}
		}
		if len(chunk) < listChunk {
			return nil
		}
		after = idOf(chunk[len(chunk)-1])
	}
}

// nameTaken is errConflict naming the category that holds the name: the
// one sent may differ from it in case ("dog" against "Dog").
type nameTaken struct{ name string }

func (e *nameTaken) Error() string { return fmt.Sprintf("conflict with category %q", e.name) }
func (e *nameTaken) Unwrap() error { return errConflict }

// conflictNamed is errConflict naming the category called name, when the
// store could read it (nil: it could not, and the plain errConflict says
// enough).
func conflictNamed(name *string) error {
	if name == nil {
		return errConflict
	}
	return &nameTaken{*name}
}

// wrapCreate describes a create's error with the store's describe, but
// for the refusals a handler answers as they are.
func wrapCreate(what string, err error, describe func(error) error) error {
	return wrapWrite(what, err, describe)
}

// wrapWrite describes a write's error with the store's describe, but for
// its own outcomes (isOwnOutcome: refused, not found, precondition
// failed), which a handler answers as they are.
func wrapWrite(what string, err error, describe func(error) error) error {
	if err == nil || isOwnOutcome(err) {
		return err
	}
	return fmt.Errorf("%s: %w", what, describe(err))
}

// isPostgresURL reports whether db names a PostgreSQL database rather than
// a SQLite file.
func isPostgresURL(db string) bool {
	scheme, _, ok := strings.Cut(db, "://")
	return ok && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql"))
}

// defaultBusyTimeout is how long a statement waits for a lock another
// connection or process holds before it fails (and the client gets a 503).
const defaultBusyTimeout = 5 * time.Second

// nextSeq is the expression that stamps a changed api_keys row: the same
// SQL on both stores (sqlite_keys.go, postgres_keys.go).
const nextSeq = "(SELECT coalesce(max(seq), 0) + 1 FROM api_keys)"
