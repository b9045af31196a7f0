// postgres.go owns the PostgreSQL store: reading a postgres:// URL (and
// never showing its password), opening the pool, migrating, PostgreSQL's
// errors, and the chunked reads the lists share. Its queries are in
// postgres_catalog.go and postgres_keys.go.

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgDefaultMaxConns is the default of --db-max-conns: ten connections per
// instance, so that six instances stay within PostgreSQL's default
// max_connections of 100 and leave room for an operator's psql (and the
// ACME lock's connection, when one is held).
const pgDefaultMaxConns = 10

// pgStore is the Store on a PostgreSQL database, which any number of
// petstore processes may share. It uses pgx's own pool (pgxpool) rather
// than database/sql: its binary protocol and statement cache cost less per
// query, and its batches let the group commit send a whole batch of creates
// in one round trip. golang-migrate gets a database/sql handle of its own.
type pgStore struct {
	pool     *pgxpool.Pool
	acmeLock *pgACMELock // postgres_acme.go
	now      func() time.Time
	busy     time.Duration

	hosts  int                         // hosts the URL lists
	repl   atomic.Pointer[replication] // as last read (postgres_replication.go)
	closed chan struct{}               // closed by Close: the watch ends
	log    *slog.Logger

	written pgWriteMemory // the last acknowledged creates (postgres_lostwrites.go)
	server  *pgServerSeen // the server the pool's new connections reach
	checked atomic.Int64  // checks of written that ended (for the tests)

	group             *groupCommitter[*pgBatch]
	flights           pgFlightGate // the group commit's batches in flight (postgres_pipeline.go)
	categoriesGen     pgSharedRead
	categoryListReads atomic.Uint64
	names             pgNameFill // postgres_catalog.go
	replica           *pgReplica // --db-replica (postgres_replica.go); nil: none
}

// pgStore must stay a Store: what the handlers, the CLI and the upkeep use
// of either store.
var _ Store = (*pgStore)(nil)

// postgresConfig parses a postgres:// URL into the pool's configuration;
// the PG* variables and ~/.pgpass fill in what it leaves out, as they do
// for psql. Its errors never quote the password.
func postgresConfig(db string, o storeOptions) (*pgxpool.Config, error) {
	if err := checkPostgresURL(db); err != nil {
		return nil, err
	}
	shown := redactDB(db)
	u, _, err := parseDBURL(db)
	if err != nil {
		return nil, err // checkPostgresURL parsed it
	}
	// pgx knows postgres:// and postgresql:// in lower case only. (Not
	// u.String(): it writes postgres://?... as postgres:?..., which pgx
	// does not take.)
	cfg, err := pgxpool.ParseConfig(strings.ToLower(u.Scheme) + db[len(u.Scheme):])
	if err != nil {
		return nil, usagef("--db %s: %s", shown, withoutPassword(err.Error(), u))
	}
	cfg.MaxConns = pgDefaultMaxConns
	if o.maxConns > 0 {
		cfg.MaxConns = int32(o.maxConns)
	}
	pgFollowsPrimary(cfg, db, o.busy) // postgres_conn.go
	params := cfg.ConnConfig.RuntimeParams
	if params["application_name"] == "" {
		params["application_name"] = "petstore"
	}
	// The server's side of the busy timeout. A client that gives up closes
	// its connection, but a backend waiting for a lock does not notice:
	// lock_timeout ends its wait. And a petstore frozen or cut off inside a
	// transaction would hold its locks until TCP gives up (hours):
	// idle_in_transaction_session_timeout ends that session. Our
	// transactions never sit idle; a URL that sets these wins.
	ms := strconv.FormatInt(max(o.busy.Milliseconds(), 1), 10)
	if params["lock_timeout"] == "" {
		params["lock_timeout"] = ms
	}
	if params["idle_in_transaction_session_timeout"] == "" {
		params["idle_in_transaction_session_timeout"] = ms
	}
	return cfg, nil
}

// openPostgres opens the database that the URL db names. With o.migrate it
// applies the migrations the database lacks (golang-migrate holds an
// advisory lock meanwhile, so that instances starting at once migrate it
// once) and refuses a schema newer than this binary knows.
func openPostgres(ctx context.Context, db string, o storeOptions) (*pgStore, error) {
	cfg, err := postgresConfig(db, o)
	if err != nil {
		return nil, err
	}
	shown := redactDB(db)
	server := newPgServerSeen()
	cfg.AfterConnect = server.afterConnect // a reconnection to another server: postgres_lostwrites.go
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", shown, err)
	}
	// A database that does not answer fails the start once, within the
	// busy timeout, before the migrations try it again.
	pctx, cancel := context.WithTimeout(ctx, o.busy)
	defer cancel()
	var readOnly bool
	if err := pool.QueryRow(pctx, "SELECT current_setting('transaction_read_only') = 'on'").Scan(&readOnly); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open database %s: %w", shown, describePostgres(err))
	}
	// What writes (serve, migrate, keys) needs the primary; copy may read
	// from a standby.
	if readOnly && o.migrate {
		pool.Close()
		return nil, fmt.Errorf("open database %s: the database is read-only (a standby, or default_transaction_read_only is on): petstore writes to the primary", shown)
	}
	if o.migrate {
		if err := migratePostgres(cfg, shown); err != nil {
			pool.Close()
			return nil, err
		}
	}
	// The schema scopes the ACME lock: advisory locks
	// are the whole database's, which other deployments may share.
	var schema string
	sctx, cancel := context.WithTimeout(ctx, o.busy)
	defer cancel()
	if err := pool.QueryRow(sctx, "SELECT coalesce(current_schema(), '')").Scan(&schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open database %s: %w", shown, describePostgres(err))
	}
	s := &pgStore{pool: pool, acmeLock: newPgACMELock(cfg.ConnConfig, schema),
		now: o.now, busy: o.busy, hosts: pgHostCount(cfg.ConnConfig), closed: make(chan struct{}), log: pgLogOf(o), server: server}
	reset := cfg.ConnConfig.Tracer.(*pgConnReset)
	reset.pool.Store(pool)
	reset.seen.Store(server)
	s.flights.max = max(1, min(pgMaxFlights, int(cfg.MaxConns)-pgFlightsLeave))
	s.group = newGroupCommitter(s.commitBatch)
	if o.migrate {
		if err := s.fillNameCmp(ctx); err != nil {
			s.group.close()
			pool.Close()
			return nil, err
		}
	}
	s.readReplication(ctx) // unknown until it reads (Replication)
	go s.watchPrimary()
	if o.replica != "" {
		if s.replica, err = pgOpenReplica(o.replica, o); err != nil {
			s.Close()
			return nil, err
		}
		go s.watchReplica()
	}
	return s, nil
}

// migratePostgres applies the embedded migrations in migrations/postgres.
func migratePostgres(cfg *pgxpool.Config, shown string) error {
	conf := cfg.ConnConfig.Copy()
	// golang-migrate waits for its advisory lock (15 s at most, its
	// LockTimeout) while another instance migrates, and a migration may wait
	// for the locks of running instances' creates: not bounded by the busy
	// timeout.
	delete(conf.RuntimeParams, "lock_timeout")
	db := stdlib.OpenDB(*conf)
	db.SetMaxOpenConns(2)
	return migrateUp(db, "migrations/postgres", "pgx5", func(db *sql.DB) (database.Driver, error) {
		return migratepgx.WithInstance(db, &migratepgx.Config{})
	}, shown, describePostgres)
}

// op bounds one operation by the busy timeout: a database that does not
// answer costs a client at most that long, then a 503.
func (s *pgStore) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.busy)
}

func (s *pgStore) Close() error {
	close(s.closed)
	s.flights.drain() // then the loop's last batches fly in it
	s.group.close()
	s.pool.Close()
	if s.replica != nil {
		s.replica.close()
	}
	return nil
}

// Checkpoint has nothing to do: PostgreSQL's files are its own business,
// and pg_dump makes its backups.
func (s *pgStore) Checkpoint(context.Context) error { return nil }

func (s *pgStore) Ready(ctx context.Context) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ready: %w", describePostgres(err))
	}
	return nil
}

func (s *pgStore) SchemaVersion(ctx context.Context) (uint, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var v int64
	if err := s.pool.QueryRow(ctx, "SELECT version FROM schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", describePostgres(err))
	}
	return uint(v), nil
}

// DeploymentID reads the one row of deployment (migration 0008).
func (s *pgStore) DeploymentID(ctx context.Context) (string, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var id string
	if err := s.pool.QueryRow(ctx, "SELECT id FROM deployment").Scan(&id); err != nil {
		return "", fmt.Errorf("read the deployment id: %w", describePostgres(err))
	}
	return id, nil
}

func (s *pgStore) Stats() storeStats {
	_, writes := s.group.stats()
	st := storeStats{Batches: s.flights.flownCount(), Writes: writes, CategoryListReads: s.categoryListReads.Load()}
	if s.replica != nil {
		st.Replica = s.replica.stats()
	}
	return st
}

// describePostgres maps the errors a retry may cure to errUnavailable,
// keeping the cause: everything on the way to the server (a refused or
// broken connection, a timeout, a closed pool), and the server's own
// transient refusals (SQLSTATE classes 08 connection, 53 resources, 57
// operator intervention, 58 system; serialization failures, deadlocks,
// lock timeouts; a read-only server, as during a failover). Of those, the
// way to the server, a connection error, a shutdown and a read-only answer
// are errDBAway: an outage or a failover. Its other errors (a constraint,
// a bug in a query) stay as they are: a 500. Errors that are not the
// server's are taken as the way to it failing: a 503 for a bug of ours (a
// scan into the wrong type) is less harm than a 500 for an outage, which
// pgx reports in many shapes.
func describePostgres(err error) error {
	if err == nil || errors.Is(err, errUnavailable) || errors.Is(err, context.Canceled) {
		return err // described already, or the client went away
	}
	err = pgConnectErrorOnce(err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), pe.Code == "25006", pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03":
			return fmt.Errorf("%w: %w", errDBAway, err)
		case strings.HasPrefix(pe.Code, "53"), strings.HasPrefix(pe.Code, "57"), strings.HasPrefix(pe.Code, "58"),
			pe.Code == "40001", pe.Code == "40P01", pe.Code == "55P03":
			return fmt.Errorf("%w: %w", errUnavailable, err)
		}
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return fmt.Errorf("%w: %w", errDBAway, err)
}

// pgOnceError is an error with a message of its own, keeping its cause.
type pgOnceError struct {
	msg string
	err error
}

func (e *pgOnceError) Error() string { return e.msg }
func (e *pgOnceError) Unwrap() error { return e.err }

// pgConnectErrorOnce is err with the driver's failure to connect, if it holds
// one, saying each reason once, on one line. The driver tries each address
// twice under the default sslmode=prefer (with TLS, then without) and joins
// the reasons, so one refused port read "connection refused ... connection
// refused".
func pgConnectErrorOnce(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) || ce.Config == nil {
		return err
	}
	once := fmt.Sprintf("failed to connect to `user=%s database=%s`: %s", ce.Config.User, ce.Config.Database, pgEachOnce(errors.Unwrap(ce)))
	return &pgOnceError{msg: strings.Replace(err.Error(), ce.Error(), once, 1), err: err}
}

// pgEachOnce is err's message with the errors it joins each written once,
// separated by "; ".
func pgEachOnce(err error) string {
	if err == nil {
		return ""
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var parts []string
		for _, e := range j.Unwrap() {
			if p := pgEachOnce(e); !slices.Contains(parts, p) {
				parts = append(parts, p)
			}
		}
		return strings.Join(parts, "; ")
	}
	if inner := errors.Unwrap(err); inner != nil {
		if msg, in := err.Error(), inner.Error(); strings.HasSuffix(msg, in) {
			return msg[:len(msg)-len(in)] + pgEachOnce(inner)
		}
	}
	return err.Error()
}

// isPostgresError reports whether err came from the PostgreSQL server.
func isPostgresError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

// pgChunks calls fn with every row of query, in ascending id order, reading
// listChunk rows at a time (inChunks), as sqliteEachChunk does on SQLite: query's
// last three parameters are the id to start after, the highest id to read
// and the number of rows; table is the table it reads.
//
// An API operation's answer carries Petstore-Read-After, sent with the
// first chunk: when more chunks follow, the highest id of table is read
// then, within the answer's position, and the later chunks stop at it. By
// catalogStore's rules no row below it becomes visible later, so the list
// holds no row that the position does not, and a client that sends it to
// an instance reading a replica sees the same list or a longer one.
func pgChunks[T any](ctx context.Context, s *pgStore, what, table string, scan pgx.RowToFunc[T], idOf func(T) int64, fn func(T) error, query string, args ...any) error {
	top := int64(math.MaxInt64)
	return inChunks(func(after int64) ([]T, error) {
		rows, err := pgRead(ctx, s, what, scan, query, append(args, after, top, listChunk)...)
		if err == nil && after == 0 && len(rows) == listChunk && readStateOf(ctx) != nil {
			var tops []int64
			tops, err = pgRead(ctx, s, what, pgx.RowTo[int64], "SELECT coalesce(max(id), 0) FROM "+table)
			if err == nil {
				top = tops[0]
			}
		}
		return rows, err
	}, idOf, fn)
}

// pgEach calls fn with each row of a page that pgRead reads (the page's
// rows are read whole first), stopping at fn's first error.
func pgEach[T any](ctx context.Context, s *pgStore, what string, scan pgx.RowToFunc[T], fn func(T) error, query string, args ...any) error {
	rows, err := pgRead(ctx, s, what, scan, query, args...)
	if err != nil {
		return err
	}
	for _, v := range rows {
		if err := fn(v); err != nil {
			return err
		}
	}
	return nil
}

// pgRead runs query and returns every row that scan reads. what names the
// query in errors.
func pgRead[T any](ctx context.Context, s *pgStore, what string, scan pgx.RowToFunc[T], query string, args ...any) ([]T, error) {
	if st := readStateOf(ctx); st != nil { // an API operation's: postgres_replica.go
		var v []T
		err := s.readTracked(ctx, st, what, func(rows pgx.Rows) (err error) {
			v, err = pgx.CollectRows(rows, scan)
			return err
		}, query, args...)
		return v, err
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, describePostgres(err))
	}
	v, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, describePostgres(err))
	}
	return v, nil
}
