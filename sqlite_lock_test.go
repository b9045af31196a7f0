package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// secondServe runs another serve on db through run, as a second process
// would, and returns its exit code and its one line. It fails the test when
// serve has not returned within 5 s: a second serve must not start.
func secondServe(t *testing.T, db string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	err := run(ctx, []string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "off"}, envFrom(nil), &stderr, &stderr)
	if ctx.Err() != nil {
		t.Fatalf("a second serve on %s ran until it was stopped (%v); it printed:\n%s", db, err, stderr.String())
	}
	if strings.Contains(stderr.String(), "listening") {
		t.Errorf("the second serve listened before it failed:\n%s", stderr.String())
	}
	var msg bytes.Buffer
	return exitCode(err, &msg), msg.String()
}

// TestSecondServeOnOneFileExits: while a server serves a SQLite file, a
// second serve on it exits 1 at once, naming the lock file and the first
// one's pid, and keys, backup and migrate still work beside the server.
// Once the server stops, a new one starts, also over a lock file that a
// dead process left behind with its pid in it.
func TestSecondServeOnOneFileExits(t *testing.T) {
	db := filepath.Join(t.TempDir(), "pets.db")
	key := createKey(t, db, "--plan", "business")
	ts := startServerOn(t, db, key)
	pid := strconv.Itoa(os.Getpid())
	wantHeld := func(code int, line string) {
		t.Helper()
		if code != 1 || strings.Count(line, "\n") != 1 || !strings.Contains(line, "pid "+pid) || !strings.Contains(line, db+".lock") {
			t.Errorf("second serve: exit %d, %q; want exit 1 and one line naming %s.lock and pid %s", code, line, db, pid)
		}
	}
	wantHeld(secondServe(t, db))

	if out, errOut, err := runCLI(t, nil, "keys", "list", "--db", db); err != nil || !strings.Contains(out, "business") {
		t.Errorf("keys list beside the server: %v %s\n%s", err, errOut, out)
	}
	if _, errOut, err := runCLI(t, nil, "backup", "--db", db, filepath.Join(t.TempDir(), "copy.db")); err != nil {
		t.Errorf("backup beside the server: %v %s", err, errOut)
	}
	if _, errOut, err := runCLI(t, nil, "migrate", "--db", db); err != nil {
		t.Errorf("migrate beside the server: %v %s", err, errOut)
	}
	// None of them took or dropped the server's lock.
	wantHeld(secondServe(t, db))
	if got, err := os.ReadFile(db + ".lock"); err != nil || string(got) != pid+"\n" {
		t.Errorf("lock file: %q, %v; want the server's pid %s", got, err, pid)
	}
	if r := ts.do(t, "GET", "/v1/categories", key, ""); r.status != 200 {
		t.Errorf("the first server after the second's attempts: %d", r.status)
	}

	ts.stop()
	// A pid that no process holds the lock for: a crashed server's.
	if err := os.WriteFile(db+".lock", []byte("4194303\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	again := startServerOn(t, db, key)
	if r := again.do(t, "GET", "/v1/categories", key, ""); r.status != 200 {
		t.Errorf("the server started after the first stopped: %d", r.status)
	}
	if got, _ := os.ReadFile(db + ".lock"); string(got) != pid+"\n" {
		t.Errorf("lock file after a restart over a stale one: %q, want %s", got, pid)
	}
}

// TestCopyAndTheServeLock: copy --from a served SQLite file, or --to one,
// exits 1 naming the server's pid and creates nothing; a copy into a SQLite
// file holds its lock while it runs, so a serve starting meanwhile would
// fail, and lets it go at its end.
func TestCopyAndTheServeLock(t *testing.T) {
	dir := t.TempDir()
	served := filepath.Join(dir, "served.db")
	key := createKey(t, served, "--plan", "business")
	ts := startServerOn(t, served, key)
	ts.do(t, "POST", "/v1/categories", key, `{"name":"Cats"}`)
	pid := strconv.Itoa(os.Getpid())
	target := filepath.Join(dir, "target.db")
	_, _, err := runCLI(t, nil, "copy", "--from", served, "--to", target)
	var msg bytes.Buffer
	if code := exitCode(err, &msg); code != 1 || !strings.Contains(msg.String(), "pid "+pid) || !strings.Contains(msg.String(), "--from") {
		t.Errorf("copy --from a served file: exit %d, %q; want 1 naming --from and pid %s", code, msg.String(), pid)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("copy --from a served file left %s behind: %v", target, err)
	}

	other := filepath.Join(dir, "other.db")
	createKey(t, other, "--plan", "free")
	_, _, err = runCLI(t, nil, "copy", "--from", other, "--to", served)
	msg.Reset()
	if code := exitCode(err, &msg); code != 1 || !strings.Contains(msg.String(), "pid "+pid) || !strings.Contains(msg.String(), "--to") {
		t.Errorf("copy --to a served file: exit %d, %q; want 1 naming --to and pid %s", code, msg.String(), pid)
	}
	ts.stop()

	// The copy's first line of output comes while it still runs: try the
	// target's lock then.
	var during error
	tried := false
	out := writerFunc(func(p []byte) (int, error) {
		if !tried {
			tried = true
			release, err := sqliteLockServing(context.Background(), target, 0)
			if err == nil {
				release()
			}
			during = err
		}
		return len(p), nil
	})
	var errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, []string{"copy", "--from", served, "--to", target}, envFrom(nil), out, &errOut); err != nil {
		t.Fatalf("copy: %v %s", err, errOut.String())
	}
	var he *sqliteHeldError
	if !tried || !errors.As(during, &he) || he.pid != os.Getpid() {
		t.Errorf("the target's lock while the copy ran: tried %v, %v; want it held by pid %s", tried, during, pid)
	}
	release, err := sqliteLockServing(context.Background(), target, 0)
	if err != nil {
		t.Fatalf("the target's lock after the copy: %v", err)
	}
	release()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestLockServingWaits: with a wait, sqliteLockServing takes the lock once its
// holder lets go within the wait, and returns the holder's pid when the
// wait ends first; with none, it fails at once. Two names of one file
// (a symbolic link) share one lock.
func TestLockServingWaits(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "w.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(db, link); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	release, err := sqliteLockServing(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	var he *sqliteHeldError
	if _, err := sqliteLockServing(ctx, link, 0); !errors.As(err, &he) || he.pid != os.Getpid() || he.lock != db+".lock" {
		t.Errorf("through a symbolic link: %v, want held by pid %d at %s.lock", err, os.Getpid(), db)
	}
	start := time.Now()
	if _, err := sqliteLockServing(ctx, db, 150*time.Millisecond); !errors.As(err, &he) || time.Since(start) < 150*time.Millisecond {
		t.Errorf("a wait of 150 ms: %v after %v, want held after the wait", err, time.Since(start))
	}
	time.AfterFunc(100*time.Millisecond, release)
	again, err := sqliteLockServing(ctx, db, 10*time.Second)
	if err != nil {
		t.Fatalf("a wait for a holder that lets go: %v", err)
	}
	again()
}

// TestLockFileOnReadOnlyDisk: a database on a read-only filesystem whose
// lock file does not exist yet is refused with one line naming the lock
// file.
func TestLockFileOnReadOnlyDisk(t *testing.T) {
	dir := mountSmallDisk(t, "1m")
	db := filepath.Join(dir, "ro.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v %s", err, out)
	}
	_, err := sqliteLockServing(context.Background(), db, 0)
	if err == nil || !strings.Contains(err.Error(), db+".lock") || !strings.Contains(err.Error(), "read-only file system") {
		t.Errorf("lock on a read-only disk: %v", err)
	}
}
