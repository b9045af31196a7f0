// sqlite.go owns the SQLite store: checking the file, opening it with its
// pragmas (one writer connection, a read pool), SQLite's errors, and the
// chunked reads the lists share. Its queries are in sqlite_catalog.go and
// sqlite_keys.go, its migrations in sqlite_migrate.go.

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteStore is the Store on one SQLite file: one writer connection, a
// small read pool.
type sqliteStore struct {
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
	group *groupCommitter[*sqliteBatchTx]

	insertCategory, insertPet, insertOrder *sql.Stmt
	categoryNamed                          *sql.Stmt // the name that holds fold or name_cmp, on a conflict
	storeIdem, hasIdem                     *sql.Stmt // sqlite_idempotency.go
	// lookupIdem reads on r: prepared once, not parsed on every keyed POST.
	lookupIdem *sql.Stmt
}

// sqliteStore must stay a Store: what the handlers, the CLI and the upkeep
// use of either store.
var _ Store = (*sqliteStore)(nil)

// sqliteHeader starts every SQLite 3 database file.
const sqliteHeader = "SQLite format 3\x00"

// dsn returns the connection string for path. synchronous=FULL makes every
// commit fsync the WAL before it returns, so an acknowledged write survives a
// killed process and a power loss alike.
func sqliteDSN(path string, readOnly bool, busy time.Duration) string {
	q := "?_pragma=busy_timeout(" + strconv.FormatInt(busy.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=foreign_keys(ON)&_pragma=synchronous(FULL)&_txlock=immediate"
	if readOnly {
		q += "&_pragma=query_only(ON)"
	}
	return path + q
}

// sqliteCheckDatabaseFile fails with a clear message when path cannot hold the
// database: a missing directory, a file that is not SQLite (never
// overwritten), or a file or directory this process may not write. When
// create is set, a missing file is created with mode 0600. The command
// line has refused the paths SQLite would read otherwise (checkDBPath).
func sqliteCheckDatabaseFile(path string, create bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return fmt.Errorf("database %s does not exist", path)
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return sqliteCheckDatabaseFile(path, false) // another process created it just now
		}
		if err != nil {
			return fmt.Errorf("cannot create database %s: %w", path, sqliteUnwrapPathError(err))
		}
		return f.Close()
	}
	if err != nil {
		return fmt.Errorf("cannot open database %s for writing: %w", path, sqliteUnwrapPathError(err))
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
		return fmt.Errorf("cannot read database %s: %w", path, sqliteUnwrapPathError(err))
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

func sqliteUnwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// sqliteWriterCache caps the writer connection's page cache at 512 KiB instead of
// SQLite's default 2,000 KiB (the readers keep theirs). The writer mostly
// appends: a batch of creates touches the right edge of each table and the
// pages of its indexes where the new names fall, a few dozen pages, and a
// page it no longer holds is a pread from the kernel's cache. The cap
// lowers the server's peak RSS and costs no creates a second
// (BENCHMARKS.md has the figures).
const sqliteWriterCache = "&_pragma=cache_size(-512)"

// openSQLite opens the database at path. With migrateUp it creates a missing
// file and applies pending migrations, refusing a database whose schema is
// newer than this binary knows; without, the file must exist and its schema
// is taken as it is.
func openSQLite(ctx context.Context, path string, migrateUp bool, now func() time.Time, busy time.Duration) (*sqliteStore, error) {
	if err := sqliteCheckDatabaseFile(path, migrateUp); err != nil {
		return nil, err
	}
	if migrateUp {
		if err := sqliteMigrateDatabase(path, busy); err != nil {
			return nil, err
		}
	}
	w, err := sql.Open("sqlite", sqliteDSN(path, false, busy)+sqliteWriterCache)
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
		return nil, fmt.Errorf("open database %s: %w", path, sqliteDescribe(err))
	}
	if mode != "wal" {
		w.Close()
		return nil, fmt.Errorf("open database %s: journal_mode is %q, want wal", path, mode)
	}
	r, err := sql.Open("sqlite", sqliteDSN(path, true, busy))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	r.SetConnMaxIdleTime(0)
	s := &sqliteStore{path: path, w: w, r: r, now: now, group: newGroupCommitter(sqliteCommit(w))}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&s.insertCategory, "INSERT INTO categories (name, fold, name_cmp, description) VALUES (?, ?, ?, ?)"},
		{&s.insertPet, "INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)"},
		{&s.insertOrder, "INSERT INTO orders (pet_id, quantity, status, created_at) VALUES (?, ?, ?, ?)"},
		{&s.categoryNamed, "SELECT name FROM categories WHERE fold = ?1 OR name_cmp = ?2 ORDER BY id LIMIT 1"},
		{&s.storeIdem, sqliteStoreIdem},
		{&s.hasIdem, sqliteHasIdem},
	} {
		if *p.stmt, err = w.PrepareContext(ctx, p.sql); err != nil {
			s.Close()
			return nil, fmt.Errorf("prepare: %w", sqliteDescribe(err))
		}
	}
	if s.lookupIdem, err = r.PrepareContext(ctx, sqliteLookupIdem); err != nil {
		s.Close()
		return nil, fmt.Errorf("prepare: %w", sqliteDescribe(err))
	}
	if migrateUp {
		if err := s.fillNameCmp(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Close closes both pools; SQLite checkpoints the WAL into the main file
// when the last connection to it closes.
func (s *sqliteStore) Close() error {
	s.group.close()
	return errors.Join(s.r.Close(), s.w.Close())
}

// Checkpoint copies the WAL into the database file and truncates it, so
// that the file alone is a complete copy.
func (s *sqliteStore) Checkpoint(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("checkpoint: %w", sqliteDescribe(err))
	}
	return nil
}

// Ready reports whether the database answers a query.
func (s *sqliteStore) Ready(ctx context.Context) error {
	var n int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n); err != nil {
		return fmt.Errorf("ready: %w", sqliteDescribe(err))
	}
	return nil
}

// Stats returns counts of the store's work since it was opened.
func (s *sqliteStore) Stats() storeStats {
	batches, writes := s.group.stats()
	return storeStats{Batches: batches, Writes: writes, CategoryListReads: s.categoryListReads.Load()}
}

// Replication has nothing to show: SQLite is one file on one machine.
func (s *sqliteStore) Replication() replication { return replication{} }

// ReadPosition: SQLite has one process, which reads its own writes.
func (s *sqliteStore) ReadPosition(context.Context) (uint64, bool, error) { return 0, false, nil }

// sqliteDescribe maps SQLite's transient and storage errors (busy, locked, full
// disk, read-only file, I/O) to errUnavailable, keeping the cause.
func sqliteDescribe(err error) error {
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

// sqliteIsUniqueViolation reports whether err is a UNIQUE constraint failure.
func sqliteIsUniqueViolation(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// isSQLiteError reports whether err came from SQLite.
func isSQLiteError(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se)
}

// sqliteIsForeignKeyViolation reports whether err is a FOREIGN KEY constraint failure.
func sqliteIsForeignKeyViolation(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// sqliteEachChunk calls fn with every row of query, in ascending id order, reading
// listChunk rows at a time (inChunks): query's last two parameters are the
// id to start after and the number of rows, and idOf gives a row's id. Each
// chunk is read whole and its connection given back to the read pool before
// fn sees any of it, so that a slow client, to whom fn writes, holds none of
// the pool's four connections (four such clients would otherwise stall
// every read, /readyz included, for up to the write timeout).
func sqliteEachChunk[T any](ctx context.Context, db *sql.DB, what string, scan func(*sql.Rows) (T, error), idOf func(T) int64, fn func(T) error, query string, args ...any) error {
	chunk := make([]T, 0, listChunk)
	return inChunks(func(after int64) ([]T, error) {
		chunk = chunk[:0]
		err := sqliteEach(ctx, db, what, scan, func(v T) error { chunk = append(chunk, v); return nil },
			query, append(args, after, listChunk)...)
		return chunk, err
	}, idOf, fn)
}

// sqliteEach runs query on the read pool and calls fn with every row that scan
// reads, stopping at fn's first error. what names the query in errors.
func sqliteEach[T any](ctx context.Context, db *sql.DB, what string, scan func(*sql.Rows) (T, error), fn func(T) error, query string, args ...any) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, sqliteDescribe(err))
	}
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return fmt.Errorf("%s: %w", what, sqliteDescribe(err))
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, sqliteDescribe(err))
	}
	return nil
}
