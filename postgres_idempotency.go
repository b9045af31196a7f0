// postgres_idempotency.go owns PostgreSQL's Idempotency-Key records: the
// in-flight marks that every instance sees (advisory locks, on connections
// of their own: pgIdemLocks), a keyed create's claim, answer and drop in
// the group commit's transaction, and the purge.

package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
// or drops its claim. (Its in-flight lock goes after the commit:
// EndIdempotent.)
const (
	pgSettleIdem = `UPDATE idempotency SET status = $3, body = $4 WHERE key_id = $1 AND idem_key = $2`
	pgDropIdem   = `DELETE FROM idempotency WHERE key_id = $1 AND idem_key = $2`
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
			b.errs[i] = pgRefusedBy(noRow, holder)
		} else {
			*id = *made
		}
		b.then = append(b.then, func(next *pgx.Batch) {
			if _, body, keep := w.settle(row(), b.errs[i]); keep {
				next.Queue(pgSettleIdem, w.KeyID, w.Key, w.Status, body)
			} else {
				next.Queue(pgDropIdem, w.KeyID, w.Key)
			}
		})
		return nil
	})
}

func (s *pgStore) BeginIdempotent(ctx context.Context, r idemRequest) (*idemAnswer, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	return s.idemLocks.begin(ctx, r)
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
	return s.idemLocks.end(ctx, r)
}

// PurgeIdempotency skips rows that another instance's purge holds. It
// also deletes the lapsed marks in idempotency_running, which binaries
// before the advisory locks wrote (see pgIdemLocks): one that died during
// a rolling upgrade leaves its marks behind.
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

// pgKeyedForm returns a create's statement (see pgKeyedCreate) without an
// Idempotency-Key and with one. Both end with holder, an expression of the
// name that holds the one sent, which may read the CTE "made" to look only
// when the INSERT made no row ("": none).
func pgKeyedForm(insert string, n int, holder string) (unkeyed, keyed string) {
	if holder == "" {
		holder = "NULL::text"
	}
	return `WITH made AS (` + fmt.Sprintf(insert, "") + `) SELECT (SELECT id FROM made), ` + holder, pgKeyedCreate(insert, n, holder)
}

// errPgReadOnlyServer: a lock connection's server is read-only.
var errPgReadOnlyServer = fmt.Errorf("%w: the server is read-only", errDBAway)

// pgIdemLockConns is how many connections an instance keeps for its
// Idempotency-Key locks; a key's hash picks one. One would be a queue that
// every keyed request waits in twice (lock, unlock): see BENCHMARKS.md.
const pgIdemLockConns = 4

// pgLockKeepAlive is the server's keepalive on the lock connections
// (tcp_keepalives_*): first probe after Idle, then every Interval, Count
// unanswered ones and the session ends, with its locks; so a vanished
// instance's locks go within about 30 s (tcp_user_timeout may end it
// sooner). The client's side is pgDial's.
var pgLockKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 4}

// pgIdemLocks holds the in-flight marks of keyed creates: a session-level
// advisory lock (pg_try_advisory_lock) on a hash of the schema, the
// lineage and the Idempotency-Key, taken on one of a few connections that
// the instance keeps for them alone, outside the pool, and unlocked after
// the create's transaction. A lock lives no longer than its session:
// PostgreSQL drops it when the instance dies, is SIGKILLed or is cut off
// (TCP keepalives: pgLockKeepAlive), so that idempotency_key_in_use is only
// ever about a request that is alive. The unique (key_id, idem_key) stays
// the backstop behind it: a create whose lock went with a broken
// connection, or that runs beside an older binary (which marks keys in
// idempotency_running, read by nobody now), still makes one row at most,
// and the other request replays its answer.
type pgIdemLocks struct {
	cfg    *pgx.ConnConfig
	schema string // the lock's scope: advisory locks are the database's
	conns  [pgIdemLockConns]pgLockConn

	mu   sync.Mutex
	held map[int64]pgHeldLock // by idemRequest.Owner
}

// pgLockConn is one lock connection: nil until first used, and again
// after it broke (the next use dials a new one). sem is its mutex, which a
// waiter can give up on.
type pgLockConn struct {
	sem   chan struct{}
	conn  *pgx.Conn
	gen   uint64      // which connection this is, counting from 1
	shut  bool        // closeAll ran: no new connection is dialled
	reset atomic.Bool // an unlock that could not run: close it before the next use
}

// pgHeldLock is a lock taken by a request that has not ended.
type pgHeldLock struct {
	key  int64
	conn int
	gen  uint64
}

func newPgIdemLocks(cfg *pgx.ConnConfig, schema string) *pgIdemLocks {
	l := &pgIdemLocks{cfg: pgLockConnConfig(cfg, "idempotency locks"), schema: schema, held: map[int64]pgHeldLock{}}
	for i := range l.conns {
		l.conns[i].sem = make(chan struct{}, 1)
	}
	return l
}

// pgLockConnConfig is cfg for a connection that holds advisory locks,
// outside the pool: the pool's dialer (pgFollowsPrimary), keepalives on
// the server's end too (pgLockKeepAlive), and app added to its
// application_name.
func pgLockConnConfig(cfg *pgx.ConnConfig, app string) *pgx.ConnConfig {
	c := cfg.Copy()
	// The server's side: a host that vanished without a word (no FIN) is
	// noticed and its session, with its locks, ended. A URL that sets these
	// wins.
	for k, v := range map[string]string{
		"tcp_keepalives_idle":     strconv.Itoa(int(pgLockKeepAlive.Idle.Seconds())),
		"tcp_keepalives_interval": strconv.Itoa(int(pgLockKeepAlive.Interval.Seconds())),
		"tcp_keepalives_count":    strconv.Itoa(pgLockKeepAlive.Count),
		"tcp_user_timeout":        strconv.FormatInt(pgTCPUserTimeout.Milliseconds(), 10),
	} {
		if c.RuntimeParams[k] == "" {
			c.RuntimeParams[k] = v
		}
	}
	// Named apart from the pool's in pg_stat_activity.
	c.RuntimeParams["application_name"] += " " + app
	return c
}

// pgIdemLockKey is the advisory lock of an Idempotency-Key in a schema:
// FNV-1a of the three, as an int64 (the same in every instance).
func pgIdemLockKey(schema string, keyID int64, key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(schema))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, keyID, 10))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int64(h.Sum64())
}

// pgBeginIdem reads a key's answer and, when there is none, tries its
// lock: one round trip. CASE runs the lock only when there is no answer.
// It also reads whether the server is read-only: a lock taken there (a
// fenced old primary) would keep no one else out.
const pgBeginIdem = `SELECT a.fingerprint, a.status, a.body, CASE WHEN a.status IS NULL THEN pg_try_advisory_lock($4) ELSE false END,
		current_setting('transaction_read_only') = 'on'
	FROM (SELECT) AS one LEFT JOIN (
		SELECT fingerprint, status, body FROM idempotency WHERE key_id = $1 AND idem_key = $2 AND created_us > $3
	) AS a ON true`

// begin returns r's stored answer or, when there is none, takes r's lock
// (until end), or is errInFlight when another session holds it. A lock
// connection that does not work is errUnavailable, as a pool's would be:
// a retry is safe, nothing was written. (Going on without the lock would
// be safe too, behind the unique constraint, but the database is most
// likely away for the create as well.)
func (l *pgIdemLocks) begin(ctx context.Context, r idemRequest) (*idemAnswer, error) {
	key := pgIdemLockKey(l.schema, r.KeyID, r.Key)
	i := int(uint64(key) % pgIdemLockConns)
	var fp, body []byte
	var status *int32
	var locked bool
	gen, err := l.use(ctx, i, func(ctx context.Context, conn *pgx.Conn) error {
		var readOnly bool
		if err := conn.QueryRow(ctx, pgBeginIdem, r.KeyID, r.Key, r.Since.UnixMicro(), key).Scan(&fp, &status, &body, &locked, &readOnly); err != nil {
			return err
		}
		if readOnly {
			return errPgReadOnlyServer
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("read an idempotent answer: %w", describePostgres(err))
	case status != nil:
		a := &idemAnswer{Status: int(*status), Body: body}
		copy(a.Fingerprint[:], fp)
		return a, nil
	case !locked:
		return nil, errInFlight
	}
	l.mu.Lock()
	l.held[r.Owner] = pgHeldLock{key: key, conn: i, gen: gen}
	l.mu.Unlock()
	return nil, nil
}

// end unlocks r's lock, if begin took one. A lock whose connection broke
// meanwhile went with it. When the unlock cannot run, the connection is
// closed before its next use: its session ends, and the lock with it. A
// connection to be reset (its host likely gone: pgConnReset) is closed
// instead of waiting for an unlock that may not come.
func (l *pgIdemLocks) end(ctx context.Context, r idemRequest) error {
	l.mu.Lock()
	h, ok := l.held[r.Owner]
	delete(l.held, r.Owner)
	l.mu.Unlock()
	if !ok {
		return nil
	}
	c := &l.conns[h.conn]
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		c.reset.Store(true)
		// Nothing may use this connection again for long (an idle
		// instance), and till then the key would be in use on every
		// instance: close it as soon as it is free, unless something
		// used (and so reset) it first.
		go func() {
			c.sem <- struct{}{}
			defer func() { <-c.sem }()
			if c.gen == h.gen && c.reset.Swap(false) {
				c.close()
			}
		}()
		return fmt.Errorf("%w: unlock an idempotency key: %w", errUnavailable, ctx.Err())
	}
	defer func() { <-c.sem }()
	if c.conn == nil || c.gen != h.gen {
		return nil
	}
	if c.reset.Swap(false) { // its host is likely gone: end the session instead
		c.close()
		return nil
	}
	if _, err := c.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", h.key); err != nil {
		c.close()
		return fmt.Errorf("unlock an idempotency key: %w", describePostgres(err))
	}
	return nil
}

// use runs fn on lock connection i, dialling it first if it has none, and
// returns that connection's gen. A connection that fails is closed; when
// it was an old one that broke (while idle, or its session was ended: a
// FATAL error), or whose server turned read-only (pgKeepsConn,
// errPgReadOnlyServer: after a failover), fn runs once more on a new one,
// which is dialled to the read-write host.
func (l *pgIdemLocks) use(ctx context.Context, i int, fn func(context.Context, *pgx.Conn) error) (uint64, error) {
	c := &l.conns[i]
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-c.sem }()
	// From here on, the caller's hang-up no longer counts, its deadline
	// does: a statement broken off would end the session (pgx closes a
	// connection whose context ends mid-statement), and with it the locks
	// of every other request on this connection.
	ctx, cancel := pgDetached(ctx)
	defer cancel()
	if c.reset.Swap(false) {
		c.close()
	}
	for {
		fresh := c.conn == nil
		if fresh && c.shut {
			// A request that outlived the shutdown (its timeout closed
			// its connection, not the handler) dials nothing that no one
			// would close.
			return 0, errClosing
		}
		if fresh {
			conn, err := pgx.ConnectConfig(ctx, l.cfg)
			if err != nil {
				return 0, err
			}
			c.conn = conn
			c.gen++
			c.reset.Store(false) // a reset was for the connection before this one
		}
		err := fn(ctx, c.conn)
		if err == nil {
			return c.gen, nil
		}
		// Whether the lock was taken is not known: the session goes.
		c.close()
		var pe *pgconn.PgError
		if fresh || ctx.Err() != nil || (errors.As(err, &pe) && pgKeepsConn(nil, pe)) {
			return 0, err // a statement's error would come again
		}
	}
}

// pgDetached is ctx without its cancellation but with its deadline.
func pgDetached(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), d)
	}
	return context.WithCancel(context.WithoutCancel(ctx))
}

// close ends the connection, and so its session and every lock in it;
// the caller holds c.sem.
func (c *pgLockConn) close() {
	if c.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.conn.Close(ctx)
	c.conn = nil
}

// resetAll has every lock connection closed before its next use: its host
// is likely gone (pgConnReset). The locks in it go with it; the unique
// (key_id, idem_key) stays the backstop.
func (l *pgIdemLocks) resetAll() {
	for i := range l.conns {
		l.conns[i].reset.Store(true)
	}
}

// closeAll closes every lock connection, for the store's Close.
func (l *pgIdemLocks) closeAll() {
	for i := range l.conns {
		c := &l.conns[i]
		c.sem <- struct{}{}
		c.close()
		c.shut = true
		<-c.sem
	}
}
