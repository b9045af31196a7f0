// postgres_replica.go owns reading near the user on PostgreSQL
// (DECISIONS.md section 20): the positions of Petstore-Read-After (WAL
// positions: the primary's after a COMMIT or a read, a standby's replay),
// the --db-replica pool and its lag monitor, and where each request's
// reads go: the replica when it has replayed what the request must see,
// else the primary.

package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgPrimaryPos is the primary's position now, in bytes of WAL: at or past
// the end of every commit record written before it runs (synchronous
// commit flushes the record before COMMIT returns; with
// synchronous_commit off, only the insert position is that far).
const pgPrimaryPos = `SELECT (CASE WHEN current_setting('synchronous_commit') = 'off' THEN pg_current_wal_insert_lsn()
	ELSE pg_current_wal_lsn() END - '0/0'::pg_lsn)::bigint`

// pgReplayPos is a standby's replay position (a primary given as the
// replica answers its own position): a query that starts after it sees
// every transaction committed up to it.
const pgReplayPos = `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
	ELSE pg_current_wal_lsn() END - '0/0'::pg_lsn)::bigint`

// pgReplicaTick is how often the monitor compares the replica's replay
// position with the primary's.
const pgReplicaTick = 100 * time.Millisecond

// pgReplicaTimeout bounds a read on the replica (and the monitor's look):
// a replica that does not answer sends reads to the primary, so it must
// not hold them long.
const pgReplicaTimeout = time.Second

// errPgReplicaBehind: the replica had not replayed the request's floor.
var errPgReplicaBehind = errors.New("the replica is behind the position asked for")

// pgReplica is the --db-replica pool, and what the monitor last saw of it.
type pgReplica struct {
	pool   *pgxpool.Pool
	wait   time.Duration // --replica-wait
	maxLag time.Duration // --replica-max-lag

	replayed atomic.Uint64 // its replay position, as last read
	up       atomic.Bool   // it answered the monitor's last look
	usable   atomic.Bool   // up, and at most maxLag behind
	lag      atomic.Int64  // nanoseconds short of the primary's last known position
	primary  atomic.Uint64 // the primary's highest position known

	mu      sync.Mutex
	samples []pgPosSample // the primary's positions past the replay position, oldest first

	posRead pgSharedRead // waiters for a position share the replica's answers

	reads     struct{ replica, lag, wait, err atomic.Uint64 }
	waits     atomic.Uint64 // reads that waited for the replay of their floor
	waitNanos atomic.Int64  // how long they waited in all
}

// pgPosSample is the primary's position as read at a time.
type pgPosSample struct {
	at  time.Time
	pos uint64
}

// pgMaxPosSamples bounds the samples kept while the replica is stuck: the
// oldest stay, so its lag goes on growing.
const pgMaxPosSamples = 1024

// pgOpenReplica makes the pool of the replica URL db with the primary's
// connection settings (postgres_conn.go), but to any listed host: a
// standby is what it is for. It connects lazily: a replica that is away
// at start costs nothing but the primary's reads.
func pgOpenReplica(db string, o storeOptions) (*pgReplica, error) {
	cfg, err := postgresConfig(db, o)
	if err != nil {
		return nil, fmt.Errorf("--db-replica: %w", err)
	}
	cc := cfg.ConnConfig
	if !pgSessionAttrsGiven(db) {
		cc.ValidateConnect = nil // pgFollowsPrimary's read-write, for several hosts
		cfg.PrepareConn = nil
	}
	cc.ConnectTimeout = min(cc.ConnectTimeout, pgReplicaTimeout)
	cfg.ConnConfig.RuntimeParams["application_name"] = cc.RuntimeParams["application_name"] + " (replica)"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("open --db-replica %s: %w", redactDB(db), err)
	}
	cc.Tracer.(*pgConnReset).pool.Store(pool)
	return &pgReplica{pool: pool, wait: o.replicaWait, maxLag: o.replicaMaxLag}, nil
}

// watchReplica looks at the replica every pgReplicaTick until the store
// closes.
func (s *pgStore) watchReplica() {
	t := time.NewTicker(pgReplicaTick)
	defer t.Stop()
	for {
		s.checkReplica()
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
	}
}

// checkReplica reads the primary's position, then the replica's, and
// judges the replica: usable while it answers and lags at most maxLag.
// Its lag is how long it has been short of the primary's last known
// position (0 when it has caught up): not the time since its last replay,
// which grows on an idle primary.
func (s *pgStore) checkReplica() {
	r := s.replica
	ctx, cancel := context.WithTimeout(context.Background(), pgReplicaTimeout)
	defer cancel()
	var p int64
	if err := s.pool.QueryRow(ctx, pgPrimaryPos).Scan(&p); err == nil {
		r.notePrimary(uint64(p))
	}
	r.mu.Lock()
	if last := len(r.samples) - 1; (last < 0 || r.samples[last].pos < r.primary.Load()) && len(r.samples) < pgMaxPosSamples {
		r.samples = append(r.samples, pgPosSample{time.Now(), r.primary.Load()})
	}
	r.mu.Unlock()
	var rp int64
	err := r.pool.QueryRow(ctx, pgReplayPos).Scan(&rp)
	if err != nil {
		r.up.Store(false)
		r.usable.Store(false)
		return
	}
	r.replayed.Store(uint64(rp))
	r.mu.Lock()
	i := 0
	for i < len(r.samples) && r.samples[i].pos <= uint64(rp) {
		i++
	}
	r.samples = append(r.samples[:0], r.samples[i:]...)
	lag := time.Duration(0)
	if len(r.samples) > 0 {
		lag = time.Since(r.samples[0].at)
	}
	r.mu.Unlock()
	r.lag.Store(int64(lag))
	r.up.Store(true)
	r.usable.Store(lag <= r.maxLag)
}

// notePrimary raises the primary's last known position to pos.
func (r *pgReplica) notePrimary(pos uint64) { pgRaise(&r.primary, pos) }

// noteReplayed raises the replica's replay position to pos, as a read saw
// it: the next reads that need no more wait for nothing. (The monitor
// sets it as it finds it, lower after a restart; a read checks it anyway.)
func (r *pgReplica) noteReplayed(pos uint64) { pgRaise(&r.replayed, pos) }

// pgRaise sets v to pos if pos is higher.
func pgRaise(v *atomic.Uint64, pos uint64) {
	for {
		old := v.Load()
		if pos <= old || v.CompareAndSwap(old, pos) {
			return
		}
	}
}

func (r *pgReplica) close() { r.pool.Close() }

func (r *pgReplica) stats() replicaStats {
	return replicaStats{Shown: true, Replica: r.reads.replica.Load(), Lag: r.reads.lag.Load(), Wait: r.reads.wait.Load(),
		Error: r.reads.err.Load(), Waits: r.waits.Load(), WaitSeconds: time.Duration(r.waitNanos.Load()).Seconds(),
		LagSeconds: time.Duration(r.lag.Load()).Seconds()}
}

// fromReplica decides, once per request, whether its reads go to the
// replica: only a read operation's, on a store with a replica that is up,
// lags at most --replica-max-lag, and has replayed the request's floor,
// waiting for it at most --replica-wait.
func (s *pgStore) fromReplica(ctx context.Context, st *readState) bool {
	if st.source != 0 {
		return st.source == readFromReplica
	}
	r := s.replica
	st.source = readFromPrimary
	switch {
	case r == nil || !st.replica:
		return false
	case !r.up.Load():
		r.reads.err.Add(1)
		return false
	case !r.usable.Load():
		r.reads.lag.Add(1)
		return false
	case st.floor > r.replayed.Load() && !r.waitFor(ctx, st.floor):
		r.reads.wait.Add(1)
		return false
	}
	st.source = readFromReplica
	r.reads.replica.Add(1)
	return true
}

// waitFor waits at most --replica-wait for the replica to replay pos; the
// waiters share its answers (pgSharedRead), so that they cost one query at a
// time however many they are.
func (r *pgReplica) waitFor(ctx context.Context, pos uint64) bool {
	if r.wait <= 0 {
		return false
	}
	start := time.Now()
	defer func() {
		r.waits.Add(1)
		r.waitNanos.Add(int64(time.Since(start)))
	}()
	ctx, cancel := context.WithTimeout(ctx, r.wait)
	defer cancel()
	for {
		at, err := r.posRead.read(ctx, func() (uint64, error) {
			ctx, cancel := context.WithTimeout(context.Background(), pgReplicaTimeout)
			defer cancel()
			var p int64
			err := r.pool.QueryRow(ctx, pgReplayPos).Scan(&p)
			return uint64(p), err
		})
		if err != nil {
			return false
		}
		if at >= pos {
			r.noteReplayed(at)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Millisecond):
		}
	}
}

// replicaFailed sends the rest of the request's reads to the primary after
// a read on the replica failed: behind the floor (a host of several that
// lags, or a replica restarted), or an error, after which the monitor
// decides when it is used again.
func (s *pgStore) replicaFailed(st *readState, err error) {
	st.source = readFromPrimary
	if errors.Is(err, errPgReplicaBehind) {
		s.replica.reads.wait.Add(1)
		return
	}
	s.replica.reads.err.Add(1)
	s.replica.up.Store(false)
	s.replica.usable.Store(false)
}

// readTracked is pgRead for a request with a read state: on the replica
// when fromReplica says so, else on the primary; either way with the
// position the rows reflect, which the request's answer carries. collect
// reads the rows (it is not generic, so that each row type does not get a
// copy of it: the binary's size).
func (s *pgStore) readTracked(ctx context.Context, st *readState, what string, collect func(pgx.Rows) error, query string, args ...any) error {
	if s.fromReplica(ctx, st) {
		traceReadServer(ctx, "replica")
		err := s.replica.read(ctx, st, collect, query, args...)
		if err == nil || ctx.Err() != nil { // the request's own end (gone, or its busy time) says nothing of the replica
			return err
		}
		s.replicaFailed(st, err)
		traceReadServer(ctx, "primary")
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(query, args...)
	b.Queue(pgPrimaryPos)
	br := s.pool.SendBatch(ctx, b)
	err := collect(pgBatchRows(br))
	var pos int64
	if err == nil {
		err = br.QueryRow().Scan(&pos)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, describePostgres(err))
	}
	st.saw(uint64(pos))
	if s.replica != nil {
		s.replica.notePrimary(uint64(pos))
	}
	return nil
}

// pgBatchRows is the rows of a batch's next query.
func pgBatchRows(br pgx.BatchResults) pgx.Rows {
	rows, _ := br.Query() // an error is the rows' own, which collect returns
	return rows
}

// read runs query on the replica between two reads of its replay
// position, in one round trip on one connection: the first must be at
// least the request's floor (errPgReplicaBehind), the second is the position
// the rows reflect.
func (r *pgReplica) read(ctx context.Context, st *readState, collect func(pgx.Rows) error, query string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, pgReplicaTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(pgReplayPos)
	b.Queue(query, args...)
	b.Queue(pgReplayPos)
	br := r.pool.SendBatch(ctx, b)
	var before, after int64
	err := br.QueryRow().Scan(&before)
	if err == nil {
		err = collect(pgBatchRows(br))
	}
	if err == nil {
		err = br.QueryRow().Scan(&after)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return fmt.Errorf("read from the replica: %w", describePostgres(err))
	case uint64(before) < st.floor:
		return errPgReplicaBehind
	}
	st.saw(uint64(after))
	r.noteReplayed(uint64(after))
	return nil
}

// replicaGen is CategoriesGen on the replica, for a request whose reads go
// there: ok is false when they went to the primary instead.
func (s *pgStore) replicaGen(ctx context.Context, st *readState) (gen uint64, ok bool, err error) {
	if !s.fromReplica(ctx, st) {
		return 0, false, nil
	}
	var id int64
	err = s.replica.read(ctx, st, func(rows pgx.Rows) error {
		defer rows.Close()
		if rows.Next() {
			if err := rows.Scan(&id); err != nil {
				return err
			}
		}
		return rows.Err()
	}, "SELECT coalesce(max(id), 0) FROM categories")
	if err != nil && ctx.Err() != nil { // the request's own end
		return 0, true, err
	}
	if err != nil {
		s.replicaFailed(st, err)
		return 0, false, nil
	}
	return uint64(id), true, nil
}

// writeAt is the group commit's write of a create, which notes its
// commit's position in the request's read state: the 201's header, and the
// lineage's last write. (A replay found in the flight gets the position
// with its answer: sendBatch.)
func (s *pgStore) writeAt(ctx context.Context, queue func(b *pgBatch) error) error {
	var at *pgBatch
	err := s.group.write(ctx, func(b *pgBatch) error {
		at = b
		return queue(b)
	})
	// A stale If-Match is an answer of a committed batch: its position goes
	// with the 412 too, so that the read of the row's new ETag it asks for
	// sees at least that much, from a replica too.
	if at == nil || err != nil && !errors.Is(err, errPrecondition) {
		return err
	}
	pos := at.pos // at is the batch's, shared by its creates: read only
	st := readStateOf(ctx)
	if pos == 0 && st != nil {
		// The commit went through but its position did not come back (the
		// connection broke after COMMIT's answer): any position read after
		// it covers the write.
		pos, _, _ = s.ReadPosition(ctx)
	}
	if pos > 0 {
		if st != nil {
			st.wrote(pos)
		}
		if s.replica != nil {
			s.replica.notePrimary(pos)
		}
	}
	return err
}

// ReadPosition is the primary's position now.
func (s *pgStore) ReadPosition(ctx context.Context) (uint64, bool, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var pos int64
	if err := s.pool.QueryRow(ctx, pgPrimaryPos).Scan(&pos); err != nil {
		return 0, true, fmt.Errorf("read the position: %w", describePostgres(err))
	}
	return uint64(pos), true, nil
}
