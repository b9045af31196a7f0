package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestGroupCommitIsolatesFailures sends creates at once so that they share
// batches, a quarter of them conflicting: each conflict must fail alone.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	s := testStore(t, filepath.Join(t.TempDir(), "g.db"), true)
	const n = 400
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("unique-%d", i)
			if i%4 == 0 {
				name = "shared" // 100 creates of one name: one wins
			}
			_, errs[i] = s.CreateCategory(context.Background(), Category{Name: name}, foldName(name), nil)
		})
	}
	wg.Wait()
	ok, conflicts := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, errConflict):
			conflicts++
		default:
			t.Errorf("create %d: %v", i, err)
		}
	}
	rows := 0
	s.EachCategory(context.Background(), func(Category) error { rows++; return nil })
	if ok != 301 || conflicts != 99 || rows != 301 {
		t.Errorf("%d created, %d conflicts, %d rows; want 301, 99, 301", ok, conflicts, rows)
	}
}

// TestGroupCommitSkipsCancelledWrites checks that a write whose client is
// gone is not made.
func TestGroupCommitSkipsCancelledWrites(t *testing.T) {
	s := testStore(t, filepath.Join(t.TempDir(), "c.db"), true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.CreateCategory(ctx, Category{Name: "gone"}, "gone", nil); err == nil {
		t.Fatal("a cancelled create succeeded")
	}
	rows := 0
	s.EachCategory(context.Background(), func(Category) error { rows++; return nil })
	if rows != 0 {
		t.Errorf("%d rows after a cancelled create, want 0", rows)
	}
}

// TestGroupCommitAfterClose checks that a write after the store closed
// fails at once instead of waiting forever.
func TestGroupCommitAfterClose(t *testing.T) {
	s := testStore(t, filepath.Join(t.TempDir(), "x.db"), true)
	s.Close()
	done := make(chan error, 1)
	go func() {
		_, err := s.CreateCategory(context.Background(), Category{Name: "late"}, "late", nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errUnavailable) {
			t.Errorf("create after close: %v, want errUnavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a create after close hung")
	}
}

// TestGroupCommitBatchesOnOneCPU checks that with one P, where a blocking
// fsync stops every goroutine, the writers waiting still share batches:
// the loop yields to them before it commits.
func TestGroupCommitBatchesOnOneCPU(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s := testStore(t, filepath.Join(t.TempDir(), "b.db"), true)
	const writers, each = 32, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("w%d-%d", w, i)
				if _, err := s.CreateCategory(context.Background(), Category{Name: name}, name, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	batches, writes := s.group.stats()
	if writes != writers*each {
		t.Fatalf("%d writes counted, want %d", writes, writers*each)
	}
	if avg := float64(writes) / float64(batches); avg < 4 {
		t.Errorf("%d writes in %d batches (%.1f a batch) with 32 writers on one P; want at least 4 a batch", writes, batches, avg)
	}
	t.Logf("%d writes in %d batches", writes, batches)
}

// TestGroupCommitFailsBatchWhenTransactionIsLost checks a batch whose
// transaction SQLite abandons halfway: an INSERT interrupted inside an
// explicit transaction rolls the whole transaction back. The writes after it
// must not then run outside the transaction and commit on their own while
// being answered with an error: every write answered with an error must
// have left no row, and every one answered nil must have its row.
func TestGroupCommitFailsBatchWhenTransactionIsLost(t *testing.T) {
	s := testStore(t, filepath.Join(t.TempDir(), "l.db"), true)
	g := s.group
	insert := func(name string) func(tx *sqliteBatchTx) error {
		return func(tx *sqliteBatchTx) error {
			_, err := tx.Exec("INSERT INTO categories (name, fold) VALUES (?, ?)", name, name)
			return err
		}
	}
	// Hold the loop in a first batch until the three writes below are
	// queued, so that they share the next batch, in this order.
	started, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // before the store's cleanup, which waits for the loop
	go g.write(context.Background(), func(tx *sqliteBatchTx) error {
		close(started)
		<-release
		return insert("first")(tx)
	})
	<-started
	queued := func(n int) {
		for deadline := time.Now().Add(5 * time.Second); len(g.jobs) < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes queued, want %d", len(g.jobs), n)
			}
		}
	}
	names := []string{"before", "interrupted", "after"}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		fn := insert(name)
		if name == "interrupted" {
			// A statement that runs until its context ends: SQLite is
			// interrupted in the middle of an INSERT.
			fn = func(tx *sqliteBatchTx) error {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				_, err := tx.ExecContext(ctx, `INSERT INTO categories (name, fold)
					WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 100000000)
					SELECT 'n' || x, 'n' || x FROM n`)
				return err
			}
		}
		wg.Go(func() { errs[i] = g.write(context.Background(), fn) })
		queued(i + 1)
	}
	releaseOnce()
	wg.Wait()
	if errs[1] == nil {
		t.Fatal("the interrupted insert succeeded")
	}
	if !errors.Is(errs[2], errUnavailable) {
		t.Errorf("the write after the interrupted one: %v, want errUnavailable (safe to retry)", errs[2])
	}
	for i, name := range names {
		var n int
		if err := s.r.QueryRow("SELECT count(*) FROM categories WHERE name = ?", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if (errs[i] == nil) != (n == 1) {
			t.Errorf("write %q answered %v, but %d rows of it are in the table", name, errs[i], n)
		}
	}
}

// TestWriterPageCache: the writer's page cache is capped (sqliteWriterCache),
// the readers keep SQLite's default, and the writer still works past it:
// 8,000 creates in batches, then every row read back.
func TestWriterPageCache(t *testing.T) {
	s := testStore(t, filepath.Join(t.TempDir(), "c.db"), true)
	ctx := context.Background()
	for _, c := range []struct {
		db interface {
			QueryRowContext(context.Context, string, ...any) *sql.Row
		}
		name string
		want int
	}{{s.w, "writer", -512}, {s.r, "reader", -2000}} {
		var got int
		if err := c.db.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: cache_size %d, want %d", c.name, got, c.want)
		}
	}
	// About 2 MiB of rows and index entries, four times the writer's cache.
	const n = 8000
	desc := strings.Repeat("d", 200)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("cache-%05d", (i*7919)%n)
			_, errs[i] = s.CreateCategory(ctx, Category{Name: name, Description: &desc}, foldName(name), nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var count int
	var pages int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM categories WHERE name LIKE 'cache-%'").Scan(&count); err != nil {
		t.Fatal(err)
	}
	if err := s.r.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if count != n || pages < 4*512*1024/4096 {
		t.Errorf("%d rows in %d pages, want %d rows in more than four times the writer's cache", count, pages, n)
	}
}

// TestGroupCommitNotFoundFailsAlone runs one batch through each store's
// commit: a create, a change of a row that does not exist, a create. The
// change's own outcome is errNotFound, and its neighbours are made: no
// write's answer depends on another's (PostgreSQL's with
// PETSTORE_TEST_POSTGRES).
func TestGroupCommitNotFoundFailsAlone(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, errs []error, count func() int) {
		t.Helper()
		if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], errNotFound) {
			t.Errorf("answers %v, want nil, errNotFound, nil: a not-found must fail its write alone", errs)
		}
		if n := count(); n != 2 {
			t.Errorf("%d of the two creates made", n)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		s := testStore(t, filepath.Join(t.TempDir(), "n.db"), true)
		insert := func(name string) func(tx *sqliteBatchTx) error {
			return func(tx *sqliteBatchTx) error {
				_, err := tx.Exec("INSERT INTO categories (name, fold) VALUES (?, ?)", name, name)
				return err
			}
		}
		missing := func(tx *sqliteBatchTx) error {
			return sqliteChangeRow(tx, func(row *sql.Row) error { var id int64; return row.Scan(&id) },
				"UPDATE categories SET description = 'x' WHERE id = ? RETURNING id", 999)
		}
		errs := runBatch(sqliteCommit(s.w), insert("a"), missing, insert("b"))
		check(t, errs, func() int {
			var n int
			s.r.QueryRow("SELECT count(*) FROM categories WHERE name IN ('a', 'b')").Scan(&n)
			return n
		})
	})
	t.Run("postgres", func(t *testing.T) {
		s := openTestStore(t, postgresSchema(t, needPostgres(t))).(*pgStore)
		insert := func(name string) func(b *pgBatch) error {
			return func(b *pgBatch) error {
				b.queue(pgStmtOf("INSERT INTO categories (name, fold, name_cmp) VALUES ($1, $1, $1)"), nil, name)
				return nil
			}
		}
		missing := func(b *pgBatch) error {
			b.changeRow(func(row pgx.Row) error { var id int64; return row.Scan(&id) },
				"UPDATE categories SET description = 'x' WHERE id = $1 RETURNING id", 999)
			return nil
		}
		errs := runBatch(s.commitBatch, insert("a"), missing, insert("b"))
		check(t, errs, func() int {
			var n int
			s.pool.QueryRow(ctx, "SELECT count(*) FROM categories WHERE name IN ('a', 'b')").Scan(&n)
			return n
		})
	})
}

// runBatch hands writes to commit as one batch and returns their answers.
func runBatch[T any](commit func([]*writeJob[T]), writes ...func(T) error) []error {
	batch := make([]*writeJob[T], len(writes))
	for i, w := range writes {
		batch[i] = &writeJob[T]{ctx: context.Background(), run: w, done: make(chan error, 1), start: time.Now()}
	}
	commit(batch)
	errs := make([]error, len(batch))
	for i, j := range batch {
		errs[i] = <-j.done
	}
	return errs
}
