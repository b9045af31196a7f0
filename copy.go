// copy.go owns petstore copy: moving a whole database between the stores
// (SQLite to PostgreSQL when one machine is not enough, and back), every
// table with its ids, in one transaction on the target, checked by row
// counts at the end. This file is the store-neutral driver; each store's
// half is in sqlite_copy.go and postgres_copy.go.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"strings"
	"time"
)

// colKind is how a column's values cross between the stores. Both read
// and write them as these Go types: int64, string, []byte, time.Time (UTC)
// and, for a day, a "2006-01-02" string; nil for NULL.
type colKind int

const (
	colInt colKind = iota
	colText
	colBytes
	colTime
	colDay
)

type copyColumn struct {
	name string
	kind colKind
}

// copyTable is a table as copy moves it.
type copyTable struct {
	name string
	cols []copyColumn
	// order sorts its rows: the primary key.
	order string
	// replace: the target's own rows (a new database has them: its
	// migrations made them) give way to the source's, instead of the
	// target having to be empty.
	replace bool
}

// copyTables are every table of the schema, in an order in which each row's
// references are copied before it.
var copyTables = []copyTable{
	{"api_keys", []copyColumn{{"id", colInt}, {"hash", colBytes}, {"name", colText}, {"plan", colText}, {"rpm", colInt}, {"rpd", colInt},
		{"env", colText}, {"created_at", colTime}, {"revoked_at", colTime}, {"banned_until", colTime},
		{"expires_at", colTime}, {"scope", colText}, {"replaces", colInt}, {"lineage", colInt}, {"last_used_at", colTime},
		{"seq", colInt}}, "id", false},
	{"usage", []copyColumn{{"key_id", colInt}, {"day", colDay}, {"count", colInt}}, "key_id, day", false},
	{"categories", []copyColumn{{"id", colInt}, {"name", colText}, {"fold", colText}, {"description", colText}, {"name_cmp", colText}}, "id", false},
	{"pets", []copyColumn{{"id", colInt}, {"name", colText}, {"category_id", colInt}, {"status", colText}, {"version", colInt}}, "id", false},
	{"orders", []copyColumn{{"id", colInt}, {"pet_id", colInt}, {"quantity", colInt}, {"status", colText}, {"created_at", colTime}, {"version", colInt}}, "id", false},
	// The answers kept for retries: a client that retries after the move
	// must not create twice. (PostgreSQL's running marks are not copied.)
	{"idempotency", []copyColumn{{"key_id", colInt}, {"idem_key", colText}, {"fingerprint", colBytes}, {"status", colInt},
		{"body", colBytes}, {"created_us", colInt}}, "key_id, idem_key", false},
	// The deployment id: a copy is the same deployment, and keeps the
	// source's Redis key names (the default --redis-prefix holds the id).
	{"deployment", []copyColumn{{"id", colText}}, "id", true},
	// HTTPS from an ACME CA: the account key and the certificates with
	// their private keys, so that the copy serves them without asking the
	// CA again. A target that ran serve with --acme-domains gives way, as
	// for the deployment id.
	{"acme_cache", []copyColumn{{"directory", colText}, {"key", colText}, {"data", colBytes}, {"updated_at", colTime}}, "directory, key", true},
}

// hasID reports whether t's rows have an id that a sequence hands out.
func (t copyTable) hasID() bool { return t.cols[0].name == "id" && t.cols[0].kind == colInt }

func (t copyTable) names() []string {
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		names[i] = c.name
	}
	return names
}

// copier is a store that copy can read whole and fill.
type copier interface {
	adminStore
	// rowCount returns how many rows table t holds.
	rowCount(ctx context.Context, t copyTable) (int64, error)
	// copyOut returns t's rows in order, as colKind says.
	copyOut(ctx context.Context, t copyTable) iter.Seq2[[]any, error]
	// idsHandedOut returns the highest id that table t ever handed out,
	// a deleted row's too (0: none; t has no id column: 0).
	idsHandedOut(ctx context.Context, t copyTable) (int64, error)
	// copyIn writes every table's rows, which rows gives, in one
	// transaction (a replace table's own rows deleted first), and sets
	// each id sequence past the ids written and past floors[i], the
	// source's idsHandedOut of tables[i]: no id comes back. Before
	// it commits, it calls check with the number of rows written to each
	// table; an error of check undoes them all.
	copyIn(ctx context.Context, tables []copyTable, floors []int64, rows func(copyTable) iter.Seq2[[]any, error], check func(written []int64) error) error
}

func runCopy(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := newFlagSet("copy")
	from := fs.String("from", "", "the database to copy: the `PATH` of a SQLite file, or a postgres:// URL; nothing may serve it meanwhile")
	to := fs.String("to", "", "the database to fill: the `PATH` of a new SQLite file, or the postgres:// URL of an empty database")
	if _, err := parseFlags(fs, args, getenv, stdout, 0); err != nil {
		return helpIsNoError(err)
	}
	if *from == "" || *to == "" {
		return usagef("copy: --from and --to are both required")
	}
	for _, db := range []string{*from, *to} {
		if err := checkDBPath(db); err != nil {
			return err
		}
	}
	if *from == *to {
		return usagef("copy: --from and --to name the same database")
	}
	if a, err := os.Stat(*from); err == nil {
		if b, err := os.Stat(*to); err == nil && os.SameFile(a, b) {
			return usagef("copy: --from and --to name the same database")
		}
	}
	// Nothing serves the source meanwhile (a write after it was read would
	// be lost), nor the target before it is full: each SQLite file's serve
	// lock is held until the copy ends.
	releaseFrom, err := sqliteHoldDatabase(ctx, *from, false, 0)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	defer releaseFrom()
	src, err := openStore(ctx, *from, storeOptions{now: time.Now, busy: defaultBusyTimeout, maxConns: 2})
	if err != nil {
		return err
	}
	defer src.Close()
	releaseTo, err := sqliteHoldDatabase(ctx, *to, true, 0)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	defer releaseTo()
	dst, err := openStore(ctx, *to, storeOptions{migrate: true, now: time.Now, busy: defaultBusyTimeout, maxConns: 2})
	if err != nil {
		return err
	}
	defer dst.Close()
	return copyDatabase(ctx, src.(copier), dst.(copier), redactDB(*from), redactDB(*to), stdout)
}

// copyDatabase copies every table of src into dst, which must be empty (but
// for its deployment id, which the source's replaces) and at the schema
// version src is at, and compares the row counts after.
func copyDatabase(ctx context.Context, src, dst copier, from, to string, stdout io.Writer) error {
	sv, err := src.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	dv, err := dst.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", to, err)
	}
	if sv != dv {
		return fmt.Errorf("%s is at schema version %d and %s at %d; run 'petstore migrate --db' on the older one first", from, sv, to, dv)
	}
	var held []string
	for _, t := range copyTables {
		n, err := dst.rowCount(ctx, t)
		if err != nil {
			return fmt.Errorf("%s: %w", to, err)
		}
		if n > 0 && !t.replace {
			held = append(held, fmt.Sprintf("%s: %d", t.name, n))
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("%s already holds rows (%s); copy fills an empty database only", to, strings.Join(held, ", "))
	}
	// The source's counts, taken after it was read, must match what was
	// written, or nothing is kept: a source in use meanwhile is caught.
	check := func(written []int64) error {
		var mismatch []string
		for i, t := range copyTables {
			n, err := src.rowCount(ctx, t)
			if err != nil {
				return fmt.Errorf("%s: %w", from, err)
			}
			if n != written[i] {
				mismatch = append(mismatch, fmt.Sprintf("%s: %d in the source, %d copied", t.name, n, written[i]))
			}
		}
		if len(mismatch) > 0 {
			return fmt.Errorf("the row counts differ (was the source in use?): %s; nothing was written", strings.Join(mismatch, "; "))
		}
		return nil
	}
	floors := make([]int64, len(copyTables))
	for i, t := range copyTables {
		if floors[i], err = src.idsHandedOut(ctx, t); err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
	}
	if err := dst.copyIn(ctx, copyTables, floors, func(t copyTable) iter.Seq2[[]any, error] { return src.copyOut(ctx, t) }, check); err != nil {
		return fmt.Errorf("copy to %s: %w", to, err)
	}
	// And the target holds them, read back after the commit.
	for _, t := range copyTables {
		n, err := dst.rowCount(ctx, t)
		if err != nil {
			return fmt.Errorf("%s: %w", to, err)
		}
		fmt.Fprintf(stdout, "%s: %d rows\n", t.name, n)
		if want, _ := src.rowCount(ctx, t); n != want {
			return fmt.Errorf("%s holds %d rows of %s after the copy, the source %d", to, n, t.name, want)
		}
	}
	fmt.Fprintf(stdout, "copied %s to %s\n", from, to)
	return nil
}

// errStopCopy ends a copyOut whose reader stopped early.
var errStopCopy = errors.New("copy stopped")

// seqOf turns a read that calls fn with each row into an iter.Seq2.
func seqOf(read func(fn func([]any) error) error) iter.Seq2[[]any, error] {
	return func(yield func([]any, error) bool) {
		err := read(func(row []any) error {
			if !yield(row, nil) {
				return errStopCopy
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopCopy) {
			yield(nil, err)
		}
	}
}
