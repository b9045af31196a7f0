// sqlite_acme.go owns SQLite's half of HTTPS from an ACME CA: the rows of
// acme_cache (migration 0010) that acme_cache.go reads and writes.

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

func (s *sqliteStore) ACMEGet(ctx context.Context, dir, key string) ([]byte, error) {
	var data []byte
	err := s.r.QueryRowContext(ctx, "SELECT data FROM acme_cache WHERE directory = ? AND key = ?", dir, key).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read the ACME cache: %w", sqliteDescribe(err))
	}
	return data, nil
}

func (s *sqliteStore) ACMEPut(ctx context.Context, dir, key string, data []byte) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO acme_cache (directory, key, data, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (directory, key) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
		dir, key, data, s.now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		return fmt.Errorf("write the ACME cache: %w", sqliteDescribe(err))
	}
	return nil
}

func (s *sqliteStore) ACMEDelete(ctx context.Context, dir, key string) error {
	if _, err := s.w.ExecContext(ctx, "DELETE FROM acme_cache WHERE directory = ? AND key = ?", dir, key); err != nil {
		return fmt.Errorf("delete from the ACME cache: %w", sqliteDescribe(err))
	}
	return nil
}

// ACMELock has nothing to take: one serve at a time holds a SQLite file
// (sqliteHoldDatabase), so no other instance can ask the CA meanwhile.
func (s *sqliteStore) ACMELock(context.Context) (func(), error) {
	return func() {}, nil
}
