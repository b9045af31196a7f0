// sqlite_copy.go is SQLite's half of "petstore copy" (copy.go): counting,
// reading and writing a whole table.

package main

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"time"
)

// sqliteStore must stay a copier: petstore copy reads and fills either
// store through it.
var _ copier = (*sqliteStore)(nil)

func (s *sqliteStore) rowCount(ctx context.Context, t copyTable) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM "+t.name).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", t.name, sqliteDescribe(err))
	}
	return n, nil
}

// copyOut reads SQLite's values, which its driver gives as int64, string,
// []byte or nil; times are RFC 3339 text.
func (s *sqliteStore) copyOut(ctx context.Context, t copyTable) iter.Seq2[[]any, error] {
	return seqOf(func(fn func([]any) error) error {
		rows, err := s.r.QueryContext(ctx, "SELECT "+strings.Join(t.names(), ", ")+" FROM "+t.name+" ORDER BY "+t.order)
		if err != nil {
			return fmt.Errorf("read %s: %w", t.name, sqliteDescribe(err))
		}
		defer rows.Close()
		for rows.Next() {
			row := make([]any, len(t.cols))
			ptrs := make([]any, len(row))
			for i := range row {
				ptrs[i] = &row[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return fmt.Errorf("read %s: %w", t.name, sqliteDescribe(err))
			}
			for i, c := range t.cols {
				if v, ok := row[i].(string); ok && c.kind == colTime {
					tm, err := time.Parse(time.RFC3339Nano, v)
					if err != nil {
						return fmt.Errorf("read %s.%s: %w", t.name, c.name, err)
					}
					row[i] = tm.UTC()
				}
			}
			if err := fn(row); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read %s: %w", t.name, sqliteDescribe(err))
		}
		return nil
	})
}

// idsHandedOut is sqlite_sequence's for an AUTOINCREMENT table, or the
// highest id if that is higher (categories: never deleted).
func (s *sqliteStore) idsHandedOut(ctx context.Context, t copyTable) (int64, error) {
	if !t.hasID() {
		return 0, nil
	}
	var n int64
	err := s.r.QueryRowContext(ctx, "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = ?), 0), (SELECT coalesce(max(id), 0) FROM "+t.name+"))", t.name).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the id sequence of %s: %w", t.name, sqliteDescribe(err))
	}
	return n, nil
}

// copyIn writes on the writer connection, in one transaction. A new row
// gets the largest id + 1 (api_keys: past the highest ever inserted, by
// AUTOINCREMENT), so the ids written set where new ones start.
func (s *sqliteStore) copyIn(ctx context.Context, tables []copyTable, floors []int64, rows func(copyTable) iter.Seq2[[]any, error], check func([]int64) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return sqliteDescribe(err)
	}
	defer tx.Rollback()
	written := make([]int64, len(tables))
	for ti, t := range tables {
		if t.replace {
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+t.name); err != nil {
				return fmt.Errorf("write %s: %w", t.name, sqliteDescribe(err))
			}
		}
		stmt, err := tx.PrepareContext(ctx, "INSERT INTO "+t.name+" ("+strings.Join(t.names(), ", ")+") VALUES (?"+
			strings.Repeat(", ?", len(t.cols)-1)+")")
		if err != nil {
			return fmt.Errorf("write %s: %w", t.name, sqliteDescribe(err))
		}
		for row, err := range rows(t) {
			if err != nil {
				return err
			}
			for i, v := range row {
				if tm, ok := v.(time.Time); ok {
					row[i] = tm.UTC().Format(time.RFC3339Nano)
				}
			}
			if _, err := stmt.ExecContext(ctx, row...); err != nil {
				return fmt.Errorf("write %s: %w", t.name, sqliteDescribe(err))
			}
			written[ti]++
		}
		stmt.Close()
		// An AUTOINCREMENT table (pets, orders, api_keys) starts past the
		// source's highest id ever handed out, deleted rows' too.
		if t.hasID() && floors[ti] > 0 {
			for _, q := range []string{`INSERT INTO sqlite_sequence (name, seq) SELECT ?1, 0
				WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?1)
				AND EXISTS (SELECT 1 FROM sqlite_schema WHERE name = ?1 AND sql LIKE '%AUTOINCREMENT%')`,
				"UPDATE sqlite_sequence SET seq = max(seq, ?2) WHERE name = ?1"} {
				if _, err := tx.ExecContext(ctx, q, t.name, floors[ti]); err != nil {
					return fmt.Errorf("set the id sequence of %s: %w", t.name, sqliteDescribe(err))
				}
			}
		}
	}
	if err := check(written); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return sqliteDescribe(err)
	}
	s.categoriesGen.Add(1)
	return nil
}
