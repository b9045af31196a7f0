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

// The statements of a keyed create, prepared on the writer. The answer
// replaces an expired one that the purge has not reached yet.
const (
	sqliteStoreIdem = `INSERT INTO idempotency (key_id, idem_key, fingerprint, status, body, created_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
		ON CONFLICT (key_id, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status, body = excluded.body,
		created_us = excluded.created_us WHERE idempotency.created_us <= ?7`
	sqliteLookupIdem = "SELECT fingerprint, status, body FROM idempotency WHERE key_id = ? AND idem_key = ? AND created_us > ?"
	sqliteHasIdem    = "SELECT EXISTS (SELECT 1 FROM idempotency WHERE key_id = ? AND idem_key = ? AND created_us > ?)"
)

// sqliteCreate runs insert, a create's one INSERT into table that sets
// *id, in tx;
// refusal maps its error to the create's refusal (errConflict,
// errNoReference), or nil for an error that is not one. With an
// Idempotency-Key (w not nil), the answer to the outcome is stored in the
// same transaction as the row, in one more statement. A key answered
// already is errIdemExists before anything is written; the primary key
// (key_id, idem_key) is the backstop behind that check: it undoes the row.
func sqliteCreate[Row any](s *sqliteStore, tx *sqliteBatchTx, w *idemWrite[Row], table string, id *int64, insert func() error, row func() Row, refusal func(error) error) error {
	if w != nil {
		// A retry's create writes nothing: not even an id drawn and undone.
		var answered bool
		if err := tx.stmt(s.hasIdem).QueryRow(w.KeyID, w.Key, w.Since.UnixMicro()).Scan(&answered); err != nil {
			return fmt.Errorf("%w: look up an idempotent answer: %v", errUnavailable, err)
		}
		if answered {
			return errIdemExists
		}
	}
	err := insert()
	refused := refusal(err)
	if w == nil {
		if refused != nil {
			return refused
		}
		return err
	}
	switch {
	case err == nil, refused != nil:
	default:
		return err // the row failed alone (a constraint), or the batch fails
	}
	status, body, keep := w.settle(row(), refused)
	if !keep {
		return refused
	}
	res, err := tx.stmt(s.storeIdem).Exec(w.KeyID, w.Key, w.Fingerprint[:], status, body, w.Now.UnixMicro(), w.Since.UnixMicro())
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err == nil && n == 0 {
		// Answered already: undo the row, if one was made.
		if refused == nil {
			_, err = tx.Exec("DELETE FROM "+table+" WHERE id = ?", *id)
		}
		if err == nil {
			return errIdemExists
		}
	}
	if err != nil {
		// Not a constraint error that fails this write alone (%v, not %w):
		// the row may be written, so the whole batch must fail, and a
		// retry is safe.
		return fmt.Errorf("%w: store an idempotent answer: %v", errUnavailable, err)
	}
	return refused
}

// BeginIdempotent does not look: the one process's running keys are in
// memory, and a create finds a stored answer itself, which spares the
// common case, a key never sent before, a query (BENCHMARKS.md, rows 9).
func (s *sqliteStore) BeginIdempotent(context.Context, idemRequest) (*idemAnswer, error) {
	return nil, nil
}

func (s *sqliteStore) IdempotentAnswer(ctx context.Context, r idemRequest) (*idemAnswer, error) {
	var a idemAnswer
	var fp []byte
	err := s.lookupIdem.QueryRowContext(ctx, r.KeyID, r.Key, r.Since.UnixMicro()).Scan(&fp, &a.Status, &a.Body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read an idempotent answer: %w", sqliteDescribe(err))
	}
	copy(a.Fingerprint[:], fp)
	return &a, nil
}

// IdemWaits is false: a request with the key of one still running gets
// 409 idempotency_key_in_use from the process's own marks.
func (s *sqliteStore) IdemWaits() bool { return false }

// EndIdempotent has nothing to do: SQLite's marks are the process's own.
func (s *sqliteStore) EndIdempotent(context.Context, idemRequest) error { return nil }

func (s *sqliteStore) PurgeIdempotency(ctx context.Context, before, _ time.Time, limit int) (int, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM idempotency WHERE (key_id, idem_key) IN
		(SELECT key_id, idem_key FROM idempotency WHERE created_us <= ? ORDER BY created_us LIMIT ?)`, before.UnixMicro(), limit)
	if err != nil {
		return 0, fmt.Errorf("purge idempotent answers: %w", sqliteDescribe(err))
	}
	n, err := res.RowsAffected()
	return int(n), err
}
