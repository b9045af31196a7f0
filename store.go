package main

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"golang.org/x/sys/unix"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var (
	errNotFound    = errors.New("not found")
	errConflict    = errors.New("conflict")
	errNoReference = errors.New("referenced row does not exist")
	errUnavailable = errors.New("database unavailable")
)

// Store is the SQLite database: one writer connection, a small read pool.
// It knows nothing of HTTP.
type Store struct {
	path string
	w    *sql.DB
	r    *sql.DB
	now  func() time.Time

	// categoriesGen grows after every committed change to categories, so
	// that a cached list knows when it is stale.
	categoriesGen atomic.Uint64
	// categoryListReads counts EachCategory calls: whole-list reads, for
	// the metrics.
	categoryListReads atomic.Uint64

	// group commits the API's creates; the rest writes through w directly.
	group *groupCommitter

	insertCategory, insertPet, insertOrder *sql.Stmt
}

// sqliteHeader starts every SQLite 3 database file.
const sqliteHeader = "SQLite format 3\x00"

// defaultBusyTimeout is how long a statement waits for a lock another
// connection or process holds before it fails (and the client gets a 503).
const defaultBusyTimeout = 5 * time.Second

// dsn returns the connection string for path. synchronous=FULL makes every
// commit fsync the WAL before it returns, so an acknowledged write survives a
// killed process and a power loss alike.
func dsn(path string, readOnly bool, busy time.Duration) string {
	q := "?_pragma=busy_timeout(" + strconv.FormatInt(busy.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=foreign_keys(ON)&_pragma=synchronous(FULL)&_txlock=immediate"
	if readOnly {
		q += "&_pragma=query_only(ON)"
	}
	return path + q
}

// checkDatabaseFile fails with a clear message when path cannot hold the
// database: a missing directory, a file that is not SQLite (never
// overwritten), or a file or directory this process may not write. When
// create is set, a missing file is created with mode 0600.
func checkDatabaseFile(path string, create bool) error {
	if path == "" {
		return usagef("no database path given (--db)")
	}
	if strings.ContainsAny(path, "?#") {
		return usagef("database path %q: '?' and '#' are not allowed in the path", path)
	}
	if strings.HasPrefix(path, "file:") {
		// SQLite would take it as a URI and open another file than the one
		// checked and created (0600) here.
		return usagef("database path %q: SQLite reads a path starting with file: as a URI; write ./%s", path, path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return fmt.Errorf("database %s does not exist", path)
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return checkDatabaseFile(path, false) // another process created it just now
		}
		if err != nil {
			return fmt.Errorf("cannot create database %s: %w", path, unwrapPathError(err))
		}
		return f.Close()
	}
	if err != nil {
		return fmt.Errorf("cannot open database %s for writing: %w", path, unwrapPathError(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("database %s is not a regular file", path)
	}
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	switch {
	case n == 0 && (err == io.EOF):
		return nil // an empty file is an empty database to SQLite
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("cannot read database %s: %w", path, unwrapPathError(err))
	case string(head[:n]) != sqliteHeader:
		return fmt.Errorf("%s is not a SQLite database; refusing to touch it", path)
	}
	// SQLite also writes path-wal and path-shm beside the file.
	dir := filepath.Dir(path)
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	return nil
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// openStore opens the database at path. With migrateUp it creates a missing
// file and applies pending migrations, refusing a database whose schema is
// newer than this binary knows; without, the file must exist and its schema
// is taken as it is.
func openStore(ctx context.Context, path string, migrateUp bool, now func() time.Time, busy time.Duration) (*Store, error) {
	if err := checkDatabaseFile(path, migrateUp); err != nil {
		return nil, err
	}
	if migrateUp {
		if err := migrateDatabase(path, busy); err != nil {
			return nil, err
		}
	}
	w, err := sql.Open("sqlite", dsn(path, false, busy))
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	var mode string
	if err := w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		w.Close()
		return nil, fmt.Errorf("open database %s: %w", path, describe(err))
	}
	if mode != "wal" {
		w.Close()
		return nil, fmt.Errorf("open database %s: journal_mode is %q, want wal", path, mode)
	}
	r, err := sql.Open("sqlite", dsn(path, true, busy))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	r.SetConnMaxIdleTime(0)
	s := &Store{path: path, w: w, r: r, now: now, group: newGroupCommitter(w)}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&s.insertCategory, "INSERT INTO categories (name, fold, description) VALUES (?, ?, ?)"},
		{&s.insertPet, "INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)"},
		{&s.insertOrder, "INSERT INTO orders (pet_id, quantity, status, created_at) VALUES (?, ?, ?, ?)"},
	} {
		if *p.stmt, err = w.PrepareContext(ctx, p.sql); err != nil {
			s.Close()
			return nil, fmt.Errorf("prepare: %w", describe(err))
		}
	}
	return s, nil
}

// migrateDatabase applies the embedded migrations that the database lacks.
// It fails without changing anything when the database is dirty or ahead of
// the migrations this binary embeds.
func migrateDatabase(path string, busy time.Duration) error {
	unlock, err := lockDirectory(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer unlock()
	db, err := sql.Open("sqlite", dsn(path, false, busy))
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	db.SetMaxOpenConns(1)
	if upToDate(db) {
		return db.Close() // the usual start: spare golang-migrate's setup
	}
	src, err := iofs.New(migrationFiles, "migrations")
	if err != nil {
		db.Close()
		return fmt.Errorf("read embedded migrations: %w", err)
	}
	latest, err := latestMigration()
	if err != nil {
		db.Close()
		return err
	}
	drv, err := migratesqlite.WithInstance(db, &migratesqlite.Config{})
	if err != nil {
		db.Close()
		return fmt.Errorf("open database %s: %w", path, describe(err))
	}
	m, err := migrate.NewWithInstance("iofs", src, "sqlite", drv)
	if err != nil {
		db.Close()
		return fmt.Errorf("prepare migrations: %w", err)
	}
	defer m.Close() // closes db too
	version, dirty, err := m.Version()
	if err != nil && !errors.Is(err, migrate.ErrNilVersion) {
		return fmt.Errorf("read schema version: %w", describe(err))
	}
	switch {
	case dirty:
		return fmt.Errorf("database %s: a migration to schema version %d failed half-way; restore a backup", path, version)
	case version > latest:
		return fmt.Errorf("database %s has schema version %d, newer than this petstore knows (%d); run a newer petstore", path, version, latest)
	case version == latest:
		return nil
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		// golang-migrate's error quotes the whole migration; one line is enough.
		msg, _, _ := strings.Cut(describe(err).Error(), "\n")
		return fmt.Errorf("migrate database %s: %s", path, msg)
	}
	return nil
}

// lockDirectory holds an exclusive lock (flock) on dir until unlock is
// called, waiting for it if another process holds it. golang-migrate's
// SQLite driver locks within one process only: a server and a "keys"
// command starting together on a new database both ran the first
// migration, and the loser left the database marked dirty. The lock is on
// the directory, not the database file: closing a second descriptor of that
// file would drop SQLite's own (POSIX) locks on it.
func lockDirectory(dir string) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock %s for migrating: %w", dir, unwrapPathError(err))
	}
	for {
		err = unix.Flock(int(d.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("lock %s for migrating: %w", dir, err)
	}
	return func() { d.Close() }, nil // closing it releases the lock
}

// upToDate reports whether db is clean at the latest embedded migration.
func upToDate(db *sql.DB) bool {
	latest, err := latestMigration()
	if err != nil {
		return false
	}
	var version uint
	var dirty bool
	err = db.QueryRow("SELECT version, dirty FROM schema_migrations LIMIT 1").Scan(&version, &dirty)
	return err == nil && version == latest && !dirty
}

// latestMigration returns the highest version among the embedded migrations.
func latestMigration() (uint, error) {
	src, err := iofs.New(migrationFiles, "migrations")
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	defer src.Close()
	v, err := src.First()
	if err != nil {
		return 0, fmt.Errorf("read embedded migrations: %w", err)
	}
	for {
		next, err := src.Next(v)
		if errors.Is(err, fs.ErrNotExist) {
			return v, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read embedded migrations: %w", err)
		}
		v = next
	}
}

// Close closes both pools; SQLite checkpoints the WAL into the main file
// when the last connection to it closes.
func (s *Store) Close() error {
	s.group.close()
	return errors.Join(s.r.Close(), s.w.Close())
}

// Checkpoint copies the WAL into the database file and truncates it, so
// that the file alone is a complete copy.
func (s *Store) Checkpoint(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("checkpoint: %w", describe(err))
	}
	return nil
}

// Ready reports whether the database answers a query.
func (s *Store) Ready(ctx context.Context) error {
	var n int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n); err != nil {
		return fmt.Errorf("ready: %w", describe(err))
	}
	return nil
}

// describe maps SQLite's transient and storage errors (busy, locked, full
// disk, read-only file, I/O) to errUnavailable, keeping the cause.
func describe(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) || errors.Is(err, errUnavailable) {
		return err // not SQLite's, or described already
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY,
		sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL:
		return fmt.Errorf("%w: %w", errUnavailable, err)
	}
	return err
}

// isUniqueViolation reports whether err is a UNIQUE constraint failure.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// isForeignKeyViolation reports whether err is a FOREIGN KEY constraint failure.
func isForeignKeyViolation(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// listChunk is how many rows eachChunk reads at a time.
const listChunk = 1000

// eachChunk calls fn with every row of query, in ascending id order, reading
// listChunk rows at a time: query's last two parameters are the id to start
// after and the number of rows, and idOf gives a row's id. Each chunk is read
// whole and its connection given back to the read pool before fn sees any
// of it, so that a slow client, to whom fn writes, holds none of the pool's
// four connections (four such clients used to stall every read, /readyz
// included, for up to the write timeout). Rows are never deleted and ids
// only grow, so the chunks, each read in its own transaction, add up to the
// list with every row once, and perhaps rows created meanwhile at its end.
func eachChunk[T any](ctx context.Context, db *sql.DB, what string, scan func(*sql.Rows) (T, error), idOf func(T) int64, fn func(T) error, query string, args ...any) error {
	chunk := make([]T, 0, listChunk)
	after := int64(0)
	for {
		chunk = chunk[:0]
		err := each(ctx, db, what, scan, func(v T) error { chunk = append(chunk, v); return nil },
			query, append(args, after, listChunk)...)
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

// each runs query on the read pool and calls fn with every row that scan
// reads, stopping at fn's first error. what names the query in errors.
func each[T any](ctx context.Context, db *sql.DB, what string, scan func(*sql.Rows) (T, error), fn func(T) error, query string, args ...any) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, describe(err))
	}
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return fmt.Errorf("%s: %w", what, describe(err))
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, describe(err))
	}
	return nil
}

// insertID runs the prepared INSERT stmt in tx and sets *id to the new
// row's id. Exec and LastInsertId cost less than INSERT ... RETURNING
// read through a Rows (BenchmarkGroupCommitCreate: see BENCHMARKS.md).
func insertID(tx *batchTx, stmt *sql.Stmt, id *int64, args ...any) error {
	res, err := tx.stmt(stmt).Exec(args...)
	if err != nil {
		return err
	}
	*id, err = res.LastInsertId()
	return err
}

// Category is a row of the categories table.
type Category struct {
	ID          int64   `json:"id"`
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
}

// CreateCategory inserts a category; fold is its name's uniqueness key.
// A name that folds like an existing one is errConflict.
func (s *Store) CreateCategory(ctx context.Context, name, fold string, description *string) (Category, error) {
	c := Category{Name: name, Description: description}
	err := s.group.write(ctx, func(tx *batchTx) error {
		return insertID(tx, s.insertCategory, &c.ID, name, fold, description)
	})
	if isUniqueViolation(err) {
		return Category{}, errConflict
	}
	if err != nil {
		return Category{}, fmt.Errorf("insert category: %w", describe(err))
	}
	s.categoriesGen.Add(1)
	return c, nil
}

// categoriesAfter reads the categories after an id, up to a limit.
const categoriesAfter = "SELECT id, name, description FROM categories WHERE id > ? ORDER BY id LIMIT ?"

// EachCategory calls fn for every category in ascending id order and stops
// at fn's first error.
func (s *Store) EachCategory(ctx context.Context, fn func(Category) error) error {
	s.categoryListReads.Add(1)
	return eachChunk(ctx, s.r, "list categories", scanCategory, func(c Category) int64 { return c.ID }, fn,
		categoriesAfter)
}

// CategoriesGen returns the generation of the categories table: it grows
// after every committed change.
func (s *Store) CategoriesGen() uint64 { return s.categoriesGen.Load() }

// EachCategoryAfter calls fn for at most limit categories with ids above
// afterID, in ascending id order.
func (s *Store) EachCategoryAfter(ctx context.Context, afterID int64, limit int, fn func(Category) error) error {
	return each(ctx, s.r, "list categories", scanCategory, fn,
		categoriesAfter, afterID, limit)
}

func scanCategory(rows *sql.Rows) (Category, error) {
	var c Category
	var desc sql.NullString
	err := rows.Scan(&c.ID, &c.Name, &desc)
	if desc.Valid {
		c.Description = &desc.String
	}
	return c, err
}

// Pet is a row of the pets table.
type Pet struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	CategoryID int64  `json:"categoryId"`
	Status     string `json:"status"`
}

// CreatePet inserts a pet; a category that does not exist is errNoReference.
func (s *Store) CreatePet(ctx context.Context, p Pet) (Pet, error) {
	err := s.group.write(ctx, func(tx *batchTx) error {
		return insertID(tx, s.insertPet, &p.ID, p.Name, p.CategoryID, p.Status)
	})
	if isForeignKeyViolation(err) {
		return Pet{}, errNoReference
	}
	if err != nil {
		return Pet{}, fmt.Errorf("insert pet: %w", describe(err))
	}
	return p, nil
}

// petFilter narrows a pet list; zero fields do not filter.
type petFilter struct {
	CategoryID int64
	Status     string
}

// EachPet calls fn for every pet that matches f, in ascending id order.
func (s *Store) EachPet(ctx context.Context, f petFilter, fn func(Pet) error) error {
	return eachChunk(ctx, s.r, "list pets", scanPet, func(p Pet) int64 { return p.ID }, fn, `SELECT id, name, category_id, status FROM pets
		WHERE (?1 = 0 OR category_id = ?1) AND (?2 = '' OR status = ?2) AND id > ?3 ORDER BY id LIMIT ?4`, f.CategoryID, f.Status)
}

// Pet returns the pet with the given id, or errNotFound.
func (s *Store) Pet(ctx context.Context, id int64) (Pet, error) {
	var p Pet
	err := s.r.QueryRowContext(ctx, "SELECT id, name, category_id, status FROM pets WHERE id = ?", id).
		Scan(&p.ID, &p.Name, &p.CategoryID, &p.Status)
	if errors.Is(err, sql.ErrNoRows) {
		return p, errNotFound
	}
	if err != nil {
		return p, fmt.Errorf("read pet %d: %w", id, describe(err))
	}
	return p, nil
}

func scanPet(rows *sql.Rows) (Pet, error) {
	var p Pet
	err := rows.Scan(&p.ID, &p.Name, &p.CategoryID, &p.Status)
	return p, err
}

// Order is a row of the orders table.
type Order struct {
	ID        int64  `json:"id"`
	PetID     int64  `json:"petId"`
	Quantity  int64  `json:"quantity"`
	Status    string `json:"status"`
	CreatedAt string `json:"createdAt"` // RFC 3339, UTC
}

// CreateOrder places an order; a pet that does not exist is errNoReference.
func (s *Store) CreateOrder(ctx context.Context, petID, quantity int64) (Order, error) {
	o := Order{PetID: petID, Quantity: quantity, Status: "placed", CreatedAt: s.now().UTC().Format(time.RFC3339)}
	err := s.group.write(ctx, func(tx *batchTx) error {
		return insertID(tx, s.insertOrder, &o.ID, o.PetID, o.Quantity, o.Status, o.CreatedAt)
	})
	if isForeignKeyViolation(err) {
		return Order{}, errNoReference
	}
	if err != nil {
		return Order{}, fmt.Errorf("insert order: %w", describe(err))
	}
	return o, nil
}

// EachOrder calls fn for every order in ascending id order.
func (s *Store) EachOrder(ctx context.Context, fn func(Order) error) error {
	return eachChunk(ctx, s.r, "list orders", func(rows *sql.Rows) (Order, error) {
		var o Order
		err := rows.Scan(&o.ID, &o.PetID, &o.Quantity, &o.Status, &o.CreatedAt)
		return o, err
	}, func(o Order) int64 { return o.ID }, fn, "SELECT id, pet_id, quantity, status, created_at FROM orders WHERE id > ? ORDER BY id LIMIT ?")
}

// backupDatabase writes a consistent copy of the database at path to dest,
// which must not exist yet, while a server may be using it. It reads the
// source through a connection of its own that changes nothing: no journal
// mode, no migration, no prepared statement, so a database of any schema
// version (one not migrated yet, or left dirty) can be backed up as it is.
// It writes a temporary file beside dest, syncs it and links it into place,
// so dest is either absent or complete.
func backupDatabase(ctx context.Context, path, dest string, busy time.Duration) error {
	if err := checkDatabaseFile(path, false); err != nil {
		return err
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("backup: %s already exists; refusing to overwrite it", dest)
	}
	// No query_only: SQLite counts VACUUM INTO as a write, though it writes
	// only the new file.
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// The temporary file is created empty with mode 0600, and VACUUM INTO
	// writes into it (it takes an empty file): the copy is never readable
	// by others, not even while it is written.
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-*")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName)
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", tmpName); err != nil {
		return fmt.Errorf("backup: %w", describe(err))
	}
	f, err := os.OpenFile(tmpName, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := placeFile(tmpName, dest); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return syncDir(filepath.Dir(dest))
}

// linkFile is os.Link; a test replaces it to act as a filesystem without
// hard links.
var linkFile = os.Link

// placeFile gives the file tmp the name dest, failing if dest exists. A
// hard link never replaces dest. Filesystems without hard links (FAT on a
// USB disk, many network and FUSE mounts) refuse it, and then a rename
// that refuses to replace dest (RENAME_NOREPLACE) does it; where that flag
// is unknown too, a plain rename after checking that dest is still absent.
func placeFile(tmp, dest string) error {
	err := linkFile(tmp, dest)
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
		return err // done, or dest exists, or a failure a rename would share
	}
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dest, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		if err != nil {
			return &os.LinkError{Op: "rename", Old: tmp, New: dest, Err: err}
		}
		return nil
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("%s already exists; refusing to overwrite it", dest)
	}
	return os.Rename(tmp, dest)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// apiKey is a row of api_keys with its limits resolved from the plan table.
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
	seq         int64
}

const keyColumns = "id, hash, name, plan, rpm, rpd, env, created_at, revoked_at IS NOT NULL, banned_until, seq"

func scanKey(sc interface{ Scan(...any) error }) (apiKey, error) {
	var k apiKey
	var hash []byte
	var rpm, rpd sql.NullInt64
	var created string
	var banned sql.NullString
	if err := sc.Scan(&k.ID, &hash, &k.Name, &k.Plan, &rpm, &rpd, &k.Env, &created, &k.Revoked, &banned, &k.seq); err != nil {
		return k, err
	}
	copy(k.Hash[:], hash)
	k.RPM, k.RPD = rpm.Int64, rpd.Int64
	if p, ok := planByName(k.Plan); ok && k.Plan != "enterprise" {
		k.RPM, k.RPD = p.RPM, p.RPD
	}
	k.CreatedAt, _ = time.Parse(time.RFC3339, created)
	if banned.Valid {
		k.BannedUntil, _ = time.Parse(time.RFC3339, banned.String)
	}
	return k, nil
}

// nextSeq is the expression that stamps a changed api_keys row.
const nextSeq = "(SELECT coalesce(max(seq), 0) + 1 FROM api_keys)"

// CreateKey stores a new key by its hash. rpm and rpd are stored only for
// enterprise keys; the others take theirs from the plan table.
func (s *Store) CreateKey(ctx context.Context, hash [32]byte, name, planName string, rpm, rpd int64, env string) (apiKey, error) {
	var lim [2]any
	if planName == "enterprise" {
		lim = [2]any{rpm, rpd}
	}
	created := s.now().UTC().Format(time.RFC3339)
	row := s.w.QueryRowContext(ctx,
		"INSERT INTO api_keys (hash, name, plan, rpm, rpd, env, created_at, seq) VALUES (?, ?, ?, ?, ?, ?, ?, "+nextSeq+") RETURNING "+keyColumns,
		hash[:], name, planName, lim[0], lim[1], env, created)
	k, err := scanKey(row)
	if err != nil {
		return apiKey{}, fmt.Errorf("insert key: %w", describe(err))
	}
	return k, nil
}

// KeysSince returns the keys changed after seq (all of them for seq < 0),
// revoked ones included, in ascending id order.
func (s *Store) KeysSince(ctx context.Context, seq int64) ([]apiKey, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+keyColumns+" FROM api_keys WHERE seq > ? ORDER BY id", seq)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", describe(err))
	}
	defer rows.Close()
	var keys []apiKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list keys: %w", describe(err))
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys: %w", describe(err))
	}
	return keys, nil
}

// HasKeys reports whether any key, revoked or not, exists.
func (s *Store) HasKeys(ctx context.Context) (bool, error) {
	var n int
	if err := s.w.QueryRowContext(ctx, "SELECT count(*) FROM (SELECT 1 FROM api_keys LIMIT 1)").Scan(&n); err != nil {
		return false, fmt.Errorf("count keys: %w", describe(err))
	}
	return n > 0, nil
}

// RevokeKey revokes key id for good; an unknown id is errNotFound.
// Revoking a revoked key changes nothing and is no error.
func (s *Store) RevokeKey(ctx context.Context, id int64) error {
	return s.updateKey(ctx, id, "revoked_at = coalesce(revoked_at, ?)", s.now().UTC().Format(time.RFC3339))
}

// SetKeyBan bans key id until the given time, rounded up to the second;
// the zero time lifts a ban.
func (s *Store) SetKeyBan(ctx context.Context, id int64, until time.Time) error {
	var v any
	if !until.IsZero() {
		v = until.UTC().Format(time.RFC3339Nano)
	}
	return s.updateKey(ctx, id, "banned_until = ?", v)
}

func (s *Store) updateKey(ctx context.Context, id int64, set string, arg any) error {
	res, err := s.w.ExecContext(ctx, "UPDATE api_keys SET "+set+", seq = "+nextSeq+" WHERE id = ?", arg, id)
	if err != nil {
		return fmt.Errorf("update key %d: %w", id, describe(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update key %d: %w", id, err)
	} else if n == 0 {
		return errNotFound
	}
	return nil
}

// DayCounts returns the stored request counts of day (YYYY-MM-DD) by key id.
func (s *Store) DayCounts(ctx context.Context, day string) (map[int64]int64, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT key_id, count FROM usage WHERE day = ?", day)
	if err != nil {
		return nil, fmt.Errorf("read day counts: %w", describe(err))
	}
	defer rows.Close()
	counts := map[int64]int64{}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("read day counts: %w", describe(err))
		}
		counts[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read day counts: %w", describe(err))
	}
	return counts, nil
}

// AddDayCounts adds each delta to its key's stored count of its day, all in
// one transaction.
func (s *Store) AddDayCounts(ctx context.Context, deltas []dayDelta) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add day counts: %w", describe(err))
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage (key_id, day, count) VALUES (?, ?, ?)
		ON CONFLICT (key_id, day) DO UPDATE SET count = count + excluded.count`)
	if err != nil {
		return fmt.Errorf("add day counts: %w", describe(err))
	}
	defer stmt.Close()
	for _, d := range deltas {
		if _, err := stmt.ExecContext(ctx, d.KeyID, d.Day, d.N); err != nil {
			return fmt.Errorf("add day counts: %w", describe(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add day counts: %w", describe(err))
	}
	return nil
}
