// sqlite_lock.go owns the serve lock: one process serves a SQLite file at a
// time, by an exclusive flock on <db>.lock beside the database that it holds
// for its life. (Migrations take another lock, sqlite_migrate.go's.)

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// sqliteLockRetry is how often sqliteLockServing tries again while it waits.
const sqliteLockRetry = 50 * time.Millisecond

// sqliteHeldError is the error of a database whose serve lock another process
// (or another open of it in this one) holds.
type sqliteHeldError struct {
	db, lock string
	pid      int // 0 when the holder had not written its pid yet
}

func (e *sqliteHeldError) Error() string {
	holder := "another process"
	if e.pid > 0 {
		holder = "pid " + strconv.Itoa(e.pid)
	}
	return fmt.Sprintf("database %s is in use by %s, which holds %s: one process at a time serves a SQLite file (or copies from or to it)", e.db, holder, e.lock)
}

// sqliteHoldDatabase takes the serve lock of a SQLite database (sqliteLockServing) after
// checking its file (sqliteCheckDatabaseFile, which creates a missing one when
// create is set), so that a path that cannot be a database is refused as
// before, with no lock file made beside it. A PostgreSQL database has no
// lock file: several instances serve one.
func sqliteHoldDatabase(ctx context.Context, db string, create bool, wait time.Duration) (release func(), err error) {
	if isPostgresURL(db) {
		return func() {}, nil
	}
	if err := sqliteCheckDatabaseFile(db, create); err != nil {
		return nil, err
	}
	return sqliteLockServing(ctx, db, wait)
}

// sqliteActivatedLockSlack is how much longer than --shutdown-timeout a serve
// started by socket activation waits for the previous one's lock: the
// previous one's drain, then its last checkpoint and close.
const sqliteActivatedLockSlack = 5 * time.Second

// sqliteHoldServeLock is sqliteHoldDatabase for serve. Started by socket activation
// (activated), serve is the next process of a restart, and the previous one
// may still be draining: it waits for the lock up to drain (the
// --shutdown-timeout) plus sqliteActivatedLockSlack, calling waiting once with
// the holder's pid when it has to wait, then exits naming the holder.
// Meanwhile the passed sockets, open but not yet accepted on, keep new
// connections in their queue. Started otherwise, serve does not wait: a
// second server on one file is a mistake to report at once.
func sqliteHoldServeLock(ctx context.Context, db string, activated bool, drain time.Duration, waiting func(pid int, wait time.Duration)) (release func(), err error) {
	release, err = sqliteHoldDatabase(ctx, db, true, 0)
	var he *sqliteHeldError
	if !activated || !errors.As(err, &he) {
		return release, err
	}
	wait := drain + sqliteActivatedLockSlack
	waiting(he.pid, wait)
	release, err = sqliteLockServing(ctx, db, wait)
	switch {
	case errors.As(err, &he) && ctx.Err() != nil:
		return nil, errSQLiteStoppedWaiting
	case errors.As(err, &he):
		return nil, fmt.Errorf("started by socket activation, waited %s (--shutdown-timeout plus %s) for the previous serve to stop: %w", fmtDuration(wait), fmtDuration(sqliteActivatedLockSlack), err)
	}
	return release, err
}

// errSQLiteStoppedWaiting: serve was told to stop (SIGTERM) while it waited for
// the previous serve's lock; it ends without having served, which is no
// failure.
var errSQLiteStoppedWaiting = errors.New("stopped while waiting for the previous serve to let go of the database")

// sqliteLockFile returns the path of db's lock file: beside the file that SQLite
// opens, so that a symbolic link and its target share one lock.
func sqliteLockFile(db string) string {
	if real, err := filepath.EvalSymlinks(db); err == nil {
		db = real
	}
	return db + ".lock"
}

// sqliteLockServing takes the serve lock of the SQLite database at db and writes
// this process's pid into the lock file. While another holds it, it tries
// again until wait has passed (0: not at all) or ctx ends, then returns a
// *sqliteHeldError naming the holder's pid. release lets it go; so does the
// kernel when the process ends, however it ends, so a lock file left behind
// by a dead process stops nothing. The lock is an flock, which belongs to
// the open file description: two opens in one process exclude each other,
// as two processes do. The file is never removed: a process that opened it
// before the removal would lock a file that the next one no longer sees.
func sqliteLockServing(ctx context.Context, db string, wait time.Duration) (release func(), err error) {
	path := sqliteLockFile(db)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		err = sqliteUnwrapPathError(err)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cannot create lock file %s: directory %s does not exist", path, filepath.Dir(path))
		}
		return nil, fmt.Errorf("cannot create lock file %s beside the database (serve keeps it there; the directory must be writable): %w", path, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err == unix.EINTR {
			continue
		}
		if err != unix.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			defer f.Close()
			return nil, &sqliteHeldError{db: db, lock: path, pid: sqliteHolderPid(f)}
		}
		select {
		case <-ctx.Done():
			defer f.Close()
			return nil, &sqliteHeldError{db: db, lock: path, pid: sqliteHolderPid(f)}
		case <-time.After(min(left, sqliteLockRetry)):
		}
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write lock file %s: %w", path, sqliteUnwrapPathError(err))
	}
	if _, err := f.WriteAt(pid, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write lock file %s: %w", path, sqliteUnwrapPathError(err))
	}
	return func() { f.Close() }, nil // closing it releases the lock
}

// sqliteHolderPid reads the pid that the lock's holder wrote into f, or 0. The
// holder writes it just after it takes the lock: an empty file is read
// again for a moment.
func sqliteHolderPid(f *os.File) int {
	for range 10 {
		b, err := io.ReadAll(io.NewSectionReader(f, 0, 32))
		if err != nil {
			return 0
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0
}
