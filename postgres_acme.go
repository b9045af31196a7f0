// postgres_acme.go owns PostgreSQL's half of HTTPS from an ACME CA: the
// rows of acme_cache (migration 0010) that acme_cache.go reads and writes,
// and the issuer lock that makes the instances on one database take turns
// at asking the CA (pgACMELock).

package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func (s *pgStore) ACMEGet(ctx context.Context, dir, key string) ([]byte, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var data []byte
	err := s.pool.QueryRow(ctx, "SELECT data FROM acme_cache WHERE directory = $1 AND key = $2", dir, key).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read the ACME cache: %w", describePostgres(err))
	}
	return data, nil
}

func (s *pgStore) ACMEPut(ctx context.Context, dir, key string, data []byte) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, `INSERT INTO acme_cache (directory, key, data, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (directory, key) DO UPDATE SET data = EXCLUDED.data, updated_at = EXCLUDED.updated_at`, dir, key, data, s.now().UTC())
	if err != nil {
		return fmt.Errorf("write the ACME cache: %w", describePostgres(err))
	}
	return nil
}

func (s *pgStore) ACMEDelete(ctx context.Context, dir, key string) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, "DELETE FROM acme_cache WHERE directory = $1 AND key = $2", dir, key); err != nil {
		return fmt.Errorf("delete from the ACME cache: %w", describePostgres(err))
	}
	return nil
}

func (s *pgStore) ACMELock(ctx context.Context) (func(), error) {
	return s.acmeLock.lock(ctx, s.busy)
}

// pgACMELock is the issuer lock: a session-level advisory lock on a hash of
// the schema and a fixed name, taken on a connection of its own, outside
// the pool, dialled for the lock and closed with it. A lock lives no
// longer than its session: an instance that dies, is SIGKILLed or is cut
// off (keepalives: pgLockKeepAlive) lets the next one take its turn. Its
// holder is alone in the instance too (acmeCache's turn), so the session's
// re-entrancy never comes into play. A holder whose connection breaks
// loses the lock without noticing: another instance may then order
// meanwhile, which costs one order more, never a wrong certificate.
type pgACMELock struct {
	cfg *pgx.ConnConfig
	key int64
}

// pgACMELockWait is how long one try at the lock waits in the server
// (lock_timeout) before the caller's context is looked at again.
const pgACMELockWait = time.Second

func newPgACMELock(cfg *pgx.ConnConfig, schema string) *pgACMELock {
	c := pgLockConnConfig(cfg, "acme lock")
	c.RuntimeParams["lock_timeout"] = fmt.Sprint(pgACMELockWait.Milliseconds())
	h := fnv.New64a()
	h.Write([]byte(schema))
	h.Write([]byte{0})
	h.Write([]byte("petstore acme issuer"))
	return &pgACMELock{cfg: c, key: int64(h.Sum64())}
}

// lock waits for the lock until ctx ends, trying it pgACMELockWait at a
// time so that no wait in the server outlives the caller's. busy bounds
// each statement's answer beyond that wait.
func (l *pgACMELock) lock(ctx context.Context, busy time.Duration) (func(), error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, fmt.Errorf("the ACME issuer lock: %w", describePostgres(err))
	}
	closeConn := func() {
		cctx, cancel := context.WithTimeout(context.Background(), busy)
		defer cancel()
		conn.Close(cctx)
	}
	for {
		// Not ctx itself: pgx closes a connection whose context ends
		// mid-statement, and the server would go on waiting for a client
		// that is gone. lock_timeout ends the wait instead.
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgACMELockWait+busy)
		var readOnly bool
		err := conn.QueryRow(qctx, "SELECT current_setting('transaction_read_only') = 'on', pg_advisory_lock($1)", l.key).Scan(&readOnly, nil)
		cancel()
		var pe *pgconn.PgError
		switch {
		case err == nil && readOnly: // a fenced old primary: the lock would keep no one out
			closeConn()
			return nil, fmt.Errorf("the ACME issuer lock: %w", errPgReadOnlyServer)
		case err == nil:
			return func() {
				uctx, cancel := context.WithTimeout(context.Background(), busy)
				defer cancel()
				conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", l.key)
				closeConn() // ends the session: the lock goes even if the unlock did not run
			}, nil
		case errors.As(err, &pe) && pe.Code == "55P03": // lock_timeout: another instance holds it
			if ctx.Err() != nil {
				closeConn()
				return nil, ctx.Err()
			}
		default:
			closeConn()
			return nil, fmt.Errorf("the ACME issuer lock: %w", describePostgres(err))
		}
	}
}

// errPgReadOnlyServer: the ACME lock's server is read-only.
var errPgReadOnlyServer = fmt.Errorf("%w: the server is read-only", errDBAway)

// pgLockKeepAlive is the server's keepalive on the ACME lock's connection
// (tcp_keepalives_*): first probe after Idle, then every Interval, Count
// unanswered ones and the session ends, with its lock; so a vanished
// instance's lock goes within about 30 s (tcp_user_timeout may end it
// sooner). The client's side is pgDial's.
var pgLockKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 4}

// pgLockConnConfig is cfg for a connection that holds an advisory lock,
// outside the pool: the pool's dialer (pgFollowsPrimary), keepalives on
// the server's end too (pgLockKeepAlive), and app added to its
// application_name.
func pgLockConnConfig(cfg *pgx.ConnConfig, app string) *pgx.ConnConfig {
	c := cfg.Copy()
	// The server's side: a host that vanished without a word (no FIN) is
	// noticed and its session, with its lock, ended. A URL that sets these
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
