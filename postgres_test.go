package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgresEnv names the variable that points the tests at a PostgreSQL
// database (postgres://postgres@127.0.0.1:5432/test): every test that
// starts a server then runs on a fresh schema of it, and the tests of
// PostgreSQL alone run. Unset, they run on SQLite, and those skip.
const postgresEnv = "PETSTORE_TEST_POSTGRES"

// needPostgres returns the database of PETSTORE_TEST_POSTGRES, or skips
// the test when it is not set.
func needPostgres(t testing.TB) string {
	t.Helper()
	base := os.Getenv(postgresEnv)
	if base == "" {
		t.Skip("set " + postgresEnv + "=postgres://... to run the PostgreSQL tests")
	}
	return base
}

// testDB returns the --db of a fresh database for one test: a new schema
// in PETSTORE_TEST_POSTGRES's database, dropped when the test ends, or a
// SQLite file in a temporary directory when the variable is not set.
func testDB(t testing.TB) string {
	t.Helper()
	if os.Getenv(postgresEnv) == "" {
		return filepath.Join(t.TempDir(), "petstore.db")
	}
	return postgresSchema(t, needPostgres(t))
}

// postgresSchema creates a schema of its own for the test in base's
// database and returns base with search_path set to it. A database that
// does not answer fails the test: the variable says it should.
func postgresSchema(t testing.TB, base string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("%s is set, but its database does not answer: %v", postgresEnv, err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	schema := "petstore_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", postgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// openTestStore opens the database db (either kind), migrated, and closes
// it when the test ends.
func openTestStore(t testing.TB, db string) Store {
	t.Helper()
	s, err := openStore(context.Background(), db, storeOptions{migrate: true, now: time.Now, busy: defaultBusyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPostgresSchemaVersions checks migrate's answer on PostgreSQL, the
// refusal of a schema newer than this binary knows, and that a running
// instance goes on serving when another binary migrates the database
// further (an additive migration: a new column, a higher version).
func TestPostgresSchemaVersions(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	latest, err := latestMigration("migrations/postgres")
	if err != nil {
		t.Fatal(err)
	}
	if sqliteLatest, _ := latestMigration("migrations/sqlite"); sqliteLatest != latest {
		t.Errorf("PostgreSQL's schema is at version %d, SQLite's at %d: they must be numbered alike", latest, sqliteLatest)
	}
	out, _, err := runCLI(t, nil, "migrate", "--db", db)
	if want := fmt.Sprintf("schema at version %d\n", latest); err != nil || !strings.HasSuffix(out, want) {
		t.Fatalf("migrate: %v, %q; want %q", err, out, want)
	}
	key := createKey(t, db, "--plan", "business")
	ts := startServerOn(t, db, key)
	ts.do(t, "POST", "/v1/categories", key, `{"name":"before"}`)

	s := openTestStore(t, db).(*pgStore)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE categories ADD COLUMN added_later text;
		ALTER TABLE api_keys ADD COLUMN added_later text;
		UPDATE schema_migrations SET version = %d`, latest+1)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"after", "and after"} {
		if r := ts.do(t, "POST", "/v1/categories", key, `{"name":"`+name+`"}`); r.status != 201 {
			t.Fatalf("create after another binary migrated: %d %s", r.status, r.body)
		}
	}
	if list := decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, "")); len(list) != 3 {
		t.Errorf("list after another binary migrated: %v", list)
	}
	// A binary that does not know the newer schema refuses to start on it.
	for _, args := range [][]string{{"keys", "create", "--plan", "free"}, {"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off"}} {
		_, _, err := runCLI(t, nil, append(args, "--db", db)...)
		if err == nil || !strings.Contains(err.Error(), "newer than this petstore knows") {
			t.Errorf("%s on a newer schema: %v, want a refusal", args[0], err)
		}
	}
}

// TestPostgresPasswordNeverShown runs the server on a URL with a password
// (the test server trusts loopback, so any password is accepted) and looks
// for it in everything the server shows: its log, /healthz, /readyz, the
// metrics, and the error of a database that does not answer.
func TestPostgresPasswordNeverShown(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "hunter2-Zq7"
	u.User = url.UserPassword(u.User.Username(), secret)
	withPassword := u.String()
	key := createKey(t, withPassword, "--plan", "business")
	ts := startServerOn(t, withPassword, key)
	ts.do(t, "POST", "/v1/categories", key, `{"name":"x"}`)
	seen := ts.stderr.String()
	for _, path := range []string{ts.base + "/healthz", ts.base + "/readyz", ts.admin + "/metrics"} {
		seen += ts.get(t, path)
	}
	out, errOut, _ := runCLI(t, nil, "migrate", "--db", withPassword)
	seen += out + errOut
	u.Host = "127.0.0.1:1" // nothing listens there
	_, _, err = runCLI(t, nil, "keys", "list", "--db", u.String())
	if err == nil {
		t.Fatal("keys list on a database that does not answer succeeded")
	}
	seen += err.Error()
	if strings.Contains(seen, secret) {
		t.Errorf("the password shows:\n%s", seen)
	}
	if !strings.Contains(seen, "xxxxx") {
		t.Errorf("the URL is not shown masked anywhere:\n%s", seen)
	}
}

// TestPostgresURLFromPGVariables gives the server a URL that names only
// the schema: the host, the user and the database come from the PG*
// variables, as they do for psql.
func TestPostgresURLFromPGVariables(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGHOST", u.Hostname())
	t.Setenv("PGPORT", u.Port())
	t.Setenv("PGUSER", u.User.Username())
	t.Setenv("PGDATABASE", strings.TrimPrefix(u.Path, "/"))
	bare := "postgres://?" + u.RawQuery
	key := createKey(t, bare, "--plan", "business")
	ts := startServerOn(t, bare, key)
	ts.do(t, "POST", "/v1/categories", key, `{"name":"from PG variables"}`)
	if list := decode[[]Category](t, ts.do(t, "GET", "/v1/categories", key, "")); len(list) != 1 {
		t.Errorf("list: %v", list)
	}
	// The same rows are in the schema the full URL names.
	var n int
	if err := openTestStore(t, db).(*pgStore).pool.QueryRow(context.Background(), "SELECT count(*) FROM categories").Scan(&n); err != nil || n != 1 {
		t.Errorf("categories in the schema: %d, %v", n, err)
	}
}
