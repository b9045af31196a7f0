// sqlite_migrate.go owns SQLite's schema migrations: applied by one
// process at a time under a lock on the database's directory.

package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"golang.org/x/sys/unix"
)

// sqliteMigrateDatabase applies the embedded migrations that the database lacks.
// It fails without changing anything when the database is dirty or ahead of
// the migrations this binary embeds.
func sqliteMigrateDatabase(path string, busy time.Duration) error {
	unlock, err := sqliteLockDirectory(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer unlock()
	// Migrations run with foreign keys off, as SQLite's way of changing a
	// table's definition asks (sqlite.org/lang_altertable.html, "other kinds
	// of table schema changes"): 0007 drops and rebuilds tables that others
	// reference. Each migration is one transaction, and copies ids as they
	// are. So nothing checks the keys of what a migration writes: one that
	// writes rows must keep them whole itself.
	d := strings.Replace(sqliteDSN(path, false, busy), "foreign_keys(ON)", "foreign_keys(OFF)", 1)
	if !strings.Contains(d, "foreign_keys(OFF)") {
		return fmt.Errorf("migrate: the connection string no longer turns foreign keys on: %s", d)
	}
	db, err := sql.Open("sqlite", d)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	db.SetMaxOpenConns(1)
	return migrateUp(db, "migrations/sqlite", "sqlite", func(db *sql.DB) (database.Driver, error) {
		return migratesqlite.WithInstance(db, &migratesqlite.Config{})
	}, path, sqliteDescribe)
}

// sqliteLockDirectory holds an exclusive lock (flock) on dir until unlock is
// called, waiting for it if another process holds it. golang-migrate's
// SQLite driver locks within one process only: a server and a "keys"
// command starting together on a new database both ran the first
// migration, and the loser left the database marked dirty. The lock is on
// the directory, not the database file: closing a second descriptor of that
// file would drop SQLite's own (POSIX) locks on it.
func sqliteLockDirectory(dir string) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock %s for migrating: %w", dir, sqliteUnwrapPathError(err))
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
