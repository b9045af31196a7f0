package main

import (
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestBackupWhileWriting(t *testing.T) {
	db := filepath.Join(t.TempDir(), "petstore.db") // backup is SQLite's
	ts := startServerOn(t, db, createKey(t, db, "--plan", "business"))
	stop := make(chan struct{})
	var created sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	created.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := ts.do(t, "POST", "/v1/categories", ts.key, fmt.Sprintf(`{"name":"b%d"}`, i))
			if r.status != 201 {
				t.Errorf("create during backup: %d %s", r.status, r.body)
				return
			}
			mu.Lock()
			acked++
			mu.Unlock()
		}
	})
	// Let some writes land before and during the backup.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := acked
		mu.Unlock()
		if n >= 20 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	before := acked
	mu.Unlock()
	dest := filepath.Join(t.TempDir(), "copy.db")
	out, errOut, err := runCLI(t, nil, "backup", "--db", ts.db, dest)
	close(stop)
	created.Wait()
	if err != nil {
		t.Fatalf("backup: %v %s", err, errOut)
	}
	if !strings.Contains(out, dest) {
		t.Errorf("backup printed %q", out)
	}
	if st, err := os.Stat(dest); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v, mode %v, want 0600", err, st.Mode())
	}
	if _, _, err := runCLI(t, nil, "backup", "--db", ts.db, dest); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second backup to the same file: %v, want a refusal", err)
	}

	copySrv := startServerOn(t, dest, ts.key)
	list := decode[[]Category](t, copySrv.do(t, "GET", "/v1/categories", ts.key, ""))
	if len(list) < before {
		t.Errorf("backup holds %d categories, want at least the %d acknowledged before it started", len(list), before)
	}
	for i, c := range list {
		if c.Name != fmt.Sprintf("b%d", i) {
			t.Fatalf("backup row %d is %q: the copy is not a consistent prefix", i, c.Name)
		}
	}
}

// TestBackupTakesAnySchemaAsItIs checks that backup copies a database of an
// older schema version without migrating it or changing it (no WAL mode
// forced on a file in rollback-journal mode), and that the copy is 0600.
func TestBackupTakesAnySchemaAsItIs(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "old.db")
	conn, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	init1, err := migrationFiles.ReadFile("migrations/sqlite/0001_init.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(string(init1) + `; CREATE TABLE schema_migrations (version uint64, dirty bool); INSERT INTO schema_migrations VALUES (1, 0);`); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "copy.db")
	if _, _, err := runCLI(t, nil, "backup", "--db", db, dest); err != nil {
		t.Fatalf("backup of a version-1 database: %v", err)
	}
	if after, _ := os.ReadFile(db); !bytes.Equal(before, after) {
		t.Error("backup changed its source")
	}
	st, err := os.Stat(dest)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the copy: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	copied, err := sql.Open("sqlite", dest)
	if err != nil {
		t.Fatal(err)
	}
	defer copied.Close()
	var version int
	if err := copied.QueryRow("SELECT version FROM schema_migrations").Scan(&version); err != nil || version != 1 {
		t.Errorf("the copy's schema version: %d, %v; want 1, as it was", version, err)
	}
	if _, _, err := runCLI(t, nil, "keys", "list", "--db", "file:"+db); err == nil || !strings.Contains(err.Error(), "URI") {
		t.Errorf("a --db starting with file: was not refused: %v", err)
	}
}

// TestBackupWithoutHardLinks backs up as onto a FAT disk or many network
// mounts, where link(2) fails with EPERM: the copy is put in place by a
// rename instead, complete and 0600, and a DEST that appears while the
// backup runs is still never replaced.
func TestBackupWithoutHardLinks(t *testing.T) {
	db := filepath.Join(t.TempDir(), "p.db")
	createKey(t, db, "--plan", "pro")
	dir := t.TempDir()
	t.Cleanup(func() { sqliteLinkFile = os.Link })
	sqliteLinkFile = func(old, new string) error { return &os.LinkError{Op: "link", Old: old, New: new, Err: syscall.EPERM} }

	dest := filepath.Join(dir, "copy.db")
	if _, errOut, err := runCLI(t, nil, "backup", "--db", db, dest); err != nil {
		t.Fatalf("backup where hard links fail: %v\n%s", err, errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the backup directory holds %d entries, want the copy only", len(entries))
	}
	if st, err := os.Stat(dest); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the copy: %v; want mode 0600", err)
	}
	copied := testStore(t, dest, false)
	var keys int
	if err := copied.r.QueryRow("SELECT count(*) FROM api_keys").Scan(&keys); err != nil || keys != 1 {
		t.Errorf("the copy holds %d keys (%v), want 1", keys, err)
	}

	other := filepath.Join(dir, "other.db")
	sqliteLinkFile = func(old, new string) error {
		os.WriteFile(new, []byte("not a backup"), 0o600) // someone else's file, just in time
		return &os.LinkError{Op: "link", Old: old, New: new, Err: syscall.EPERM}
	}
	if _, _, err := runCLI(t, nil, "backup", "--db", db, other); err == nil {
		t.Error("backup replaced a DEST that appeared while it ran")
	}
	if b, _ := os.ReadFile(other); string(b) != "not a backup" {
		t.Errorf("the DEST that appeared holds %.40q", b)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}
}
