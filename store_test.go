package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// notInTable is a value that no Go table of allowed values holds: every
// CHECK must refuse it.
const notInTable = "not-in-the-table"

// goTables are the Go tables of allowed values that a SQL CHECK repeats,
// by table and column: the Go table is the source, the CHECK (which
// SQLite cannot drop without rebuilding the table) must follow it.
func goTables() []struct {
	table, column string
	values        []string
} {
	return []struct {
		table, column string
		values        []string
	}{
		{"api_keys", "plan", planNames()},
		{"api_keys", "env", environments},
		{"api_keys", "scope", keyScopes},
		{"pets", "status", petStatuses},
		{"orders", "status", orderStatuses},
	}
}

// TestCheckConstraintsMatchTables checks, on each store's migrated schema,
// that every CHECK that lists allowed values lists those of its Go table:
// that the CHECK as the database shows it names the table's values, and
// that an insert of each value is accepted and one of a value outside the
// table refused; and that orders.quantity's allows 1 to maxOrderQuantity. Adding a plan to limits_plans.go alone would otherwise build,
// pass the help texts, and fail "keys create" with a CHECK failure.
func TestCheckConstraintsMatchTables(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		checkConstraintsMatch(t, filepath.Join(t.TempDir(), "petstore.db"), sqliteCheckValues)
	})
	t.Run("postgres", func(t *testing.T) {
		checkConstraintsMatch(t, postgresSchema(t, needPostgres(t)), pgCheckValues)
	})
}

// checkValues returns the values that the CHECK on table's column lists,
// as the live database shows it, or an error when it finds no such CHECK.
type checkValues func(ctx context.Context, s Store, table, column string) ([]string, error)

func checkConstraintsMatch(t *testing.T, db string, listed checkValues) {
	t.Helper()
	s := openTestStore(t, db)
	ctx := context.Background()
	for _, tt := range goTables() {
		got, err := listed(ctx, s, tt.table, tt.column)
		if err != nil {
			t.Errorf("%s.%s: %v", tt.table, tt.column, err)
			continue
		}
		if want := slices.Sorted(slices.Values(tt.values)); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
			t.Errorf("the CHECK of %s.%s allows %q; the Go table has %q", tt.table, tt.column, got, tt.values)
		}
	}

	// The inserts: what the CHECKs accept, whatever their text.
	n := 0
	spec := func(plan, env, scope string) keySpec {
		n++
		return keySpec{Hash: sha256.Sum256(binary.AppendVarint(nil, int64(n))), Name: "probe",
			Plan: plan, RPM: 10, RPD: 10, Env: env, Scope: scope}
	}
	probe := func(table, column, value string, err error) {
		t.Helper()
		refused := err != nil && strings.Contains(strings.ToLower(err.Error()), "check constraint")
		switch {
		case value == notInTable && !refused:
			t.Errorf("%s.%s = %q, a value outside the Go table: %v, want a CHECK failure", table, column, value, err)
		case value != notInTable && err != nil:
			t.Errorf("%s.%s = %q, a value of the Go table: %v", table, column, value, err)
		}
	}
	for _, plan := range append(planNames(), notInTable) {
		_, err := s.CreateKey(ctx, spec(plan, "production", scopeWrite))
		probe("api_keys", "plan", plan, err)
	}
	for _, env := range append(slices.Clone(environments), notInTable) {
		_, err := s.CreateKey(ctx, spec("free", env, scopeWrite))
		probe("api_keys", "env", env, err)
	}
	for _, scope := range append(slices.Clone(keyScopes), notInTable) {
		_, err := s.CreateKey(ctx, spec("free", "production", scope))
		probe("api_keys", "scope", scope, err)
	}
	c, err := s.CreateCategory(ctx, Category{Name: "probe"}, "probe", nil)
	if err != nil {
		t.Fatal(err)
	}
	var pet Pet
	for _, status := range append(slices.Clone(petStatuses), notInTable) {
		p, err := s.CreatePet(ctx, Pet{Name: "probe", CategoryID: c.ID, Status: status}, nil)
		probe("pets", "status", status, err)
		if err == nil {
			pet = p
		}
	}
	if pet.ID == 0 {
		t.Fatal("no pet was created")
	}
	for _, status := range append(slices.Clone(orderStatuses), notInTable) {
		_, err := s.CreateOrder(ctx, Order{PetID: pet.ID, Quantity: 1, Status: status}, nil)
		probe("orders", "status", status, err)
	}
	for q, ok := range map[int64]bool{1: true, maxOrderQuantity: true, 0: false, maxOrderQuantity + 1: false} {
		_, err := s.CreateOrder(ctx, Order{PetID: pet.ID, Quantity: q, Status: orderPlaced}, nil)
		if refused := err != nil && strings.Contains(strings.ToLower(err.Error()), "check constraint"); refused == ok || (ok && err != nil) {
			t.Errorf("orders.quantity = %d: %v; the CHECK must allow exactly 1 to maxOrderQuantity (%d)", q, err, maxOrderQuantity)
		}
	}
}

// checkLiterals returns the quoted literals of a CHECK's text.
func checkLiterals(def string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(def, -1) {
		out = append(out, m[1])
	}
	return out
}

// sqliteCheckValues reads the list of "CHECK (column IN (...))" from the
// table's definition in sqlite_master.
func sqliteCheckValues(ctx context.Context, s Store, table, column string) ([]string, error) {
	var def string
	if err := s.(*sqliteStore).r.QueryRowContext(ctx, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", table).Scan(&def); err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`CHECK \(`+column+` IN \(([^)]*)\)\)`).FindAllStringSubmatch(def, -1)
	if len(m) != 1 {
		return nil, fmt.Errorf("%d CHECKs of the form %s IN (...), want 1, in:\n%s", len(m), column, def)
	}
	return checkLiterals(m[0][1]), nil
}

// pgCheckValues reads the list of the table's CHECK on column as
// pg_get_constraintdef shows it: PostgreSQL keeps "column IN (...)" as
// "column = ANY (ARRAY[...])", or "column = '...'" for one value.
func pgCheckValues(ctx context.Context, s Store, table, column string) ([]string, error) {
	rows, err := s.(*pgStore).pool.Query(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = $1::regclass AND contype = 'c'`, table)
	if err != nil {
		return nil, err
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	re := regexp.MustCompile(`^CHECK \(\(` + column + ` = (ANY \(ARRAY\[[^]]*\]\)|'[^']*'::text)\)\)$`)
	var found []string
	for _, def := range defs {
		if m := re.FindStringSubmatch(def); m != nil {
			found = append(found, m[1])
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d CHECKs of the form %s IN (...), want 1, among:\n%s", len(found), column, strings.Join(defs, "\n"))
	}
	return checkLiterals(found[0]), nil
}
