// postgres_idempotency.go owns PostgreSQL's Idempotency-Key records: a
// keyed create's statement, which looks for an earlier answer, makes the
// row and stores its answer in one statement of the batch's flight
// (DECISIONS.md section 22), the answers built there around the new id,
// the lookups of the refusals, and the purge.

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgKeyedForm returns a create's statements without an Idempotency-Key
// and with one, named after name. insert is the create's INSERT, whose n
// arguments are $1 to $n, with a "%s" where its WHERE clause takes one
// more condition; holder is an expression of the name that holds the one
// sent, which may read the CTE "made" to look only when the INSERT made no
// row ("": none, and no conflict is ever answered).
//
// The keyed statement takes seven more arguments: the API key's id, the
// Idempotency-Key, the request's fingerprint, now and the expiry (Unix
// microseconds), and the bytes of the 201's body before and after the new
// id (NULL: not kept); with a holder, three more: the 409's body when the
// holder's name is the one sent, and the bytes before and after the
// holder's name, quoted, in the other 409 (pgConflictParts). In one
// statement, under the catalog's lock that orders every keyed create of
// every instance (pgLockCatalog), it reads the key's answer (prior); when
// there is none it inserts the row and stores the answer made of it
// (kept), a 201 or a 409 conflict; and it returns the row's id, the
// holder, the earlier answer and the answer kept. The unique
// (key_id, idem_key) stays the backstop: an answer that could not be
// stored (a row there that prior did not see, which the lock rules out)
// fails the statement (a division by zero), and the whole batch with it,
// rather than let a row be made without its answer.
func pgKeyedForm(name, insert string, n int, holder string) (unkeyed, keyed *pgStmt) {
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	conflict := holder != ""
	if !conflict {
		holder = "NULL::text"
	}
	unkeyed = &pgStmt{name, `WITH made AS (` + fmt.Sprintf(insert, "") + `) SELECT (SELECT id FROM made), ` + holder}
	answers := `SELECT 201 AS status, ` + p(6) + ` || convert_to(id::text, 'UTF8') AS body0, ` + p(7) + ` AS body1 FROM made`
	if conflict {
		// The holder's name quoted as Go's %q and then JSON quote it, for
		// names of printable ASCII (only \ and " are escaped, each by both);
		// another name waits for pgKeepLate.
		answers += ` UNION ALL SELECT 409, CASE WHEN name = $1 THEN ` + p(8) + `
			WHEN name ~ '^[ -~]*$' THEN ` + p(9) + ` || convert_to(replace(replace(name, chr(92), repeat(chr(92), 4)), chr(34), repeat(chr(92), 3) || chr(34)), 'UTF8') END,
			CASE WHEN name = $1 THEN ''::bytea ELSE ` + p(10) + ` END FROM held WHERE name IS NOT NULL`
	}
	keyed = &pgStmt{name + "_keyed", `WITH prior AS (
		SELECT fingerprint, status, body FROM idempotency WHERE key_id = ` + p(1) + ` AND idem_key = ` + p(2) + ` AND created_us > ` + p(5) + `
	), made AS (` + fmt.Sprintf(insert, " AND NOT EXISTS (SELECT 1 FROM prior)") + `
	), held AS (
		SELECT ` + holder + ` AS name WHERE NOT EXISTS (SELECT 1 FROM prior)
	), answer AS (
		SELECT status, body0 || body1 AS body FROM (` + answers + `) a WHERE body0 IS NOT NULL AND body1 IS NOT NULL
	), kept AS (
		INSERT INTO idempotency (key_id, idem_key, fingerprint, status, body, created_us)
		SELECT ` + p(1) + `, ` + p(2) + `, ` + p(3) + `, status, body, ` + p(4) + ` FROM answer
		ON CONFLICT (key_id, idem_key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status, body = EXCLUDED.body, created_us = EXCLUDED.created_us
		WHERE idempotency.created_us <= ` + p(5) + `
		RETURNING status, body
	)
	SELECT (SELECT id FROM made), (SELECT name FROM held), p.fingerprint, p.status, p.body, k.status, k.body,
		CASE WHEN EXISTS (SELECT 1 FROM answer) AND k.status IS NULL THEN 1 / (SELECT count(*)::int FROM kept) END
	FROM (SELECT) AS one LEFT JOIN prior p ON true LEFT JOIN kept k ON true`}
	return unkeyed, keyed
}

// pgIDMark is the id a 201's body is built with before the statement
// puts the new id in its place: pgCreate splits the body where it is (at
// `"id":` and it, when a name holds it too: no string can hold `"id":`
// unescaped).
const pgIDMark = 7340043210987654321

// pgNameMark is the holder's name a 409's body is built with before the
// statement puts the holder's there: a control character, which no name
// holds (validName), so that its quoted form is found once.
const pgNameMark = "\x01"

// pgBodyParts splits body around the first mark: nil, nil when it is not
// there (the answer is then not kept).
func pgBodyParts(body []byte, mark string) (before, after []byte) {
	i := bytes.Index(body, []byte(mark))
	if i < 0 {
		return nil, nil
	}
	return body[:i], body[i+len(mark):]
}

// pgCreate queues a create: with no Idempotency-Key (w nil) the statement
// unkeyed with args, which sets *id or fails this write alone with noRow
// when it makes no row; with one, keyed (pgKeyedForm), whose answer is
// built around the id (row is the row as made, *id aside) and, for a
// create refused as a conflict, around the holder's name (name is the one
// sent). A key with an answer stored already is errIdemExists, with that
// answer in w.Found.
func pgCreate[Row any](b *pgBatch, w *idemWrite[Row], noRow error, id *int64, row func() Row, name string, unkeyed, keyed *pgStmt, args ...any) {
	if w == nil {
		b.insertID(noRow, id, unkeyed, args...)
		return
	}
	i := b.job
	*id = pgIDMark
	var pre, post []byte
	if _, body, keep := w.answer(row(), nil); keep {
		mark := strconv.FormatInt(pgIDMark, 10)
		if bytes.Count(body, []byte(mark)) == 1 {
			pre, post = pgBodyParts(body, mark)
		} else if pre, post = pgBodyParts(body, `"id":`+mark); pre != nil { // a name that holds the mark too
			pre = append(pre, `"id":`...)
		}
	}
	*id = 0
	args = append(args, w.KeyID, w.Key, w.Fingerprint[:], w.Now.UnixMicro(), w.Since.UnixMicro(), pre, post)
	if errors.Is(noRow, errConflict) {
		_, same, _ := w.answer(row(), &nameTaken{name})
		// The mark quoted by %q, then by JSON: \"\\x01\".
		var pre409, post409 []byte
		if _, body, keep := w.answer(row(), &nameTaken{pgNameMark}); keep {
			pre409, post409 = pgBodyParts(body, `\\x01`)
		}
		args = append(args, same, pre409, post409)
	}
	b.queue(keyed, func(r pgx.Row) error {
		var made *int64
		var holder *string
		var fp, body, keptBody []byte
		var status, kept, guard *int32
		if err := r.Scan(&made, &holder, &fp, &status, &body, &kept, &keptBody, &guard); err != nil {
			return err
		}
		switch {
		case status != nil:
			a := &idemAnswer{Status: int(*status), Body: body}
			copy(a.Fingerprint[:], fp)
			w.Found = a
			b.found = append(b.found, a)
			b.errs[i] = errIdemExists
			return nil
		case made == nil:
			b.errs[i] = pgRefusedBy(noRow, holder)
		default:
			*id = *made
		}
		if kept != nil {
			w.Status, w.Body = int(*kept), keptBody
		}
		return nil
	}, args...)
}

// pgKeepLate stores the answer to a keyed create refused with err, when
// its statement could not build it (a conflict with a category whose name
// differs from the one sent and is not plain ASCII: see pgKeyedForm), in a
// statement of its own: the refusal stands for good (rows are never
// deleted or renamed), so a retry would get the same answer anyway. An
// answer stored meanwhile wins (errIdemExists, in w.Found); a store that
// fails leaves the refusal answered but not kept.
func pgKeepLate[Row any](ctx context.Context, s *pgStore, w *idemWrite[Row], row Row, err error) error {
	if w == nil || w.Status != 0 || w.Found != nil || !errors.Is(err, errConflict) {
		return err
	}
	status, body, keep := w.answer(row, err)
	if !keep {
		return err
	}
	qctx, cancel := s.op(ctx)
	defer cancel()
	var fp, prior []byte
	var priorStatus *int32
	qerr := s.pool.QueryRow(qctx, `WITH prior AS (
			SELECT fingerprint, status, body FROM idempotency WHERE key_id = $1 AND idem_key = $2 AND created_us > $6
		), kept AS (
			INSERT INTO idempotency (key_id, idem_key, fingerprint, status, body, created_us)
			SELECT $1, $2, $3, $4, $5, $7 WHERE NOT EXISTS (SELECT 1 FROM prior)
			ON CONFLICT (key_id, idem_key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status, body = EXCLUDED.body, created_us = EXCLUDED.created_us
			WHERE idempotency.created_us <= $6
			RETURNING 1
		)
		SELECT p.fingerprint, p.status, p.body FROM (SELECT) AS one LEFT JOIN prior p ON true`,
		w.KeyID, w.Key, w.Fingerprint[:], status, body, w.Since.UnixMicro(), w.Now.UnixMicro()).Scan(&fp, &priorStatus, &prior)
	switch {
	case qerr != nil:
		return err
	case priorStatus != nil:
		a := &idemAnswer{Status: int(*priorStatus), Body: prior}
		copy(a.Fingerprint[:], fp)
		w.Found = a
		return errIdemExists
	}
	w.Status, w.Body = status, body
	return err
}

// BeginIdempotent does not look and marks nothing: a keyed create's
// statement looks for an earlier answer in the create's own flight, under
// the catalog's lock, so that a request whose key another one is running
// waits for that one's commit and gets its answer (IdemWaits).
func (s *pgStore) BeginIdempotent(context.Context, idemRequest) (*idemAnswer, error) { return nil, nil }

// EndIdempotent has nothing to end.
func (s *pgStore) EndIdempotent(context.Context, idemRequest) error { return nil }

// IdemWaits: on PostgreSQL a request with the key of one still running,
// on any instance, waits for its commit (pgKeyedForm).
func (s *pgStore) IdemWaits() bool { return true }

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

// PurgeIdempotency skips rows that another instance's purge holds. It
// also deletes the lapsed marks in idempotency_running, which binaries
// before the advisory locks of section 15 wrote: one that died during a
// rolling upgrade leaves its marks behind.
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
