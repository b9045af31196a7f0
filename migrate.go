// migrate.go owns what both stores' migrations share: the embedded
// golang-migrate files and the checks around applying them. SQLite's are
// applied in sqlite_migrate.go, PostgreSQL's in postgres.go.

package main

import (
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// migrationFiles holds each store's migrations: migrations/sqlite and
// migrations/postgres, numbered alike, so that a schema version means the
// same tables and columns in both.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrationFiles embed.FS

// upToDate reports whether db is clean at schema version latest.
func upToDate(db *sql.DB, latest uint) bool {
	var version uint
	var dirty bool
	err := db.QueryRow("SELECT version, dirty FROM schema_migrations LIMIT 1").Scan(&version, &dirty)
	return err == nil && version == latest && !dirty
}

// migrateUp applies the migrations in dir that db lacks, through the
// golang-migrate driver (registered as name) that newDriver makes of db,
// and closes db. where names the database in errors; describe maps its
// driver's errors.
func migrateUp(db *sql.DB, dir, name string, newDriver func(*sql.DB) (database.Driver, error), where string, describe func(error) error) error {
	latest, err := latestMigration(dir)
	if err != nil {
		db.Close()
		return err
	}
	if upToDate(db, latest) {
		return db.Close() // the usual start: spare golang-migrate's setup
	}
	src, err := iofs.New(migrationFiles, dir)
	if err != nil {
		db.Close()
		return fmt.Errorf("read embedded migrations: %w", err)
	}
	drv, err := newDriver(db)
	if err != nil {
		db.Close()
		return fmt.Errorf("open database %s: %w", where, describe(err))
	}
	m, err := migrate.NewWithInstance("iofs", src, name, drv)
	if err != nil {
		db.Close()
		return fmt.Errorf("prepare migrations: %w", err)
	}
	defer m.Close() // closes db too
	return applyMigrations(m, where, latest, describe)
}

// applyMigrations brings m's database to schema version latest. It refuses
// a database ahead of latest, and one that a migration left dirty, without
// changing anything. Only m.Up decides on dirty, under the migration lock:
// outside it, a database another instance is migrating right now looks
// dirty too.
// where names the database in errors; describe maps its driver's errors.
func applyMigrations(m *migrate.Migrate, where string, latest uint, describe func(error) error) error {
	version, dirty, err := m.Version()
	if err != nil && !errors.Is(err, migrate.ErrNilVersion) {
		return fmt.Errorf("read schema version: %w", describe(err))
	}
	switch {
	case version > latest:
		return fmt.Errorf("database %s has schema version %d, newer than this petstore knows (%d); run a newer petstore", where, version, latest)
	case version == latest && !dirty:
		return nil
	}
	err = m.Up()
	var de migrate.ErrDirty
	switch {
	case err == nil, errors.Is(err, migrate.ErrNoChange):
		return nil
	case errors.As(err, &de):
		return fmt.Errorf("database %s: a migration to schema version %d failed half-way; restore a backup", where, de.Version)
	}
	// golang-migrate's error quotes the whole migration; one line is enough.
	msg, _, _ := strings.Cut(describe(err).Error(), "\n")
	return fmt.Errorf("migrate database %s: %s", where, msg)
}

// latestMigration returns the highest version among the embedded
// migrations in dir.
func latestMigration(dir string) (uint, error) {
	src, err := iofs.New(migrationFiles, dir)
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
