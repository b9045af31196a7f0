// postgres_copy.go is PostgreSQL's half of "petstore copy" (copy.go):
// counting, reading and writing (with COPY) a whole table.

package main

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgStore must stay a copier: petstore copy reads and fills either store
// through it.
var _ copier = (*pgStore)(nil)

func (s *pgStore) rowCount(ctx context.Context, t copyTable) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+t.name).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", t.name, describePostgres(err))
	}
	return n, nil
}

// copyOut reads PostgreSQL's values, which pgx gives as int32 or int64,
// string, []byte, time.Time (a date too) or nil.
func (s *pgStore) copyOut(ctx context.Context, t copyTable) iter.Seq2[[]any, error] {
	return seqOf(func(fn func([]any) error) error {
		rows, err := s.pool.Query(ctx, "SELECT "+strings.Join(t.names(), ", ")+" FROM "+t.name+" ORDER BY "+t.order)
		if err != nil {
			return fmt.Errorf("read %s: %w", t.name, describePostgres(err))
		}
		defer rows.Close()
		for rows.Next() {
			row, err := rows.Values()
			if err != nil {
				return fmt.Errorf("read %s: %w", t.name, describePostgres(err))
			}
			for i, c := range t.cols {
				switch v := row[i].(type) {
				case int32:
					row[i] = int64(v)
				case time.Time:
					if c.kind == colDay {
						row[i] = v.Format(time.DateOnly)
					} else {
						row[i] = v.UTC()
					}
				}
			}
			if err := fn(row); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read %s: %w", t.name, describePostgres(err))
		}
		return nil
	})
}

// idsHandedOut is the identity sequence's last value, or the highest id
// if that is higher (rows written with their ids by a copy).
func (s *pgStore) idsHandedOut(ctx context.Context, t copyTable) (int64, error) {
	if !t.hasID() {
		return 0, nil
	}
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT greatest(coalesce(pg_sequence_last_value(pg_get_serial_sequence($1, 'id')::regclass), 0), (SELECT coalesce(max(id), 0) FROM "+t.name+"))", t.name).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the id sequence of %s: %w", t.name, describePostgres(err))
	}
	return n, nil
}

// copyIn writes each table with COPY, in one transaction, then sets each
// identity sequence to the highest id written or handed out at the source.
func (s *pgStore) copyIn(ctx context.Context, tables []copyTable, floors []int64, rows func(copyTable) iter.Seq2[[]any, error], check func([]int64) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return describePostgres(err)
	}
	defer tx.Rollback(ctx)
	written := make([]int64, len(tables))
	for ti, t := range tables {
		if t.replace {
			if _, err := tx.Exec(ctx, "DELETE FROM "+t.name); err != nil {
				return fmt.Errorf("write %s: %w", t.name, describePostgres(err))
			}
		}
		next, stop := iter.Pull2(rows(t))
		n, err := tx.CopyFrom(ctx, pgx.Identifier{t.name}, t.names(), pgx.CopyFromFunc(func() ([]any, error) {
			row, err, ok := next()
			if !ok || err != nil {
				return nil, err
			}
			for i, c := range t.cols {
				if v, ok := row[i].(string); ok && c.kind == colDay {
					day, err := time.Parse(time.DateOnly, v)
					if err != nil {
						return nil, fmt.Errorf("read %s.%s: %w", t.name, c.name, err)
					}
					row[i] = day
				}
			}
			return row, nil
		}))
		stop()
		if err != nil {
			return fmt.Errorf("write %s: %w", t.name, describePostgres(err))
		}
		written[ti] = n
		if t.hasID() {
			if _, err := tx.Exec(ctx, "SELECT setval(pg_get_serial_sequence($1, 'id'), greatest(max(id), $2)) FROM "+t.name+" HAVING count(*) > 0 OR $2 > 0", t.name, floors[ti]); err != nil {
				return fmt.Errorf("set the id sequence of %s: %w", t.name, describePostgres(err))
			}
		}
	}
	if err := check(written); err != nil {
		return err
	}
	return describePostgres(tx.Commit(ctx))
}
