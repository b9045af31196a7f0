// postgres_names.go owns PostgreSQL's fill of the categories' name
// comparison keys (name_cmp): in bulk, in chunks, and what a create may
// assume of it meanwhile (postgres_catalog.go's CreateCategory checks it).

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// errPgNamesUnfilled refuses a create, for now, because a category without
// a comparison key may hold its name: one that an instance of schema 7 or
// 8 stored during a rolling upgrade, after this instance last filled keys.
var errPgNamesUnfilled = errors.New("categories without a comparison key were stored meanwhile")

// pgNameFill is what an instance knows of the categories' comparison keys:
// every category with an id up to filled either has its key in name_cmp
// or is a lookalike whose key an earlier category holds. So a name whose
// key no row holds in name_cmp is free, unless a category above filled
// has no key: a create's statement checks that under the catalog's lock,
// and is refused with errPgNamesUnfilled if so (categories become visible in
// id order, so none can appear below filled later).
type pgNameFill struct {
	mu     sync.Mutex // one fill at a time in this instance
	filled atomic.Int64
}

// fillNameCmp gives each category above filled without a comparison key
// its key, ASCII names first and then the others in id order, unless a row holds that key already (a lookalike
// stored before schema 9, or by an older instance, stays NULL), a chunk
// at a time, each under the catalog's lock, so that the fills and creates
// of all instances take turns. No other column changes: the list, its
// ETags and its pages stay as they were.
func (s *pgStore) fillNameCmp(ctx context.Context) error {
	s.names.mu.Lock()
	defer s.names.mu.Unlock()
	after := s.names.filled.Load()
	for {
		done, last, err := s.fillNameChunk(ctx, after)
		if err != nil {
			return fmt.Errorf("fill name keys: %w", describePostgres(err))
		}
		s.names.filled.Store(last)
		if done {
			return nil
		}
		after = last
	}
}

// fillNameChunk fills up to listChunk keys above after and returns the id
// up to which all are filled, and done when no key was missing above it.
func (s *pgStore) fillNameChunk(ctx context.Context, after int64) (done bool, last int64, err error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: "BEGIN; " + pgLockCatalog})
	if err != nil {
		return false, after, err
	}
	defer tx.Rollback(ctx) // after a commit, a no-op
	// ASCII names above after first, in one statement (as on SQLite: a row
	// at a time took 28 s a million): their key is their fold, which no
	// other ASCII name holds.
	if _, err := tx.Exec(ctx, `UPDATE categories SET name_cmp = fold WHERE name_cmp IS NULL AND id > $1
		AND octet_length(name) = char_length(name)
		AND NOT EXISTS (SELECT 1 FROM categories c WHERE c.name_cmp = categories.fold)`, after); err != nil {
		return false, after, err
	}
	rows, _ := tx.Query(ctx, "SELECT id, name FROM categories WHERE name_cmp IS NULL AND id > $1 ORDER BY id LIMIT $2", after, listChunk)
	type unfilled struct {
		ID   int64
		Name string
	}
	chunk, err := pgx.CollectRows(rows, pgx.RowToStructByPos[unfilled])
	if err != nil {
		return false, after, err
	}
	if len(chunk) == 0 {
		// All filled up to the highest id visible under the lock.
		err = tx.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM categories").Scan(&last)
		if err == nil {
			err = tx.Commit(ctx)
		}
		return true, max(after, last), err
	}
	// One statement for the chunk: its NOT EXISTS sees the keys stored
	// before it, not those it sets, so of the chunk's rows that share a
	// key only the first (in id order) is given it here, as a statement a
	// row would have done. A statement a row cost about 60 us.
	ids := make([]int64, 0, len(chunk))
	keys := make([]string, 0, len(chunk))
	seen := make(map[string]bool, len(chunk))
	for _, u := range chunk {
		if k := compareName(u.Name); !seen[k] {
			seen[k] = true
			ids = append(ids, u.ID)
			keys = append(keys, k)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE categories c SET name_cmp = u.cmp
		FROM unnest($1::bigint[], $2::text[]) AS u(id, cmp)
		WHERE c.id = u.id AND NOT EXISTS (SELECT 1 FROM categories h WHERE h.name_cmp = u.cmp)`, ids, keys); err != nil {
		return false, after, err
	}
	return false, chunk[len(chunk)-1].ID, tx.Commit(ctx)
}
