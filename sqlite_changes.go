// sqlite_changes.go owns SQLite's changes of the catalog (issue 46): a
// pet replaced or deleted, an order read or deleted, each one write of
// the group commit with its If-Match checked in its own statement.

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// sqliteChange runs a change of row id of table in tx (sqliteChangeRow,
// whose statement matches no row that is missing or at a version match
// does not name): no row changed is errNotFound, or errPrecondition when
// the row is there, which only a stale If-Match leaves so. SQLite has one
// writer: nothing comes between the statement and the look.
func sqliteChange(tx *sqliteBatchTx, table string, id int64, scan func(*sql.Row) error, query string, args ...any) error {
	err := sqliteChangeRow(tx, scan, query, args...)
	if !errors.Is(err, errNotFound) {
		return err
	}
	var one int
	switch lerr := tx.QueryRow("SELECT 1 FROM "+table+" WHERE id = ?", id).Scan(&one); {
	case lerr == nil:
		return errPrecondition
	case !errors.Is(lerr, sql.ErrNoRows):
		return lerr // the look failed (I/O): the batch's failure, a 503, not a 404
	}
	return err
}

// sqliteVersionMatches is the statements' If-Match: ?2 is match.
const sqliteVersionMatches = "(?2 = '' OR instr(?2, ',' || version || ',') > 0)"

func (s *sqliteStore) ReplacePet(ctx context.Context, p Pet, match string) (Pet, error) {
	err := s.group.write(ctx, func(tx *sqliteBatchTx) error {
		return sqliteChange(tx, "pets", p.ID, func(row *sql.Row) error {
			err := row.Scan(&p.Version)
			if sqliteIsForeignKeyViolation(err) {
				return errNoReference
			}
			return err
		}, "UPDATE pets SET name = ?3, category_id = ?4, status = ?5, version = version + 1 WHERE id = ?1 AND "+sqliteVersionMatches+" RETURNING version",
			p.ID, match, p.Name, p.CategoryID, p.Status)
	})
	return p, wrapWrite(fmt.Sprintf("replace pet %d", p.ID), err, sqliteDescribe)
}

func (s *sqliteStore) DeletePet(ctx context.Context, id int64, match string) error {
	return s.deleteRow(ctx, "pets", id, match)
}

func (s *sqliteStore) DeleteOrder(ctx context.Context, id int64, match string) error {
	return s.deleteRow(ctx, "orders", id, match)
}

// deleteRow deletes row id of table; a row that another's foreign key
// names (a pet an order names) is errConflict.
func (s *sqliteStore) deleteRow(ctx context.Context, table string, id int64, match string) error {
	err := s.group.write(ctx, func(tx *sqliteBatchTx) error {
		return sqliteChange(tx, table, id, func(row *sql.Row) error {
			err := row.Scan(&id)
			if sqliteIsForeignKeyViolation(err) {
				return errConflict
			}
			return err
		}, "DELETE FROM "+table+" WHERE id = ?1 AND "+sqliteVersionMatches+" RETURNING id", id, match)
	})
	return wrapWrite(fmt.Sprintf("delete from %s %d", table, id), err, sqliteDescribe)
}

func (s *sqliteStore) Order(ctx context.Context, id int64) (Order, error) {
	var o Order
	err := s.r.QueryRowContext(ctx, "SELECT id, pet_id, quantity, status, created_at, version FROM orders WHERE id = ?", id).
		Scan(&o.ID, &o.PetID, &o.Quantity, &o.Status, &o.CreatedAt, &o.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return o, errNotFound
	}
	if err != nil {
		return o, fmt.Errorf("read order %d: %w", id, sqliteDescribe(err))
	}
	return o, nil
}
