// store.go owns the store's interface: the operations that the handlers,
// the keyring, the upkeep and the CLI use, the records they read and write,
// and the errors they may get back. The interface knows nothing of HTTP or
// SQL; openStore and isDBError are where its implementations plug in
// (SQLite, sqlite*.go, is the one today).

package main

import (
	"context"
	"errors"
	"time"
)

var (
	errNotFound    = errors.New("not found")
	errConflict    = errors.New("conflict")
	errNoReference = errors.New("referenced row does not exist")
	errUnavailable = errors.New("database unavailable")
)

// Store is the database as the rest of petstore sees it. Errors that a
// retry may cure (a lock, a full disk, I/O) wrap errUnavailable.
type Store interface {
	// CreateCategory inserts c; fold is its name's uniqueness key. A name
	// that folds like an existing one is errConflict.
	CreateCategory(ctx context.Context, c Category, fold string) (Category, error)
	// EachCategory calls fn for every category in ascending id order and
	// stops at fn's first error.
	EachCategory(ctx context.Context, fn func(Category) error) error
	// EachCategoryAfter calls fn for at most limit categories with ids
	// above afterID, in ascending id order.
	EachCategoryAfter(ctx context.Context, afterID int64, limit int, fn func(Category) error) error
	// CategoriesGen returns the generation of the categories: it grows
	// after every committed change, so that a cached list knows it is stale.
	CategoriesGen() uint64

	// CreatePet inserts p; a category that does not exist is errNoReference.
	CreatePet(ctx context.Context, p Pet) (Pet, error)
	// EachPet calls fn for every pet that matches f, in ascending id order.
	EachPet(ctx context.Context, f petFilter, fn func(Pet) error) error
	// Pet returns the pet with the given id, or errNotFound.
	Pet(ctx context.Context, id int64) (Pet, error)

	// CreateOrder places o, stamped with the store's clock; a pet that
	// does not exist is errNoReference.
	CreateOrder(ctx context.Context, o Order) (Order, error)
	// EachOrder calls fn for every order in ascending id order.
	EachOrder(ctx context.Context, fn func(Order) error) error

	// CreateKey stores a new key by its hash. rpm and rpd are stored only
	// for enterprise keys; the others take theirs from the plan table.
	CreateKey(ctx context.Context, hash [32]byte, name, planName string, rpm, rpd int64, env string) (apiKey, error)
	// KeysSince returns the keys changed after seq (all of them for
	// seq < 0), revoked ones included, in ascending id order.
	KeysSince(ctx context.Context, seq int64) ([]apiKey, error)
	// HasKeys reports whether any key, revoked or not, exists.
	HasKeys(ctx context.Context) (bool, error)
	// RevokeKey revokes key id for good; an unknown id is errNotFound.
	// Revoking a revoked key changes nothing and is no error.
	RevokeKey(ctx context.Context, id int64) error
	// SetKeyBan bans key id until the given time; the zero time lifts a
	// ban. An unknown id is errNotFound.
	SetKeyBan(ctx context.Context, id int64, until time.Time) error

	// DayCounts returns the stored request counts of day (YYYY-MM-DD) by
	// key id.
	DayCounts(ctx context.Context, day string) (map[int64]int64, error)
	// AddDayCounts adds each delta to its key's stored count of its day,
	// all or none.
	AddDayCounts(ctx context.Context, deltas []dayDelta) error

	// Ready reports whether the database answers a query.
	Ready(ctx context.Context) error
	// Checkpoint makes the database complete in itself, for a copy of it
	// taken after the server stopped.
	Checkpoint(ctx context.Context) error
	// Stats returns counts of the store's work, for the metrics.
	Stats() storeStats
	Close() error
}

// storeStats are counts of a store's work since it was opened.
type storeStats struct {
	Batches           int64  // transactions of the group commit
	Writes            int64  // creates they held
	CategoryListReads uint64 // whole category lists read
}

// openStore opens the database at path: see openSQLite.
func openStore(ctx context.Context, path string, migrateUp bool, now func() time.Time, busy time.Duration) (Store, error) {
	s, err := openSQLite(ctx, path, migrateUp, now, busy)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// isDBError reports whether err came from the database.
func isDBError(err error) bool {
	return errors.Is(err, errUnavailable) || isSQLiteError(err)
}

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
}

// petFilter narrows a pet list; zero fields do not filter.
type petFilter struct {
	CategoryID int64
	Status     string
}

// Order is a row of the orders table.
type Order struct {
	ID        int64  `json:"id"`
	PetID     int64  `json:"petId"`
	Quantity  int64  `json:"quantity"`
	Status    string `json:"status"`
	CreatedAt string `json:"createdAt"` // RFC 3339, UTC
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
	seq         int64     // grows with every change: KeysSince's cursor
}

// dayDelta is an increment of a key's count for a UTC day ("2006-01-02").
type dayDelta struct {
	KeyID int64
	Day   string
	N     int64
}
