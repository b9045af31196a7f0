// postgres_idempotency.go owns PostgreSQL's Idempotency-Key records: the
// running marks that every instance sees, a keyed create's claim, answer
// and drop in the group commit's transaction, and the purge.

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgKeyedCreate makes a create's INSERT, whose n arguments are $1 to $n
// and whose "%s" is where its WHERE clause takes one more condition, the
// statement of a keyed create: it claims the key (replacing an expired
// answer), inserts the row only if the claim was made, and returns
// whether it was and the new row's id, or NULL. The claim is an answer
// with an empty body that the same transaction fills in or deletes
// (pgCreate): nobody ever sees it so. PostgreSQL would abort the whole
// transaction on a unique violation, so the claim's ON CONFLICT turns one
// into "not claimed", and the unique (key_id, idem_key) stays the backstop.
func pgKeyedCreate(insert string, n int, holder string) string {
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	return `WITH claim AS (
		INSERT INTO idempotency (key_id, idem_key, fingerprint, status, body, created_us) VALUES (` +
		p(1) + `, ` + p(2) + `, ` + p(3) + `, 201, '', ` + p(4) + `)
		ON CONFLICT (key_id, idem_key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status = 201, body = '', created_us = EXCLUDED.created_us
		WHERE idempotency.created_us <= ` + p(5) + ` RETURNING 1
	), made AS (` + fmt.Sprintf(insert, " AND EXISTS (SELECT 1 FROM claim)") + `)
	SELECT EXISTS (SELECT 1 FROM claim), (SELECT id FROM made), ` + holder
}

// The second round of a batch with keyed creates: each stores its answer,
// or drops its claim, and ends its running mark.
const (
	pgSettleIdem = `WITH done AS (DELETE FROM idempotency_running WHERE key_id = $1 AND idem_key = $2 AND owner = $3)
		UPDATE idempotency SET status = $4, body = $5 WHERE key_id = $1 AND idem_key = $2`
	pgDropIdem = `WITH done AS (DELETE FROM idempotency_running WHERE key_id = $1 AND idem_key = $2 AND owner = $3)
		DELETE FROM idempotency WHERE key_id = $1 AND idem_key = $2`
)

// pgCreate queues a create: insert with its args (unkeyed is the
// statement without an Idempotency-Key, keyed the one pgKeyedCreate made of
// it), which sets *id, or fails this write alone with noRow when it
// returns no row. With an Idempotency-Key, the answer to the outcome is
// stored, or the claim dropped, in the batch's second round, before the
// commit; a key with an answer stored is errIdemExists.
func pgCreate[Row any](b *pgBatch, w *idemWrite[Row], noRow error, id *int64, row func() Row, unkeyed, keyed string, args ...any) {
	if w == nil {
		b.insertID(noRow, id, unkeyed, args...)
		return
	}
	i := b.job
	args = append(args, w.KeyID, w.Key, w.Fingerprint[:], w.Now.UnixMicro(), w.Since.UnixMicro())
	b.Queue(keyed, args...).QueryRow(func(r pgx.Row) error {
		var claimed bool
		var made *int64
		var holder *string
		if err := r.Scan(&claimed, &made, &holder); err != nil {
			return err
		}
		if !claimed {
			b.errs[i] = errIdemExists
			return nil
		}
		if made == nil {
			b.errs[i] = refusedBy(noRow, holder)
		} else {
			*id = *made
		}
		b.then = append(b.then, func(next *pgx.Batch) {
			if _, body, keep := w.settle(row(), b.errs[i]); keep {
				next.Queue(pgSettleIdem, w.KeyID, w.Key, w.Owner, w.Status, body)
			} else {
				next.Queue(pgDropIdem, w.KeyID, w.Key, w.Owner)
			}
		})
		return nil
	})
}

// pgBeginIdem reads a key's answer and, when there is none, marks it
// running, unless another request's mark holds it: one statement, one
// round trip. A mark whose until_us has passed is taken over.
const pgBeginIdem = `WITH answer AS (
		SELECT fingerprint, status, body FROM idempotency WHERE key_id = $1 AND idem_key = $2 AND created_us > $3
	), mark AS (
		INSERT INTO idempotency_running (key_id, idem_key, owner, until_us) SELECT $1, $2, $4, $5 WHERE NOT EXISTS (SELECT 1 FROM answer)
		ON CONFLICT (key_id, idem_key) DO UPDATE SET owner = EXCLUDED.owner, until_us = EXCLUDED.until_us
		WHERE idempotency_running.until_us <= $6 RETURNING 1
	)
	SELECT a.fingerprint, a.status, a.body, EXISTS (SELECT 1 FROM mark) FROM (SELECT) AS one LEFT JOIN answer a ON true`

func (s *pgStore) BeginIdempotent(ctx context.Context, r idemRequest) (*idemAnswer, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var fp, body []byte
	var status *int32
	var marked bool
	err := s.pool.QueryRow(ctx, pgBeginIdem, r.KeyID, r.Key, r.Since.UnixMicro(), r.Owner, r.Until.UnixMicro(), r.Now.UnixMicro()).
		Scan(&fp, &status, &body, &marked)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read an idempotent answer: %w", describePostgres(err))
	case status != nil:
		a := &idemAnswer{Status: int(*status), Body: body}
		copy(a.Fingerprint[:], fp)
		return a, nil
	case !marked:
		return nil, errInFlight
	}
	return nil, nil
}

func (s *pgStore) IdempotentAnswer(ctx context.Context, r idemRequest) (*idemAnswer, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var fp []byte
	var a idemAnswer
	err := s.pool.QueryRow(ctx, "SELECT fingerprint, status, body FROM idempotency WHERE key_id = $1 AND idem_key = $2 AND created_us > $3",
		r.KeyID, r.Key, r.Since.UnixMicro()).Scan(&fp, &a.Status, &a.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read an idempotent answer: %w", describePostgres(err))
	}
	copy(a.Fingerprint[:], fp)
	return &a, nil
}

func (s *pgStore) EndIdempotent(ctx context.Context, r idemRequest) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, "DELETE FROM idempotency_running WHERE key_id = $1 AND idem_key = $2 AND owner = $3", r.KeyID, r.Key, r.Owner)
	if err != nil {
		return fmt.Errorf("end an idempotency key's mark: %w", describePostgres(err))
	}
	return nil
}

// PurgeIdempotency skips rows that another instance's purge holds; the
// lapsed running marks are those of requests whose instance died.
func (s *pgStore) PurgeIdempotency(ctx context.Context, before, now time.Time, limit int) (int, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, `WITH old AS (
			SELECT key_id, idem_key FROM idempotency WHERE created_us <= $1 ORDER BY created_us LIMIT $2 FOR UPDATE SKIP LOCKED
		), lapsed AS (
			DELETE FROM idempotency_running WHERE until_us <= $3
		)
		DELETE FROM idempotency i USING old WHERE i.key_id = old.key_id AND i.idem_key = old.idem_key`, before.UnixMicro(), limit, now.UnixMicro())
	if err != nil {
		return 0, fmt.Errorf("purge idempotent answers: %w", describePostgres(err))
	}
	return int(tag.RowsAffected()), nil
}

// keyedForm returns a create's statement (see pgKeyedCreate) without an
// Idempotency-Key and with one. Both end with holder, an expression of the
// name that holds the one sent, which may read the CTE "made" to look only
// when the INSERT made no row ("": none).
func keyedForm(insert string, n int, holder string) (unkeyed, keyed string) {
	if holder == "" {
		holder = "NULL::text"
	}
	return `WITH made AS (` + fmt.Sprintf(insert, "") + `) SELECT (SELECT id FROM made), ` + holder, pgKeyedCreate(insert, n, holder)
}
