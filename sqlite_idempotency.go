// sqlite_idempotency.go owns SQLite's Idempotency-Key records: a keyed
// create's claim, answer and drop in the group commit's transaction, the
// lookup, and the purge.

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The statements of a keyed create, prepared on the writer. A claim is an
// answer row with an empty body, which the same transaction fills in or
// deletes: nobody ever sees it so. It replaces an expired answer that the
// purge has not reached yet.
const (
	sqliteClaimIdem = `INSERT INTO idempotency (key_id, idem_key, fingerprint, status, body, created_us) VALUES (?1, ?2, ?3, 201, x'', ?4)
		ON CONFLICT (key_id, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = 201, body = x'', created_us = excluded.created_us
		WHERE idempotency.created_us <= ?5`
	sqliteSettleIdem = "UPDATE idempotency SET status = ?, body = ? WHERE key_id = ? AND idem_key = ?"
	sqliteDropIdem   = "DELETE FROM idempotency WHERE key_id = ? AND idem_key = ?"
)

// sqliteCreate runs insert, a create's one INSERT, in tx; refusal maps its
// error to the create's refusal (errConflict, errNoReference), or nil for
// an error that is not one. With an Idempotency-Key (w not nil) the key is
// claimed first, so that the unique (key_id, idem_key) is the backstop: a
// key with an answer stored makes the create errIdemExists before it
// writes anything. The answer to the outcome is then stored, or the claim
// dropped, in the same transaction as the row.
func sqliteCreate[Row any](s *sqliteStore, tx *batchTx, w *idemWrite[Row], insert func() error, row func() Row, refusal func(error) error) error {
	if w == nil {
		err := insert()
		if r := refusal(err); r != nil {
			return r
		}
		return err
	}
	res, err := tx.stmt(s.claimIdem).Exec(w.KeyID, w.Key, w.Fingerprint[:], w.Now.UnixMicro(), w.Since.UnixMicro())
	if err != nil {
		return err // the first statement: if it failed alone, nothing is left of this write
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return fmt.Errorf("claim an idempotency key: %v", err)
		}
		return errIdemExists
	}
	err = insert()
	refused := refusal(err)
	switch {
	case err == nil, refused != nil:
	case statementOnly(err):
		refused = err // it failed alone: the claim goes, the batch goes on
	default:
		return err // the batch fails, and the claim with it
	}
	if _, body, keep := w.settle(row(), refused); keep {
		_, err = tx.stmt(s.settleIdem).Exec(w.Status, body, w.KeyID, w.Key)
	} else {
		_, err = tx.stmt(s.dropIdem).Exec(w.KeyID, w.Key)
	}
	if err != nil {
		// Not a constraint error that fails this write alone (%v, not %w):
		// the row may be written, so the whole batch must fail.
		return fmt.Errorf("store an idempotent answer: %v", err)
	}
	return refused
}

func (s *sqliteStore) BeginIdempotent(ctx context.Context, r idemRequest) (*idemAnswer, error) {
	var a idemAnswer
	var fp []byte
	err := s.r.QueryRowContext(ctx, "SELECT fingerprint, status, body FROM idempotency WHERE key_id = ? AND idem_key = ? AND created_us > ?",
		r.KeyID, r.Key, r.Since.UnixMicro()).Scan(&fp, &a.Status, &a.Body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read an idempotent answer: %w", describe(err))
	}
	copy(a.Fingerprint[:], fp)
	return &a, nil
}

// EndIdempotent has nothing to do: SQLite's marks are the process's own.
func (s *sqliteStore) EndIdempotent(context.Context, idemRequest) error { return nil }

func (s *sqliteStore) PurgeIdempotency(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM idempotency WHERE (key_id, idem_key) IN
		(SELECT key_id, idem_key FROM idempotency WHERE created_us <= ? ORDER BY created_us LIMIT ?)`, before.UnixMicro(), limit)
	if err != nil {
		return 0, fmt.Errorf("purge idempotent answers: %w", describe(err))
	}
	n, err := res.RowsAffected()
	return int(n), err
}
