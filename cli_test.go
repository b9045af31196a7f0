package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

func TestKeysCommands(t *testing.T) {
	db := testDB(t)
	out, errOut, err := runCLI(t, nil, "keys", "create", "--db", db, "--plan", "pro", "--name", "mobile app")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^ps_live_[0-9A-Za-z]{40}\n$`).MatchString(out) {
		t.Errorf("keys create stdout = %q, want the key alone on one line", out)
	}
	if !strings.Contains(errOut, "pro") || strings.Contains(errOut, strings.TrimSpace(out)) {
		t.Errorf("keys create stderr = %q: want details, never the key", errOut)
	}
	if !strings.Contains(errOut, "300/min, 10000/day") {
		t.Errorf("keys create stderr = %q: want the pro plan's limits, 300/min, 10000/day", errOut)
	}

	out, _, err = runCLI(t, nil, "keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "5000", "--rpd", "900000", "--env", "staging", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var created map[string]any
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("keys create --json: %v: %q", err, out)
	}
	for _, f := range []string{"id", "key", "name", "plan", "rpm", "rpd", "env", "createdAt"} {
		if _, ok := created[f]; !ok {
			t.Errorf("keys create --json lacks %q: %s", f, out)
		}
	}
	if created["plan"] != "enterprise" || created["rpm"] != 5000.0 || created["rpd"] != 900000.0 || created["env"] != "staging" ||
		!strings.HasPrefix(created["key"].(string), "ps_test_") {
		t.Errorf("keys create --json = %s", out)
	}

	if out, _, err = runCLI(t, nil, "keys", "revoke", "1", "--db", db); err != nil || !strings.Contains(out, "revoked") {
		t.Errorf("keys revoke: %v %q", err, out)
	}
	out, _, err = runCLI(t, nil, "keys", "list", "--json", "--db", db)
	if err != nil {
		t.Fatal(err)
	}
	var listed []map[string]any
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 {
		t.Fatalf("keys list --json: %s", out)
	}
	if _, ok := listed[0]["key"]; ok || strings.Contains(out, "ps_") {
		t.Errorf("keys list shows a secret: %s", out)
	}
	if listed[0]["revoked"] != true || listed[1]["revoked"] != false || listed[0]["rpm"] != 300.0 || listed[0]["name"] != "mobile app" {
		t.Errorf("keys list --json = %s", out)
	}
	if _, ok := listed[1]["bannedUntil"]; !ok {
		t.Errorf("keys list --json lacks bannedUntil: %s", out)
	}

	out, _, err = runCLI(t, nil, "keys", "list", "--db", db)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(lines[1], "revoked") || !strings.Contains(lines[2], "5000") ||
		!regexp.MustCompile(`\bpro\s+300\s+10000\s`).MatchString(lines[1]) {
		t.Errorf("keys list = %q; want the pro key with its plan's limits, 300 and 10000", out)
	}
	if out, _, err = runCLI(t, nil, "keys", "unban", "2", "--db", db); err != nil || !strings.Contains(out, "unbanned") {
		t.Errorf("keys unban: %v %q", err, out)
	}
	if _, _, err := runCLI(t, nil, "keys", "revoke", "99", "--db", db); err == nil || exitCode(err, &bytes.Buffer{}) != 1 {
		t.Errorf("revoke of an unknown id: %v, want a runtime failure", err)
	}
}

func TestUsageErrors(t *testing.T) {
	db := filepath.Join(t.TempDir(), "u.db")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // in the one-line message
	}{
		{"no command", nil, nil, "no command"},
		{"unknown command", []string{"frobnicate"}, nil, "unknown command"},
		{"unknown flag", []string{"serve", "--colour", "red"}, nil, "colour"},
		{"bad env", []string{"serve", "--env", "dev"}, nil, "--env"},
		{"bad addr", []string{"serve", "--addr", "nowhere"}, nil, "--addr"},
		{"bad public url", []string{"serve", "--public-url", "ftp://x"}, nil, "--public-url"},
		{"public url with a query", []string{"serve", "--public-url", "http://x/v1?a=1"}, nil, "--public-url"},
		{"bad env variable", []string{"serve"}, map[string]string{"PETSTORE_TRUST_PROXY": "maybe"}, "PETSTORE_TRUST_PROXY"},
		{"extra argument", []string{"migrate", "now"}, nil, "unexpected argument"},
		{"keys without subcommand", []string{"keys"}, nil, "subcommand"},
		{"no plan", []string{"keys", "create", "--db", db}, nil, "--plan"},
		{"unknown plan", []string{"keys", "create", "--db", db, "--plan", "gold"}, nil, "gold"},
		{"enterprise without limits", []string{"keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "5"}, nil, "--rpd"},
		{"limits on free", []string{"keys", "create", "--db", db, "--plan", "free", "--rpm", "5"}, nil, "enterprise"},
		{"zero limits", []string{"keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "0", "--rpd", "5"}, nil, "positive"},
		{"bad key env", []string{"keys", "create", "--db", db, "--plan", "free", "--env", "qa"}, nil, "--env"},
		{"revoke without id", []string{"keys", "revoke", "--db", db}, nil, "argument"},
		{"revoke bad id", []string{"keys", "revoke", "abc", "--db", db}, nil, "positive integer"},
		{"backup without dest", []string{"backup", "--db", db}, nil, "argument"},
		{"empty backup dest", []string{"backup", "--db", db, ""}, nil, "DEST"},
		{"port out of range", []string{"serve", "--db", db, "--addr", "127.0.0.1:99999"}, nil, "--addr"},
		{"admin port out of range", []string{"serve", "--db", db, "--admin-addr", "127.0.0.1:99999"}, nil, "--admin-addr"},
		{"public url ending in #", []string{"serve", "--db", db, "--public-url", "http://x/v1#"}, nil, "--public-url"},
		{"public url without a host", []string{"serve", "--db", db, "--public-url", "http://:8080/v1"}, nil, "--public-url"},
		{"anon rpm over the limiter's cap", []string{"serve", "--db", db, "--anon-rpm", "1000000000"}, nil, "--anon-rpm"},
		{"busy timeout under 1ms", []string{"serve", "--db", db, "--busy-timeout", "500us"}, nil, "--busy-timeout"},
		{"zero read timeout", []string{"serve", "--db", db, "--read-timeout", "0s"}, nil, "--read-timeout"},
		{"rpm over the limiter's cap", []string{"keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "1000000000", "--rpd", "5"}, nil, "--rpm"},
		{"key name with a newline", []string{"keys", "create", "--db", db, "--plan", "free", "--name", "a\nid 9 ps_live_x"}, nil, "--name"},
		{"empty db path", []string{"keys", "list", "--db", ""}, nil, "--db"},
		{"db path read as a URI", []string{"migrate", "--db", "file:x.db"}, nil, "URI"},
		{"db path with a query", []string{"keys", "list", "--db", "x.db?mode=ro"}, nil, "'?'"},
		{"serve on a db path with a query", []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--db", "x.db?mode=ro"}, nil, "'?'"},
		{"serve on an empty db path", []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--db", ""}, nil, "--db"},
		{"serve on SQLite's in-memory database", []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--db", ":memory:"}, nil, "./:memory:"},
		{"backup of a db path read as a URI", []string{"backup", "--db", "file:" + db, db + ".copy"}, nil, "URI"},
		{"keys create on a db path with a fragment", []string{"keys", "create", "--db", db + "#x", "--plan", "free"}, nil, "'#'"},
		{"keys revoke on an empty db path", []string{"keys", "revoke", "1", "--db", ""}, nil, "--db"},
		{"keys unban on a db path read as a URI", []string{"keys", "unban", "1", "--db", "file:" + db}, nil, "URI"},
		{"backup of a PostgreSQL database", []string{"backup", "--db", "postgres://u:hunter2@127.0.0.1:1/x", db + ".copy"}, nil, "pg_dump"},
		{"db URL of another scheme", []string{"migrate", "--db", "mysql://u:hunter2@127.0.0.1/x"}, nil, "mysql"},
		{"db URL with one slash", []string{"keys", "list", "--db", "postgres:/u:hunter2@127.0.0.1/x"}, nil, "postgres://"},
		{"db URL that does not parse", []string{"migrate", "--db", "postgres://u:hunter2@127.0.0.1:port/x"}, nil, "--db"},
		{"db URL with a slash in its password", []string{"migrate", "--db", "postgres://u:hunter2/x@127.0.0.1/db"}, nil, "percent-encode"},
		{"db URL with a stray % in its password", []string{"migrate", "--db", "postgres://u:hunter2%zz@127.0.0.1/db"}, nil, "percent-encode"},
		{"db URL pgx refuses", []string{"migrate", "--db", "postgres://u:hunter2@127.0.0.1/x?sslmode=sometimes"}, nil, "sslmode"},
		{"db URL with the password in its query", []string{"migrate", "--db", "postgres://u@127.0.0.1/x?password=hunter2&sslmode=sometimes"}, nil, "xxxxx"},
		{"no connections", []string{"serve", "--db", "postgres://u:hunter2@127.0.0.1/x", "--db-max-conns", "0"}, nil, "--db-max-conns"},
		{"cors origin with a path", []string{"serve", "--db", db, "--cors-origins", "https://app.example.com/ui"}, nil, "--cors-origins"},
		{"cors origin without a scheme", []string{"serve", "--db", db, "--cors-origins", "app.example.com"}, nil, "--cors-origins"},
		{"cors origin of another scheme", []string{"serve", "--db", db, "--cors-origins", "ftp://app.example.com"}, nil, "--cors-origins"},
		{"cors * among origins", []string{"serve", "--db", db, "--cors-origins", "https://a.example.com,*"}, nil, "stands alone"},
		{"cors list of commas", []string{"serve", "--db", db, "--cors-origins", " , "}, nil, "--cors-origins"},
		{"cors origin null", []string{"serve", "--db", db, "--cors-origins", "null"}, nil, "--cors-origins"},
		{"cors origin with a user", []string{"serve", "--db", db, "--cors-origins", "https://u@a.example.com"}, nil, "--cors-origins"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCLI(t, tt.env, tt.args...)
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 2 {
				t.Fatalf("exit code = %d (%v), want 2", code, err)
			}
			if strings.HasPrefix(msg.String(), "petstore: petstore") {
				t.Errorf("message %q names petstore twice", msg.String())
			}
			if line := msg.String(); strings.Count(line, "\n") != 1 || !strings.Contains(line, tt.want) {
				t.Errorf("message = %q, want one line naming %q", line, tt.want)
			}
			if strings.Contains(msg.String(), "hunter2") {
				t.Errorf("message = %q shows the database password", msg.String())
			}
		})
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("a refused command created the database")
	}
}

func TestEnvironmentFallbacks(t *testing.T) {
	dir := t.TempDir()
	envDB := filepath.Join(dir, "from-env.db")
	flagDB := filepath.Join(dir, "from-flag.db")
	env := map[string]string{"PETSTORE_DB": envDB, "PETSTORE_PLAN": "pro"}
	if _, _, err := runCLI(t, env, "keys", "create"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(envDB); err != nil {
		t.Errorf("PETSTORE_DB was not used: %v", err)
	}
	if _, _, err := runCLI(t, env, "keys", "create", "--db", flagDB, "--plan", "free"); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, nil, "keys", "list", "--json", "--db", flagDB)
	if err != nil || !strings.Contains(out, `"plan":"free"`) {
		t.Errorf("the flags did not win over the environment: %v %s", err, out)
	}
	out, _, err = runCLI(t, nil, "version")
	if err != nil || !strings.HasPrefix(out, "petstore ") {
		t.Errorf("version: %v %q", err, out)
	}
	out, _, err = runCLI(t, nil, "help")
	if err != nil || !strings.Contains(out, "keys create") {
		t.Errorf("help: %v %q", err, out)
	}
	out, _, err = runCLI(t, nil, "serve", "-h")
	if err != nil || !strings.Contains(out, "-public-url") {
		t.Errorf("serve -h: %v %q", err, out)
	}
	if _, _, err = runCLI(t, nil, "version", "-h"); err != nil {
		t.Errorf("version -h: %v", err)
	}
	// "All subcommands take --db"; version does not open it.
	if out, _, err = runCLI(t, nil, "version", "--db", filepath.Join(dir, "v.db")); err != nil || !strings.HasPrefix(out, "petstore ") {
		t.Errorf("version --db: %v %q", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "v.db")); err == nil {
		t.Error("version --db created the database")
	}
	if out, _, err = runCLI(t, nil, "keys", "-h"); err != nil || !strings.Contains(out, "create") {
		t.Errorf("keys -h: %v %q", err, out)
	}
}

func TestStartupFailures(t *testing.T) {
	dir := t.TempDir()
	notSQLite := filepath.Join(dir, "notes.txt")
	content := []byte("these are my notes, not a database\n")
	if err := os.WriteFile(notSQLite, content, 0o600); err != nil {
		t.Fatal(err)
	}
	aFile := filepath.Join(dir, "plain")
	if err := os.WriteFile(aFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"not a SQLite file", []string{"--db", notSQLite}, "not a SQLite database"},
		{"missing directory", []string{"--db", filepath.Join(dir, "no", "such", "dir", "p.db")}, "cannot create database"},
		{"parent is a file", []string{"--db", filepath.Join(aFile, "p.db")}, "not a directory"},
		{"directory as database", []string{"--db", dir}, "database"},
		{"port in use", []string{"--db", filepath.Join(dir, "ok.db"), "--addr", busy.Addr().String()}, "address already in use"},
		{"admin port in use", []string{"--db", filepath.Join(dir, "ok.db"), "--addr", "127.0.0.1:0", "--admin-addr", busy.Addr().String()}, "--admin-addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, err := runCLI(t, nil, append([]string{"serve"}, tt.args...)...)
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 1 {
				t.Fatalf("exit code = %d (%v), want 1", code, err)
			}
			if stderr != "" { // no "stopped" before the error: it is the one line
				t.Errorf("a failed start printed %q before its error", stderr)
			}
			if line := msg.String(); strings.Count(line, "\n") != 1 || !strings.Contains(line, tt.want) {
				t.Errorf("message = %q, want one line with %q", line, tt.want)
			}
		})
	}
	if got, _ := os.ReadFile(notSQLite); !bytes.Equal(got, content) {
		t.Errorf("the non-SQLite file was changed: %q", got)
	}
}

func TestNewDatabaseIsPrivate(t *testing.T) {
	db := filepath.Join(t.TempDir(), "private.db")
	createKey(t, db, "--plan", "free")
	st, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	db := filepath.Join(t.TempDir(), "future.db")
	if _, _, err := runCLI(t, nil, "migrate", "--db", db); err != nil {
		t.Fatal(err)
	}
	s := testStore(t, db, false)
	if _, err := s.w.Exec("UPDATE schema_migrations SET version = 999"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before, _ := os.ReadFile(db)
	_, _, err := runCLI(t, nil, "serve", "--db", db, "--addr", "127.0.0.1:0", "--admin-addr", "")
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("serve on a newer schema: %v, want a refusal", err)
	}
	if after, _ := os.ReadFile(db); !bytes.Equal(before, after) {
		t.Errorf("the refused database was changed")
	}
}

// TestKilledServerKeepsAcknowledgedWrites runs the real program in its own
// process, kills it with SIGKILL right after a burst of creates, and checks
// that every create that got a 201 is there after a restart.
func TestKilledServerKeepsAcknowledgedWrites(t *testing.T) {
	db := filepath.Join(t.TempDir(), "kill.db")
	key := createKey(t, db, "--plan", "business")

	p := startProcess(t, db)
	ts := &testServer{base: "http://" + p.addr, key: key, client: contractClient(t, nil)}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []string
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				name := fmt.Sprintf("k%d-%d", w, i)
				r := ts.do(t, "POST", "/v1/categories", key, `{"name":"`+name+`"}`)
				if r.status != http.StatusCreated {
					t.Errorf("create %s: %d", name, r.status)
					return
				}
				mu.Lock()
				acked = append(acked, name)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)

	after := startServerOn(t, db, key)
	have := map[string]bool{}
	for _, c := range decode[[]Category](t, after.do(t, "GET", "/v1/categories", key, "")) {
		have[c.Name] = true
	}
	for _, name := range acked {
		if !have[name] {
			t.Errorf("acknowledged %s is gone after the kill", name)
		}
	}
	if len(acked) != 200 {
		t.Errorf("%d creates acknowledged, want 200", len(acked))
	}
}

// TestConcurrentMigrationsLeaveDatabaseClean starts several migrations of
// one new database at once, as a server and a "keys create" starting
// together do: all must succeed and leave it clean at the latest version.
func TestConcurrentMigrationsLeaveDatabaseClean(t *testing.T) {
	latest, err := latestMigration("migrations/sqlite")
	if err != nil {
		t.Fatal(err)
	}
	for trial := range 10 {
		db := filepath.Join(t.TempDir(), "m.db")
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				errs[i] = run(context.Background(), []string{"migrate", "--db", db}, func(string) string { return "" }, io.Discard, io.Discard)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		conn, err := sql.Open("sqlite", db)
		if err != nil {
			t.Fatal(err)
		}
		var version uint
		var dirty bool
		err = conn.QueryRow("SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty)
		conn.Close()
		if err != nil || dirty || version != latest {
			t.Fatalf("trial %d: version %d, dirty %v (%v); want %d, clean", trial, version, dirty, err, latest)
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
	t.Cleanup(func() { linkFile = os.Link })
	linkFile = func(old, new string) error { return &os.LinkError{Op: "link", Old: old, New: new, Err: syscall.EPERM} }

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
	linkFile = func(old, new string) error {
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

// TestKeysCommandsNeedTheDatabase checks that keys list, revoke and unban
// on a mistyped --db fail (exit 1) instead of creating a new, empty
// database there (owned by whoever ran the command) and, for list, printing
// an empty table as if all were well. Only keys create, serve and migrate
// start a database.
func TestKeysCommandsNeedTheDatabase(t *testing.T) {
	for _, args := range [][]string{{"keys", "list"}, {"keys", "revoke", "1"}, {"keys", "unban", "1"}} {
		db := filepath.Join(t.TempDir(), "typo.db")
		out, _, err := runCLI(t, nil, append(args, "--db", db)...)
		var msg bytes.Buffer
		if code := exitCode(err, &msg); code != 1 || !strings.Contains(msg.String(), "typo.db") {
			t.Errorf("%v on a missing database: exit %d, %q, stdout %q; want 1 naming the file", args, code, msg.String(), out)
		}
		if _, err := os.Stat(db); err == nil {
			t.Errorf("%v created the missing database", args)
		}
	}
}

// TestMigrationDropsAutoincrement upgrades a database of schema 6, with
// rows in categories, pets and orders (ids with gaps, as a failed batch
// leaves them), to 7: every row keeps its id and its links, the tables lose
// AUTOINCREMENT, foreign keys hold and are enforced again, and a new row
// gets the largest id + 1.
func TestMigrationDropsAutoincrement(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v6.db")
	db, err := sql.Open("sqlite", sqliteDSN(path, false, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	src, err := iofs.New(migrationFiles, "migrations/sqlite")
	if err != nil {
		t.Fatal(err)
	}
	drv, err := migratesqlite.WithInstance(db, &migratesqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "sqlite", drv)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Migrate(6); err != nil {
		t.Fatal(err)
	}
	m.Close() // closes db
	db, err = sql.Open("sqlite", sqliteDSN(path, false, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`
		INSERT INTO categories (id, name, fold, description) VALUES (1, 'Dogs', 'dogs', 'woof'), (2, 'Cats', 'cats', NULL), (5, 'Élan', 'élan', 'e');
		INSERT INTO pets (id, name, category_id, status) VALUES (1, 'Rex', 1, 'available'), (3, 'Tom', 2, 'sold'), (4, 'Kit', 5, 'pending');
		INSERT INTO orders (id, pet_id, quantity, status, created_at) VALUES (2, 3, 7, 'placed', '2026-11-24T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	dump := func() string {
		var b strings.Builder
		for _, q := range []string{
			"SELECT id, name, fold, coalesce(description, '-') FROM categories ORDER BY id",
			"SELECT id, name, category_id, status FROM pets ORDER BY id",
			"SELECT id, pet_id, quantity, status, created_at FROM orders ORDER BY id",
		} {
			rows, err := db.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			cols, _ := rows.Columns()
			for rows.Next() {
				vals := make([]any, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				fmt.Fprintln(&b, vals...)
			}
			rows.Close()
		}
		return b.String()
	}
	before := dump()
	db.Close()

	if _, _, err := runCLI(t, nil, "migrate", "--db", path); err != nil {
		t.Fatal(err)
	}
	db, err = sql.Open("sqlite", sqliteDSN(path, false, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if after := dump(); after != before {
		t.Errorf("rows changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name IN ('categories', 'pets', 'orders') AND sql LIKE '%AUTOINCREMENT%'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d tables still AUTOINCREMENT (%v)", n, err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM pragma_foreign_key_check`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d foreign key violations (%v)", n, err)
	}
	db.Close()

	key := createKey(t, path, "--plan", "business")
	ts := startServerOn(t, path, key)
	if c := decode[Category](t, ts.do(t, "POST", "/v1/categories", key, `{"name":"Birds"}`)); c.ID != 6 {
		t.Errorf("a new category got id %d, want 6", c.ID)
	}
	wantError(t, ts.do(t, "POST", "/v1/categories", key, `{"name":"DOGS"}`), 409, "conflict") // the unique fold survived
	if r := ts.do(t, "POST", "/v1/pets", key, `{"name":"Tweety","categoryId":6}`); r.status != 201 || !strings.Contains(string(r.body), `"id":5`) {
		t.Errorf("a new pet: %d %s, want 201 and id 5", r.status, r.body)
	}
	wantError(t, ts.do(t, "POST", "/v1/pets", key, `{"name":"Ghost","categoryId":4}`), 400, "validation_failed") // no category 4: the key is enforced
	if r := ts.do(t, "POST", "/v1/store/orders", key, `{"petId":4,"quantity":1}`); r.status != 201 || !strings.Contains(string(r.body), `"id":3`) {
		t.Errorf("a new order: %d %s, want 201 and id 3", r.status, r.body)
	}
}

// TestHelpTexts: 'petstore help', 'petstore -h' and every command's -h
// exit 0 and begin with the usage line, arguments included; each flag
// listed says what it takes (no Go type name such as "string" or "value"),
// no command lists a flag it ignores, the default of --log-level is
// written as the docs write it, and the lists of plans, scopes and
// environments are the tables in the code.
func TestHelpTexts(t *testing.T) {
	var names []string
	for _, p := range plans {
		names = append(names, p.Name)
	}
	plansList := strings.Join(names, "|")
	cases := []struct {
		args  []string
		usage string
	}{
		{[]string{"help"}, "usage: petstore COMMAND [flags] [ARGUMENTS]\n"},
		{[]string{"-h"}, "usage: petstore COMMAND [flags] [ARGUMENTS]\n"},
		{[]string{"--help"}, "usage: petstore COMMAND [flags] [ARGUMENTS]\n"},
		{[]string{"serve", "-h"}, "usage: petstore serve [flags]\n"},
		{[]string{"keys", "-h"}, "usage: petstore keys SUBCOMMAND [flags] [ID]\n"},
		{[]string{"keys", "create", "-h"}, "usage: petstore keys create --plan " + plansList + " [flags]\n"},
		{[]string{"keys", "list", "--help"}, "usage: petstore keys list [flags]\n"},
		{[]string{"keys", "rotate", "-h"}, "usage: petstore keys rotate [flags] ID\n"},
		{[]string{"keys", "revoke", "3", "-h"}, "usage: petstore keys revoke [flags] ID\n"},
		{[]string{"keys", "unban", "-help"}, "usage: petstore keys unban [flags] ID\n"},
		{[]string{"backup", "-h"}, "usage: petstore backup [flags] DEST\n"},
		{[]string{"copy", "-h"}, "usage: petstore copy --from PATH --to PATH\n"},
		{[]string{"migrate", "-h"}, "usage: petstore migrate [flags]\n"},
		{[]string{"version", "-h"}, "usage: petstore version\n"},
	}
	flagRE := regexp.MustCompile(`(?m)^  -([a-z-]+)(?: (\S+))?\n`)
	goTypeNames := map[string]bool{"string": true, "int": true, "int64": true, "uint": true, "float": true, "duration": true, "value": true}
	for _, c := range cases {
		out, errOut, err := runCLI(t, nil, c.args...)
		if err != nil || errOut != "" {
			t.Errorf("%v: %v, stderr %q; want exit 0 and nothing on stderr", c.args, err, errOut)
		}
		if !strings.HasPrefix(out, c.usage) {
			t.Errorf("%v does not begin with %q:\n%s", c.args, c.usage, out)
		}
		takes := map[string]string{}
		for _, m := range flagRE.FindAllStringSubmatch(out, -1) {
			takes[m[1]] = m[2]
			if goTypeNames[m[2]] {
				t.Errorf("%v: -%s takes %q, a Go type, not what to write", c.args, m[1], m[2])
			}
		}
		switch strings.Join(c.args[:len(c.args)-1], " ") {
		case "version":
			if len(takes) != 0 {
				t.Errorf("version -h lists flags %v, which version ignores:\n%s", takes, out)
			}
		case "serve":
			if takes["log-level"] != "debug|info|warn|error" || !regexp.MustCompile(`\n\s+log level[^\n]*\(default info\)\n`).MatchString(out) {
				t.Errorf("serve -h: -log-level takes %q; want debug|info|warn|error with (default info):\n%s", takes["log-level"], out)
			}
			if takes["env"] != strings.Join(environments, "|") {
				t.Errorf("serve -h: -env takes %q, want the environments %v", takes["env"], environments)
			}
		case "keys create":
			if takes["plan"] != plansList {
				t.Errorf("keys create -h: -plan takes %q, want the plans table %q", takes["plan"], plansList)
			}
			if scopes := strings.Split(takes["scope"], "|"); !slices.Equal(slices.Sorted(slices.Values(scopes)), []string{scopeRead, scopeWrite}) {
				t.Errorf("keys create -h: -scope takes %q, want the scopes %s and %s", takes["scope"], scopeRead, scopeWrite)
			}
			if takes["env"] != strings.Join(environments, "|") {
				t.Errorf("keys create -h: -env takes %q, want the environments %v", takes["env"], environments)
			}
		case "keys revoke 3", "keys rotate", "keys unban", "backup", "keys list", "migrate":
			if takes["db"] == "" {
				t.Errorf("%v lists no -db:\n%s", c.args, out)
			}
		case "":
			if !strings.Contains(out, "\n  petstore keys create --plan "+plansList+" [flags]\n") {
				t.Errorf("%v does not list keys create with the plans table %q:\n%s", c.args, plansList, out)
			}
		}
	}
}
