// sqlite_keys.go owns SQLite's queries of the API keys (their bans
// included) and of the day counts.

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

const sqliteKeyColumns = "id, hash, name, plan, rpm, rpd, env, created_at, revoked_at IS NOT NULL, banned_until, expires_at, scope, " +
	"coalesce(lineage, id), coalesce(replaces, 0), last_used_at, seq"

func sqliteScanKey(sc interface{ Scan(...any) error }) (apiKey, error) {
	var k apiKey
	var hash []byte
	var rpm, rpd sql.NullInt64
	var created string
	var banned, expires, used sql.NullString
	if err := sc.Scan(&k.ID, &hash, &k.Name, &k.Plan, &rpm, &rpd, &k.Env, &created, &k.Revoked, &banned, &expires, &k.Scope,
		&k.Lineage, &k.Replaces, &used, &k.seq); err != nil {
		return k, err
	}
	if used.Valid {
		k.LastUsedAt, _ = time.Parse(time.RFC3339, used.String)
	}
	copy(k.Hash[:], hash)
	k.RPM, k.RPD = rpm.Int64, rpd.Int64
	k.CreatedAt, _ = time.Parse(time.RFC3339, created)
	if banned.Valid {
		k.BannedUntil, _ = time.Parse(time.RFC3339, banned.String)
	}
	if expires.Valid {
		k.ExpiresAt, _ = time.Parse(time.RFC3339Nano, expires.String)
	}
	return k, nil
}

// sqliteTime is t as SQLite keeps it, or NULL for the zero time.
func sqliteTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
}

func (s *sqliteStore) CreateKey(ctx context.Context, spec keySpec) (apiKey, error) {
	rpm, rpd := spec.limits()
	created := s.now().UTC().Format(time.RFC3339)
	row := s.w.QueryRowContext(ctx,
		"INSERT INTO api_keys (hash, name, plan, rpm, rpd, env, created_at, expires_at, scope, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "+nextSeq+") RETURNING "+sqliteKeyColumns,
		spec.Hash[:], spec.Name, spec.Plan, rpm, rpd, spec.Env, created, sqliteTime(spec.ExpiresAt), spec.scope())
	k, err := sqliteScanKey(row)
	if err != nil {
		return apiKey{}, fmt.Errorf("insert key: %w", sqliteDescribe(err))
	}
	return k, nil
}

func (s *sqliteStore) KeysSince(ctx context.Context, seq int64) ([]apiKey, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+sqliteKeyColumns+" FROM api_keys WHERE seq > ? ORDER BY id", seq)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", sqliteDescribe(err))
	}
	defer rows.Close()
	var keys []apiKey
	for rows.Next() {
		k, err := sqliteScanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list keys: %w", sqliteDescribe(err))
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys: %w", sqliteDescribe(err))
	}
	return keys, nil
}

// CreateFirstKey inserts the key in one statement on the one writer
// connection, so that of two processes that start at once, one does.
func (s *sqliteStore) CreateFirstKey(ctx context.Context, hash [32]byte, name, env string) (apiKey, bool, error) {
	created := s.now().UTC().Format(time.RFC3339)
	row := s.w.QueryRowContext(ctx, "INSERT INTO api_keys (hash, name, plan, env, created_at, seq) "+
		"SELECT ?, ?, 'free', ?, ?, "+nextSeq+" WHERE NOT EXISTS (SELECT 1 FROM api_keys) RETURNING "+sqliteKeyColumns,
		hash[:], name, env, created)
	k, err := sqliteScanKey(row)
	if errors.Is(err, sql.ErrNoRows) {
		return apiKey{}, false, nil
	}
	if err != nil {
		return apiKey{}, false, fmt.Errorf("insert key: %w", sqliteDescribe(err))
	}
	return k, true, nil
}

// SchemaVersion reads golang-migrate's record of the schema.
func (s *sqliteStore) SchemaVersion(ctx context.Context) (uint, error) {
	var v uint
	if err := s.r.QueryRowContext(ctx, "SELECT version FROM schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", sqliteDescribe(err))
	}
	return v, nil
}

// DeploymentID reads the one row of deployment (migration 0008).
func (s *sqliteStore) DeploymentID(ctx context.Context) (string, error) {
	var id string
	if err := s.r.QueryRowContext(ctx, "SELECT id FROM deployment").Scan(&id); err != nil {
		return "", fmt.Errorf("read the deployment id: %w", sqliteDescribe(err))
	}
	return id, nil
}

func (s *sqliteStore) RevokeKey(ctx context.Context, id int64) error {
	return s.updateKey(ctx, id, "revoked_at = coalesce(revoked_at, ?1)", s.now().UTC().Format(time.RFC3339), "id = ?2")
}

// RotateKey inserts the new key and shortens the old one's life in one
// transaction on the one writer connection.
func (s *sqliteStore) RotateKey(ctx context.Context, id int64, hash [32]byte, until time.Time) (apiKey, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return apiKey{}, fmt.Errorf("rotate key %d: %w", id, sqliteDescribe(err))
	}
	defer tx.Rollback()
	var revoked bool
	switch err := tx.QueryRowContext(ctx, "SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = ?", id).Scan(&revoked); {
	case errors.Is(err, sql.ErrNoRows):
		return apiKey{}, errNotFound
	case err != nil:
		return apiKey{}, fmt.Errorf("rotate key %d: %w", id, sqliteDescribe(err))
	case revoked:
		return apiKey{}, errRevoked
	}
	row := tx.QueryRowContext(ctx, `INSERT INTO api_keys (hash, name, plan, rpm, rpd, env, created_at, banned_until, scope, replaces, lineage, seq)
		SELECT ?, name, plan, rpm, rpd, env, ?, banned_until, scope, id, coalesce(lineage, id), `+nextSeq+` FROM api_keys WHERE id = ?
		RETURNING `+sqliteKeyColumns, hash[:], s.now().UTC().Format(time.RFC3339), id)
	k, err := sqliteScanKey(row)
	if err == nil {
		_, err = tx.ExecContext(ctx, "UPDATE api_keys SET expires_at = min(coalesce(expires_at, ?1), ?1), seq = "+nextSeq+" WHERE id = ?2",
			sqliteTime(until), id)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return apiKey{}, fmt.Errorf("rotate key %d: %w", id, sqliteDescribe(err))
	}
	return k, nil
}

// SetKeyBan stores the ban's end to the nanosecond (RFC 3339), so that
// waiting out its Retry-After is enough after a restart too, on every key
// of the lineage.
func (s *sqliteStore) SetKeyBan(ctx context.Context, id int64, until time.Time) error {
	var v any
	if !until.IsZero() {
		v = until.UTC().Format(time.RFC3339Nano)
	}
	// The rows of the lineage of id: its first key's own and its rotations'.
	return s.updateKey(ctx, id, "banned_until = ?1", v, "(SELECT coalesce(lineage, id) FROM api_keys WHERE id = ?2) IN (id, lineage)")
}

// updateKey sets set (its one argument ?1) on the rows that where (its
// argument ?2, the key's id) picks.
func (s *sqliteStore) updateKey(ctx context.Context, id int64, set string, arg any, where string) error {
	res, err := s.w.ExecContext(ctx, "UPDATE api_keys SET "+set+", seq = "+nextSeq+" WHERE "+where, arg, id)
	if err != nil {
		return fmt.Errorf("update key %d: %w", id, sqliteDescribe(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update key %d: %w", id, err)
	} else if n == 0 {
		return errNotFound
	}
	return nil
}

func (s *sqliteStore) DayCounts(ctx context.Context, day string) (map[int64]int64, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT key_id, count FROM usage WHERE day = ?", day)
	if err != nil {
		return nil, fmt.Errorf("read day counts: %w", sqliteDescribe(err))
	}
	defer rows.Close()
	counts := map[int64]int64{}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("read day counts: %w", sqliteDescribe(err))
		}
		counts[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read day counts: %w", sqliteDescribe(err))
	}
	return counts, nil
}

// AddDayCounts writes all deltas, and the last use of the keys used, in
// one transaction.
func (s *sqliteStore) AddDayCounts(ctx context.Context, deltas []dayDelta, used []int64, at time.Time) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add day counts: %w", sqliteDescribe(err))
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage (key_id, day, count) VALUES (?, ?, ?)
		ON CONFLICT (key_id, day) DO UPDATE SET count = count + excluded.count`)
	if err != nil {
		return fmt.Errorf("add day counts: %w", sqliteDescribe(err))
	}
	defer stmt.Close()
	for _, d := range deltas {
		if _, err := stmt.ExecContext(ctx, d.KeyID, d.Day, d.N); err != nil {
			return fmt.Errorf("add day counts: %w", sqliteDescribe(err))
		}
	}
	minute := at.UTC().Truncate(time.Minute).Format(time.RFC3339)
	for _, id := range used {
		// RFC 3339 in UTC sorts as text. A row is written only when its
		// minute moves on.
		if _, err := tx.ExecContext(ctx, "UPDATE api_keys SET last_used_at = ?1 WHERE id = ?2 AND (last_used_at IS NULL OR last_used_at < ?1)", minute, id); err != nil {
			return fmt.Errorf("write last use: %w", sqliteDescribe(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add day counts: %w", sqliteDescribe(err))
	}
	return nil
}
