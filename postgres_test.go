package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

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
