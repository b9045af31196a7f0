package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

func TestSchemaMatchesMigrations(t *testing.T) {
	db := filepath.Join(t.TempDir(), "m.db")
	if _, _, err := runCLI(t, nil, "migrate", "--db", db); err != nil {
		t.Fatal(err)
	}
	migrated := testStore(t, db, false)
	fromMigrations := schemaOf(t, migrated)

	ref := testStore(t, filepath.Join(t.TempDir(), "ref.db"), true)
	sch, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.w.Exec("DROP TABLE deployment"); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.w.Exec("DROP TABLE acme_cache; DROP TABLE idempotency; DROP TABLE orders; DROP TABLE pets; DROP TABLE usage; DROP TABLE categories; DROP TABLE api_keys; DROP TABLE schema_migrations;"); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.w.Exec(string(sch)); err != nil {
		t.Fatalf("schema.sql: %v", err)
	}
	fromSchema := schemaOf(t, ref)
	if fromSchema != fromMigrations {
		t.Errorf("schema.sql differs from the migrations:\nschema.sql:\n%s\nmigrations:\n%s", fromSchema, fromMigrations)
	}
}

// schemaOf lists a database's tables, indexes and triggers, normalised.
func schemaOf(t *testing.T, s *sqliteStore) string {
	t.Helper()
	rows, err := s.r.Query(`SELECT type, name, coalesce(sql, '') FROM sqlite_schema
		WHERE name NOT LIKE 'sqlite_%' AND name NOT IN ('schema_migrations', 'version_unique') ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	space := regexp.MustCompile(`\s+`)
	comment := regexp.MustCompile(`--[^\n]*`)
	renamed := regexp.MustCompile(`^CREATE TABLE "(\w+)"`) // SQLite quotes the name ALTER TABLE ... RENAME TO gives
	for rows.Next() {
		var typ, name, sql string
		if err := rows.Scan(&typ, &name, &sql); err != nil {
			t.Fatal(err)
		}
		sql = renamed.ReplaceAllString(sql, "CREATE TABLE $1")
		sql = space.ReplaceAllString(comment.ReplaceAllString(sql, ""), " ")
		// ALTER TABLE ... ADD COLUMN appends ", col TYPE" after the last
		// column's text, before the newline that closed it.
		sql = strings.ReplaceAll(strings.ReplaceAll(sql, " ,", ","), " )", ")")
		fmt.Fprintf(&b, "%s %s: %s\n", typ, name, sql)
	}
	return b.String()
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

// TestMigrationDropsAutoincrement upgrades a database of schema 6, with
// rows in categories, pets and orders (ids with gaps, as a failed batch
// leaves them), to the latest: every row keeps its id and its links,
// categories lose AUTOINCREMENT (7) and pets and orders have it again (11),
// foreign keys hold and are enforced again, and a new row gets the largest
// id + 1.
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
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'categories' AND sql LIKE '%AUTOINCREMENT%'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("categories still AUTOINCREMENT (%d, %v)", n, err)
	}
	// 0011 gives pets and orders, which may be deleted, AUTOINCREMENT again.
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name IN ('pets', 'orders') AND sql LIKE '%AUTOINCREMENT%'`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d of pets and orders AUTOINCREMENT (%v), want both (schema 11)", n, err)
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

// TestIdsNeverReused (either store): a pet and an order deleted while
// they held the highest ids do not give those ids again (SQLite's ids were
// the largest + 1 before schema 11).
func TestIdsNeverReused(t *testing.T) {
	ts := startServer(t)
	ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Dog"}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Rex","categoryId":1}`)
	ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Tom","categoryId":1}`)
	ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":1}`)
	ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":1}`)
	del := "DELETE FROM orders WHERE id = 2; DELETE FROM pets WHERE id = 2"
	execDB(t, ts.db, del, del)
	if p := decode[Pet](t, ts.do(t, "POST", "/v1/pets", ts.key, `{"name":"Kit","categoryId":1}`)); p.ID != 3 {
		t.Errorf("a pet after the highest was deleted got id %d, want 3", p.ID)
	}
	if o := decode[Order](t, ts.do(t, "POST", "/v1/store/orders", ts.key, `{"petId":1,"quantity":1}`)); o.ID != 3 {
		t.Errorf("an order after the highest was deleted got id %d, want 3", o.ID)
	}
}
