// sqlite_migrate.go owns SQLite's schema migrations: the embedded
// golang-migrate files, applied by one process at a time under a lock on
// the database's directory.

package main

import (
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"golang.org/x/sys/unix"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

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
