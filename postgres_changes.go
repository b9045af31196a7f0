// postgres_changes.go owns PostgreSQL's changes of the catalog (issue 46):
// a pet replaced or deleted, an order read or deleted. Each is one
// statement of the group commit's batch, under pgLockCatalog as the
// creates (catalogStore's rules), with its If-Match checked in it, on the
// primary; it never fails on a constraint, which would abort the batch's
// transaction, but answers its own outcome.

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// change queues the change of row id of table t, whose statement returns
// one row for scan, and notes its commit's position (writeAt). It is the
// one way a change or a delete reaches PostgreSQL, and so where the
// lost-writes check (postgres_lostwrites.go) learns of them: a row it
// remembers as this instance's last create is not judged while it
// changes, then is remembered as after holds it (the columns its create
// noted), or forgotten (a delete, or a change that did not happen or whose
// outcome is unknown). An acknowledged change is no loss.
func (s *pgStore) change(ctx context.Context, what string, t pgTable, id int64, after []any, scan func(pgx.Row) error, query string, args ...any) error {
	done := s.written.changing(t, id)
	err := s.writeAt(ctx, func(b *pgBatch) error {
		b.queue(pgStmtOf(query), b.own(scan), args...)
		return nil
	})
	if err != nil {
		after = nil
	}
	done(after...)
	return wrapWrite(fmt.Sprintf("%s %s %d", what, lostTables[t], id), err, describePostgres)
}

// pgOutcome is the own outcome of a change from what its statement read
// before it: the row's version (nil: no row), whether it changed it, and
// whether match names that version; refused is the outcome of a row that
// matched yet was not changed (a missing category, an order that names
// the pet).
func pgOutcome(version *int64, changed bool, match string, refused error) error {
	switch {
	case changed:
		return nil
	case version == nil:
		return errNotFound
	case match != "" && !matchesVersion(match, *version):
		return errPrecondition
	}
	return refused
}

// pgVersionMatches is the statements' If-Match: $2 is match.
const pgVersionMatches = "($2 = '' OR strpos($2, ',' || version || ',') > 0)"

func (s *pgStore) ReplacePet(ctx context.Context, p Pet, match string) (Pet, error) {
	err := s.change(ctx, "replace in", pgPets, p.ID, []any{p.Name, p.CategoryID, p.Status}, func(row pgx.Row) error {
		var before, after *int64
		if err := row.Scan(&before, &after); err != nil {
			return err
		}
		if after != nil {
			p.Version = *after
		}
		return pgOutcome(before, after != nil, match, errNoReference)
	}, `WITH changed AS (UPDATE pets SET name = $3, category_id = $4, status = $5, version = version + 1
			WHERE id = $1 AND `+pgVersionMatches+` AND EXISTS (SELECT 1 FROM categories WHERE id = $4) RETURNING version)
		SELECT (SELECT version FROM pets WHERE id = $1), (SELECT version FROM changed)`,
		p.ID, match, p.Name, p.CategoryID, p.Status)
	return p, err
}

func (s *pgStore) DeletePet(ctx context.Context, id int64, match string) error {
	return s.deleteRow(ctx, pgPets, id, match, "AND NOT EXISTS (SELECT 1 FROM orders WHERE pet_id = $1)")
}

func (s *pgStore) DeleteOrder(ctx context.Context, id int64, match string) error {
	return s.deleteRow(ctx, pgOrders, id, match, "")
}

// deleteRow deletes row id of table t unless unless's condition holds (an
// order names the pet): then errConflict.
func (s *pgStore) deleteRow(ctx context.Context, t pgTable, id int64, match, unless string) error {
	table := lostTables[t]
	return s.change(ctx, "delete from", t, id, nil, func(row pgx.Row) error {
		var before *int64
		var deleted bool
		if err := row.Scan(&before, &deleted); err != nil {
			return err
		}
		return pgOutcome(before, deleted, match, errConflict)
	}, `WITH deleted AS (DELETE FROM `+table+` WHERE id = $1 AND `+pgVersionMatches+` `+unless+` RETURNING id),
		noted AS (INSERT INTO deleted_rows (tbl, id) SELECT '`+table+`', id FROM deleted ON CONFLICT DO NOTHING)
		SELECT (SELECT version FROM `+table+` WHERE id = $1), EXISTS (SELECT 1 FROM deleted)`, id, match)
}

func (s *pgStore) Order(ctx context.Context, id int64) (Order, error) {
	orders, err := pgRead(ctx, s, fmt.Sprintf("read order %d", id), func(row pgx.CollectableRow) (Order, error) {
		var o Order
		var created time.Time
		err := row.Scan(&o.ID, &o.PetID, &o.Quantity, &o.Status, &created, &o.Version)
		o.CreatedAt = created.UTC().Format(time.RFC3339)
		return o, err
	}, "SELECT id, pet_id, quantity, status, created_at, version FROM orders WHERE id = $1", id)
	if err != nil {
		return Order{}, err
	}
	if len(orders) == 0 {
		return Order{}, errNotFound
	}
	return orders[0], nil
}
