// sqlite_backup.go owns "petstore backup": a consistent copy of the live SQLite
// database, written beside its destination and put in place whole.

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// sqliteBackup writes a consistent copy of the database at path to dest,
// which must not exist yet, while a server may be using it. It reads the
// source through a connection of its own that changes nothing: no journal
// mode, no migration, no prepared statement, so a database of any schema
// version (one not migrated yet, or left dirty) can be backed up as it is.
// It writes a temporary file beside dest, syncs it and links it into place,
// so dest is either absent or complete.
func sqliteBackup(ctx context.Context, path, dest string, busy time.Duration) error {
	if err := sqliteCheckDatabaseFile(path, false); err != nil {
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
		return fmt.Errorf("backup: %w", sqliteDescribe(err))
	}
	f, err := os.OpenFile(tmpName, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := sqlitePlaceFile(tmpName, dest); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return sqliteSyncDir(filepath.Dir(dest))
}

// sqliteLinkFile is os.Link; a test replaces it to act as a filesystem without
// hard links.
var sqliteLinkFile = os.Link

// sqlitePlaceFile gives the file tmp the name dest, failing if dest exists. A
// hard link never replaces dest. Filesystems without hard links (FAT on a
// USB disk, many network and FUSE mounts) refuse it, and then a rename
// that refuses to replace dest (RENAME_NOREPLACE) does it; where that flag
// is unknown too, a plain rename after checking that dest is still absent.
func sqlitePlaceFile(tmp, dest string) error {
	err := sqliteLinkFile(tmp, dest)
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

func sqliteSyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
