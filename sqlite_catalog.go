// sqlite_catalog.go owns SQLite's queries of the catalog: categories, pets
// and orders. Creates go through the group commit.

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteInsertID runs the prepared INSERT stmt in tx and sets *id to the new
// row's id. Exec and LastInsertId cost less than INSERT ... RETURNING
// read through a Rows (BenchmarkGroupCommitCreate; BENCHMARKS.md).
func sqliteInsertID(tx *sqliteBatchTx, stmt *sql.Stmt, id *int64, args ...any) error {
	res, err := tx.stmt(stmt).Exec(args...)
	if err != nil {
		return err
	}
	*id, err = res.LastInsertId()
	return err
}

func (s *sqliteStore) CreateCategory(ctx context.Context, c Category, fold string, idem *idemWrite[Category]) (Category, error) {
	cmp := compareName(c.Name)
	err := s.group.write(ctx, func(tx *sqliteBatchTx) error {
		return sqliteCreate(s, tx, idem, "categories", &c.ID, func() error {
			return sqliteInsertID(tx, s.insertCategory, &c.ID, c.Name, fold, cmp, c.Description)
		}, func() Category { return c }, func(err error) error {
			if sqliteIsUniqueViolation(err) {
				// The same transaction sees the row that holds the name,
				// even one made earlier in this batch.
				var name string
				if tx.stmt(s.categoryNamed).QueryRow(fold, cmp).Scan(&name) != nil {
					return errConflict
				}
				return conflictNamed(&name)
			}
			return nil
		})
	})
	if err != nil {
		return Category{}, wrapCreate("insert category", err, sqliteDescribe)
	}
	s.categoriesGen.Add(1)
	return c, nil
}

// sqliteFillASCIINames gives every category whose name is ASCII (as many
// characters as bytes) and has no comparison key its fold as its key,
// unless a row holds that key already.
const sqliteFillASCIINames = `UPDATE categories SET name_cmp = fold WHERE name_cmp IS NULL
	AND length(name) = length(CAST(name AS BLOB))
	AND NOT EXISTS (SELECT 1 FROM categories c WHERE c.name_cmp = categories.fold)`

// fillNameCmp gives each category without a comparison key (name_cmp,
// added by schema 9) its key, ASCII names first and then the others in
// id order, unless a row holds that key already: a lookalike stored before the rule stays NULL, and the earlier
// row's key refuses new lookalikes of both. No other column changes, so
// the list, its ETags and its pages stay as they were. It runs when the
// database is opened to be migrated, before any create: SQLite has one
// process writing, so no row is written without a key after it.
func (s *sqliteStore) fillNameCmp(ctx context.Context) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fill name keys: %w", sqliteDescribe(err))
	}
	defer tx.Rollback()
	// ASCII names first, all in one statement: a million of them took 28 s
	// a row at a time. Their key is their fold (compareName's shortcut is
	// foldName's), which no other ASCII name holds; one that a non-ASCII
	// row filled before holds stays NULL, as below.
	if _, err := tx.ExecContext(ctx, sqliteFillASCIINames); err != nil {
		return fmt.Errorf("fill name keys: %w", sqliteDescribe(err))
	}
	type unfilled struct {
		id   int64
		name string
	}
	fill, err := tx.PrepareContext(ctx, `UPDATE categories SET name_cmp = ?2 WHERE id = ?1
		AND NOT EXISTS (SELECT 1 FROM categories WHERE name_cmp = ?2)`)
	if err != nil {
		return fmt.Errorf("fill name keys: %w", sqliteDescribe(err))
	}
	defer fill.Close()
	for after := int64(0); ; {
		var chunk []unfilled
		rows, err := tx.QueryContext(ctx, "SELECT id, name FROM categories WHERE name_cmp IS NULL AND id > ? ORDER BY id LIMIT ?", after, listChunk)
		if err != nil {
			return fmt.Errorf("fill name keys: %w", sqliteDescribe(err))
		}
		for rows.Next() {
			var u unfilled
			if err := rows.Scan(&u.id, &u.name); err != nil {
				rows.Close()
				return fmt.Errorf("fill name keys: %w", sqliteDescribe(err))
			}
			chunk = append(chunk, u)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return fmt.Errorf("fill name keys: %w", sqliteDescribe(err))
		}
		if len(chunk) == 0 {
			break
		}
		for _, u := range chunk {
			if _, err := fill.ExecContext(ctx, u.id, compareName(u.name)); err != nil {
				return fmt.Errorf("fill name keys: %w", sqliteDescribe(err))
			}
		}
		after = chunk[len(chunk)-1].id
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fill name keys: %w", sqliteDescribe(err))
	}
	return nil
}

// sqliteCategoriesAfter reads the categories after an id, up to a limit.
const sqliteCategoriesAfter = "SELECT id, name, description FROM categories WHERE id > ? ORDER BY id LIMIT ?"

func (s *sqliteStore) EachCategory(ctx context.Context, fn func(Category) error) error {
	s.categoryListReads.Add(1)
	return sqliteEachChunk(ctx, s.r, "list categories", sqliteScanCategory, func(c Category) int64 { return c.ID }, fn,
		sqliteCategoriesAfter)
}

// CategoriesGen counts this process's creates: SQLite has one process
// serving a database.
func (s *sqliteStore) CategoriesGen(context.Context) (uint64, error) {
	return s.categoriesGen.Load(), nil
}

func (s *sqliteStore) localCategoriesGen() uint64 { return s.categoriesGen.Load() }

// sqliteStore must stay a localGen: the category list finds it only by a
// type assertion, so a renamed method would quietly lose the fast path.
var _ localGen = (*sqliteStore)(nil)

func (s *sqliteStore) EachCategoryAfter(ctx context.Context, afterID int64, limit int, fn func(Category) error) error {
	return sqliteEach(ctx, s.r, "list categories", sqliteScanCategory, fn,
		sqliteCategoriesAfter, afterID, limit)
}

func sqliteScanCategory(rows *sql.Rows) (Category, error) {
	var c Category
	var desc sql.NullString
	err := rows.Scan(&c.ID, &c.Name, &desc)
	if desc.Valid {
		c.Description = &desc.String
	}
	return c, err
}

func (s *sqliteStore) CreatePet(ctx context.Context, p Pet, idem *idemWrite[Pet]) (Pet, error) {
	err := s.group.write(ctx, func(tx *sqliteBatchTx) error {
		return sqliteCreate(s, tx, idem, "pets", &p.ID, func() error {
			return sqliteInsertID(tx, s.insertPet, &p.ID, p.Name, p.CategoryID, p.Status)
		}, func() Pet { return p }, sqliteNoReference)
	})
	if err != nil {
		return Pet{}, wrapCreate("insert pet", err, sqliteDescribe)
	}
	return p, nil
}

// sqliteNoReference is the refusal of a create whose row refers to nothing.
func sqliteNoReference(err error) error {
	if sqliteIsForeignKeyViolation(err) {
		return errNoReference
	}
	return nil
}

func (s *sqliteStore) EachPetAfter(ctx context.Context, f petFilter, afterID int64, limit int, fn func(Pet) error) error {
	return sqliteEach(ctx, s.r, "list pets", sqliteScanPet, fn, `SELECT id, name, category_id, status FROM pets
		WHERE (?1 = 0 OR category_id = ?1) AND (?2 = '' OR instr(?2, ',' || status || ',') > 0) AND id > ?3 ORDER BY id LIMIT ?4`,
		f.CategoryID, f.statusSet(), afterID, limit)
}

func (s *sqliteStore) Pet(ctx context.Context, id int64) (Pet, error) {
	var p Pet
	err := s.r.QueryRowContext(ctx, "SELECT id, name, category_id, status, version FROM pets WHERE id = ?", id).
		Scan(&p.ID, &p.Name, &p.CategoryID, &p.Status, &p.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return p, errNotFound
	}
	if err != nil {
		return p, fmt.Errorf("read pet %d: %w", id, sqliteDescribe(err))
	}
	return p, nil
}

func sqliteScanPet(rows *sql.Rows) (Pet, error) {
	var p Pet
	err := rows.Scan(&p.ID, &p.Name, &p.CategoryID, &p.Status)
	return p, err
}

func (s *sqliteStore) CreateOrder(ctx context.Context, o Order, idem *idemWrite[Order]) (Order, error) {
	o.CreatedAt = s.now().UTC().Format(time.RFC3339)
	err := s.group.write(ctx, func(tx *sqliteBatchTx) error {
		return sqliteCreate(s, tx, idem, "orders", &o.ID, func() error {
			return sqliteInsertID(tx, s.insertOrder, &o.ID, o.PetID, o.Quantity, o.Status, o.CreatedAt)
		}, func() Order { return o }, sqliteNoReference)
	})
	if err != nil {
		return Order{}, wrapCreate("insert order", err, sqliteDescribe)
	}
	return o, nil
}

func (s *sqliteStore) PetInventory(ctx context.Context) (map[string]int64, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT status, count(*) FROM pets GROUP BY status")
	if err != nil {
		return nil, fmt.Errorf("count pets: %w", sqliteDescribe(err))
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			return nil, fmt.Errorf("count pets: %w", sqliteDescribe(err))
		}
		counts[status] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count pets: %w", sqliteDescribe(err))
	}
	return counts, nil
}

func (s *sqliteStore) EachOrderAfter(ctx context.Context, afterID int64, limit int, fn func(Order) error) error {
	return sqliteEach(ctx, s.r, "list orders", func(rows *sql.Rows) (Order, error) {
		var o Order
		err := rows.Scan(&o.ID, &o.PetID, &o.Quantity, &o.Status, &o.CreatedAt)
		return o, err
	}, fn, "SELECT id, pet_id, quantity, status, created_at FROM orders WHERE id > ? ORDER BY id LIMIT ?", afterID, limit)
}

// sqliteStatementOnly reports whether a write's error undid that write's
// statement alone and left the batch's transaction as it was: only a
// constraint violation is known to, SQLite's ABORT undoing the statement.
// Other errors may have rolled the whole transaction back (SQLite does so
// when a statement is interrupted, as a cancelled context does, or on a
// full disk, an I/O error or no memory); the writes after it would then run
// and commit one by one outside it while all of them are answered with the
// commit's error. So any other error fails the batch, none of it answered
// yet, and its clients may retry.
func sqliteStatementOnly(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// sqliteChangeRow runs a write's UPDATE or DELETE in tx, which returns
// the row it changed (RETURNING) for scan, or none: then errNotFound, the
// write's own outcome (isOwnOutcome), which fails it alone in its batch.
// PostgreSQL's twin is pgBatch.changeRow.
func sqliteChangeRow(tx *sqliteBatchTx, scan func(*sql.Row) error, query string, args ...any) error {
	err := scan(tx.QueryRow(query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return errNotFound
	}
	return err
}

// sqliteBatchTx is the transaction that a batch of writes shares.
type sqliteBatchTx struct {
	*sql.Tx
	stmts [][2]*sql.Stmt // prepared statements and their forms in this transaction
}

// stmt returns s for use in the transaction, made once per batch rather
// than once per write.
func (tx *sqliteBatchTx) stmt(s *sql.Stmt) *sql.Stmt {
	for _, p := range tx.stmts {
		if p[0] == s {
			return p[1]
		}
	}
	ts := tx.Stmt(s)
	tx.stmts = append(tx.stmts, [2]*sql.Stmt{s, ts})
	return ts
}

// sqliteCommit returns the group commit's commit on SQLite's writer
// connection. SQLite undoes a statement that fails on a constraint (a
// unique or foreign key violation) alone, leaving the transaction open: a
// write that fails so, or with its own outcome (isOwnOutcome: a refusal
// once it has undone what it did, as sqliteCreate does; a row not found;
// a precondition failed), fails alone and the others commit.
func sqliteCommit(db *sql.DB) func(batch []*writeJob[*sqliteBatchTx]) {
	return func(batch []*writeJob[*sqliteBatchTx]) {
		results := make([]error, len(batch))
		err := func() error {
			sqlTx, err := db.Begin()
			if err != nil {
				return sqliteDescribe(err)
			}
			defer sqlTx.Rollback()
			tx := &sqliteBatchTx{Tx: sqlTx}
			for i, j := range batch {
				if err := j.ctx.Err(); err != nil {
					results[i] = err // the client is gone: do not write for it
					continue
				}
				if err := j.run(tx); err != nil {
					results[i] = err
					if !sqliteStatementOnly(err) && !isOwnOutcome(err) {
						return sqliteDescribe(err) // the transaction itself may be gone
					}
				}
			}
			if err := tx.Commit(); err != nil {
				return sqliteDescribe(err)
			}
			return nil
		}()
		for i, j := range batch {
			// Not made, through no fault of this write: safe to retry. That
			// holds for its own outcomes too: a 409 stored for a retry went
			// with the transaction, and must not be answered.
			if err != nil && (results[i] == nil || sqliteStatementOnly(results[i]) || isOwnOutcome(results[i])) {
				results[i] = fmt.Errorf("%w: the batch's transaction failed: %w", errUnavailable, err)
			}
			j.done <- results[i]
		}
	}
}
