// postgres_pipeline.go owns the flight of a batch of creates on PostgreSQL
// (DECISIONS.md section 22): the whole transaction sent in one write in
// the extended protocol's pipeline mode (BEGIN, the catalog's lock, the
// batch's prepared statements, COMMIT, Sync, the position, Sync) and its
// answers read after, so that a create costs one round trip to the
// primary and no lock is held across one.

package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgStmt is a statement of the creates' flights, prepared on each
// connection under its name the first time the connection sends it (the
// Parse travels in the same flight, before its first use). Its parameter
// types are those of the Go values it is sent with (pgParamOID), the same
// every time.
type pgStmt struct {
	name string
	sql  string
}

// The statements every flight sends around the batch's own.
var (
	pgStmtBegin    = &pgStmt{"petstore_begin", "BEGIN"}
	pgStmtLock     = &pgStmt{"petstore_lock_catalog", pgLockCatalog}
	pgStmtCommit   = &pgStmt{"petstore_commit", "COMMIT"}
	pgStmtPosition = &pgStmt{"petstore_position", pgPrimaryPos}
)

// pgStmts are the statements pgStmtOf named, by their SQL.
var pgStmts sync.Map

// pgStmtOf is the statement of sql, named after a hash of it, for a write
// whose SQL is not one of the named ones.
func pgStmtOf(sql string) *pgStmt {
	if st, ok := pgStmts.Load(sql); ok {
		return st.(*pgStmt)
	}
	h := fnv.New64a()
	h.Write([]byte(sql))
	st, _ := pgStmts.LoadOrStore(sql, &pgStmt{fmt.Sprintf("petstore_%016x", h.Sum64()), sql})
	return st.(*pgStmt)
}

// pgPreparedKey is where a connection's CustomData keeps the statements
// prepared on it, with their descriptions (map[*pgStmt]*pgconn.StatementDescription).
const pgPreparedKey = "petstore prepared"

// pgBinary asks for every parameter and result column in binary.
var pgBinary = []int16{pgtype.BinaryFormatCode}

// pgBatch is a batch of creates on its way to PostgreSQL: one statement
// per write, sent together and answered together.
type pgBatch struct {
	queued []pgQueued
	errs   []error // each write's own failure, by its index in the batch
	job    int     // the index of the write queuing now
	pos    uint64  // the primary's position after the COMMIT (postgres_replica.go); 0: unknown
	found  []*idemAnswer
	// rtt is how long BEGIN's answer took, which the server sends at once
	// (a Flush follows it): the round trip to the primary, with no wait
	// for the lock or the commit in it (pgFlightGate); 0: unknown.
	rtt time.Duration
}

// pgQueued is one statement of a batch and what reads its one row.
type pgQueued struct {
	stmt *pgStmt
	args []any
	scan func(pgx.Row) error
}

// queue adds st with args to the batch; scan reads its row.
func (b *pgBatch) queue(st *pgStmt, scan func(pgx.Row) error, args ...any) {
	b.queued = append(b.queued, pgQueued{st, args, scan})
}

// pgParamOID is the type a parameter is declared with when its statement
// is prepared, by its Go type.
func pgParamOID(v any) (uint32, error) {
	switch v.(type) {
	case int64, int:
		return pgtype.Int8OID, nil
	case string, *string:
		return pgtype.TextOID, nil
	case []byte:
		return pgtype.ByteaOID, nil
	case time.Time:
		return pgtype.TimestamptzOID, nil
	case bool:
		return pgtype.BoolOID, nil
	}
	return 0, fmt.Errorf("no PostgreSQL type for a parameter of type %T", v)
}

// pgEncoded is a statement's parameters, encoded for the wire.
type pgEncoded struct {
	oids []uint32
	vals [][]byte
}

func pgEncode(m *pgtype.Map, args []any) (pgEncoded, error) {
	e := pgEncoded{oids: make([]uint32, len(args)), vals: make([][]byte, len(args))}
	for i, a := range args {
		oid, err := pgParamOID(a)
		if err != nil {
			return e, err
		}
		e.oids[i] = oid
		// Into a buffer that is not nil: an empty value (a text '') would
		// be nil, which the wire takes for NULL. (A NULL is nil anyway.)
		if e.vals[i], err = m.Encode(oid, pgtype.BinaryFormatCode, a, []byte{}); err != nil {
			return e, err
		}
	}
	return e, nil
}

// pgResultRow is the one row of a statement's result, read as pgx reads a
// row.
type pgResultRow struct {
	m  *pgtype.Map
	rr *pgconn.ResultReader
}

func (r pgResultRow) Scan(dst ...any) error {
	if !r.rr.NextRow() {
		if _, err := r.rr.Close(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	fds, vals := r.rr.FieldDescriptions(), r.rr.Values()
	if len(vals) != len(dst) {
		return fmt.Errorf("a row of %d values scanned into %d", len(vals), len(dst))
	}
	for i := range dst {
		if err := r.m.Scan(fds[i].DataTypeOID, fds[i].Format, vals[i], dst[i]); err != nil {
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	_, err := r.rr.Close()
	return err
}

// sendBatch sends b's transaction in one flight on a connection of the
// pool, which must commit by deadline. A failure closes the connection
// (its transaction, if any, goes with it), so that no connection goes
// back to the pool in a transaction or with statements it may not have.
// A commit that went through is no error, even when the position after
// it could not be read (b.pos 0).
func (s *pgStore) sendBatch(b *pgBatch, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return describePostgres(err)
	}
	defer conn.Release()
	c := conn.Conn()
	committed, err := pgFlight(ctx, c, b)
	if err != nil && !committed {
		if r, ok := c.Config().Tracer.(*pgConnReset); ok {
			r.broke(c, err) // the driver's tracer does not see a pipeline
		}
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.Close(cctx)
		cancel()
		return describePostgres(err)
	}
	for _, a := range b.found {
		a.Pos = b.pos
	}
	return nil
}

// pgFlight sends b on c in one write and reads the answers:
//
//	BEGIN, lock, the batch's statements, COMMIT, Sync, position, Sync
//
// with the Parse of each statement that c has not prepared yet just
// before its first use (after the lock: preparing an INSERT takes its
// table's lock, which must not come before the catalog's). An error
// skips the rest up to its Sync: the statements are written never to
// fail on the data. committed reports whether COMMIT answered so.
func pgFlight(ctx context.Context, c *pgx.Conn, b *pgBatch) (committed bool, err error) {
	pc, m := c.PgConn(), c.TypeMap()
	prepared, _ := pc.CustomData()[pgPreparedKey].(map[*pgStmt]*pgconn.StatementDescription)
	if prepared == nil {
		prepared = map[*pgStmt]*pgconn.StatementDescription{}
		pc.CustomData()[pgPreparedKey] = prepared
	}
	// Encoded before anything is sent: an error then sends nothing.
	all := make([]pgQueued, 0, len(b.queued)+4)
	all = append(all, pgQueued{stmt: pgStmtBegin}, pgQueued{stmt: pgStmtLock})
	all = append(all, b.queued...)
	all = append(all, pgQueued{stmt: pgStmtCommit}, pgQueued{stmt: pgStmtPosition})
	enc := make([]pgEncoded, len(all))
	for i, q := range all {
		if enc[i], err = pgEncode(m, q.args); err != nil {
			return false, fmt.Errorf("%s: %w", q.stmt.name, err)
		}
	}
	p := pc.StartPipeline(ctx)
	parsing := map[*pgStmt]bool{}
	parsed := make([]bool, len(all)) // a Parse went before statement i
	for i, q := range all {
		sd := prepared[q.stmt]
		if sd == nil && !parsing[q.stmt] {
			parsing[q.stmt] = true
			parsed[i] = true
			p.SendPrepare(q.stmt.name, q.stmt.sql, enc[i].oids)
		}
		if sd != nil { // its result's columns known: no Describe
			p.SendQueryStatement(sd, enc[i].vals, pgBinary, pgBinary)
		} else {
			p.SendQueryPrepared(q.stmt.name, enc[i].vals, pgBinary, pgBinary)
		}
		switch q.stmt {
		case pgStmtBegin:
			p.SendFlushRequest()
		case pgStmtCommit:
			p.SendPipelineSync()
		}
	}
	if err := p.Sync(); err != nil {
		p.Close()
		return false, err
	}
	sent := time.Now()
	var pos int64
	for i, q := range all {
		if parsed[i] {
			res, err := p.GetResults()
			sd, ok := res.(*pgconn.StatementDescription)
			if err == nil && !ok {
				err = fmt.Errorf("prepare %s: unexpected %T", q.stmt.name, res)
			}
			if err != nil {
				p.Close()
				return committed, err
			}
			sd.Name, sd.SQL = q.stmt.name, q.stmt.sql // a Prepare's answer names nothing
			prepared[q.stmt] = sd
		}
		res, err := p.GetResults()
		rr, ok := res.(*pgconn.ResultReader)
		if err == nil && !ok {
			err = fmt.Errorf("%s: unexpected %T", q.stmt.name, res)
		}
		switch {
		case err != nil:
		case q.scan != nil:
			err = q.scan(pgResultRow{m, rr})
		case q.stmt == pgStmtPosition:
			err = pgResultRow{m, rr}.Scan(&pos)
		default:
			var tag pgconn.CommandTag
			tag, err = rr.Close()
			if err == nil && q.stmt == pgStmtCommit && tag.String() != "COMMIT" {
				err = pgx.ErrTxCommitRollback
			}
		}
		if err != nil && committed {
			break // the position, after the commit: unknown
		}
		if err != nil {
			p.Close()
			return false, err
		}
		if q.stmt == pgStmtBegin {
			b.rtt = time.Since(sent)
		}
		if q.stmt == pgStmtCommit {
			committed = true
			if _, err := p.GetResults(); err != nil { // its Sync
				p.Close()
				return true, nil
			}
		}
	}
	if err := p.Close(); err != nil && !errors.As(err, new(*pgconn.PgError)) {
		return true, nil // the position's answer was cut: the commit stands
	}
	if pos > 0 {
		b.pos = uint64(pos)
	}
	return true, nil
}

// pgMaxFlights bounds the batches of an instance in flight at once to a
// far primary (pgFarFlight), each on a connection of the pool, of which
// pgFlightsLeave are left for the rest (pgFlightGate.max). With 4, one
// instance 20 ms away made 4.05x 02f62bc's creates with 32 clients; with 8,
// BENCHMARKS.md's figure.
const (
	pgMaxFlights   = 8
	pgFlightsLeave = 2
)

// pgFarFlight is the round trip (the quickest of the recent flights' BEGIN
// answers, pgBatch.rtt: the last pgFarWindow to 2 x pgFarWindow) to a
// primary far enough that the next batch is sent before the answer comes.
// Not a whole flight's time: on one host under load a batch's statements
// and commit took 5 ms, and taken for a far primary they made it send 8
// batches at once, each with fewer creates, which cost creates there up to
// half their rate.
const (
	pgFarFlight = 5 * time.Millisecond
	pgFarWindow = 32
)

// pgFlightGate lets the group commit send its next batch while others are
// in flight, to a far primary: there the round trip, not the database,
// is what a batch waits for, and a batch at a time would make the writes
// of the clients answered last wait a round trip for the next. The
// batches still commit one at a time, in the order they take the
// catalog's lock, in the server: no lock waits on the network. To a near
// primary (pgFarFlight) one batch flies at a time. The writes that come
// while the gate is full wait in it, all together, for the next flight
// that ends, and fly at once as one batch: so the group commit's loop
// never waits, and the more flights are in the air, the more writes each
// of the next carries.
type pgFlightGate struct {
	mu      sync.Mutex
	cond    sync.Cond
	max     int                   // batches in flight at most, to a far primary; 0: pgMaxFlights
	n       int                   // batches in flight
	far     bool                  // the quickest recent round trip took pgFarFlight or more
	quick   [2]time.Duration      // the quickest round trip of this window of pgFarWindow, and of the last
	window  int                   // flights in this window
	closing bool                  // drain was called: the batches fly in the loop
	waiting []*writeJob[*pgBatch] // writes for the next flight
	flown   int64                 // batches flown, for the metrics
}

// enter is a batch of jobs from the loop: now is what flies at once (nil:
// they wait for the next flight), and wait that the store is closing, so
// it flies in the loop (which then ends after its answers:
// groupCommitter.close).
func (g *pgFlightGate) enter(jobs []*writeJob[*pgBatch]) (now []*writeJob[*pgBatch], wait bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closing && g.n >= g.limit() {
		g.waiting = append(g.waiting, jobs...)
		return nil, false
	}
	jobs = append(g.waiting, jobs...) // what waited goes first
	g.waiting = nil
	g.n++
	g.flown++
	return jobs, g.closing
}

func (g *pgFlightGate) limit() int {
	switch {
	case !g.far:
		return 1
	case g.max > 0:
		return g.max
	}
	return pgMaxFlights
}

// leave ends a flight that measured the round trip took (0: none): the
// quickest of the recent ones is the round trip to the primary, or more
// on a loaded machine, never less. It returns the writes that waited, to
// fly next, if any.
func (g *pgFlightGate) leave(took time.Duration) (next []*writeJob[*pgBatch]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if took > 0 {
		if g.window == 0 || took < g.quick[0] {
			g.quick[0] = took
		}
		if g.window++; g.window == pgFarWindow {
			g.quick[1], g.window = g.quick[0], 0
		}
		quickest := g.quick[0]
		if g.quick[1] > 0 {
			quickest = min(quickest, g.quick[1])
		}
		g.far = quickest >= pgFarFlight
	}
	if len(g.waiting) > 0 && (g.closing || g.n-1 < g.limit()) {
		next, g.waiting = g.waiting, nil
		g.flown++
		return next
	}
	g.n--
	if g.cond.L != nil {
		g.cond.Broadcast()
	}
	return nil
}

// flownCount is how many batches flew.
func (g *pgFlightGate) flownCount() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.flown
}

// drain waits until no batch is in flight or waiting, for the store's
// Close; the batches after it fly in the loop.
func (g *pgFlightGate) drain() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closing = true
	if g.cond.L == nil {
		g.cond.L = &g.mu
	}
	for g.n > 0 {
		g.cond.Wait()
	}
}
