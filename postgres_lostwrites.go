// postgres_lostwrites.go owns noticing a PostgreSQL database that went
// back in time (DECISIONS.md section 21): the memory of the last row this
// instance created and acknowledged in each table, the server each new
// connection reaches (a reconnection to another one, or to a restarted
// one, is when a failover or a restore shows), and the check, after every
// reconnection and each minute, that those rows are still there and are
// the ones this instance wrote.

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgTable names a table whose last acknowledged create is remembered.
type pgTable int

const (
	pgCategories pgTable = iota
	pgPets
	pgOrders
	pgTableCount
)

// pgReadWritten are the queries, by pgTable (named by lostTables), that
// read back by id the columns that a create wrote, in the order its note
// gave them (pgWriteMemory.created), then, for the tables whose rows change
// (pets, orders), whether an acknowledged change or delete touched the
// row since (by any instance): its version past 1, or the id in
// deleted_rows, which a delete fills in its own statement
// (postgres_changes.go). Such a row is no loss.
var pgReadWritten = [pgTableCount]string{
	"SELECT name, description, false FROM categories WHERE id = $1",
	"SELECT name, category_id, status, version > 1 FROM pets WHERE id = $1 UNION ALL " + pgDeletedRow("pets"),
	"SELECT pet_id, quantity, status, created_at, false FROM orders WHERE id = $1 UNION ALL " + pgDeletedRow("orders"), // an order is never changed
}

// pgDeletedRow is the row of pgReadWritten for a row of table deleted by
// an acknowledged delete: the read columns NULL, changed true.
func pgDeletedRow(table string) string {
	nulls := map[string]string{"pets": "NULL::text, NULL::bigint, NULL::text", "orders": "NULL::bigint, NULL::int, NULL::text, NULL::timestamptz"}[table]
	return "SELECT " + nulls + ", true FROM deleted_rows WHERE tbl = '" + table + "' AND id = $1"
}

// pgRowPrint is how a row's written columns compare: each rendered by
// fmt (a NULL or nil pointer as "<nil>", a time as RFC 3339 in UTC, as an
// order's createdAt is) after its length, so that no two lists of values
// read the same.
func pgRowPrint(values ...any) string {
	var b strings.Builder
	for _, v := range values {
		switch x := v.(type) {
		case *string:
			if x == nil {
				v = nil
			} else {
				v = *x
			}
		case time.Time:
			v = x.UTC().Format(time.RFC3339)
		}
		f := fmt.Sprint(v)
		fmt.Fprintf(&b, "%d:%s;", len(f), f)
	}
	return b.String()
}

// pgRemembered is a remembered row: its id (0: none), what it holds (the
// values as written: rendered only when a check compares them, not on
// the create's path), and a number that changes whenever the memory of it
// does, so that a check that read the row before a change does not judge
// the changed one.
type pgRemembered struct {
	table    pgTable
	id       int64
	values   []any
	version  uint64
	changing int // changes under way (changing), which no check judges
}

// is reports whether r and x are the same memory of the same row.
func (r pgRemembered) is(x pgRemembered) bool {
	return r.id == x.id && r.table == x.table && r.version == x.version
}

// pgWriteMemory is the memory of one instance's acknowledged creates: per
// table the last (the highest id: ids ascend in commit order, so a
// database that lost it lost the ones after it), and the rows remembered
// when the instance last reconnected to the primary, which the next check
// looks for first. The losses found stay for /readyz until the process
// ends.
type pgWriteMemory struct {
	mu      sync.Mutex
	last    [pgTableCount]pgRemembered
	pending [pgTableCount]pgRemembered // remembered before the last reconnection, not checked since
	version uint64
	lost    []lostWrite
	lostBy  [pgTableCount]uint64
}

// created notes row id of table t, acknowledged with values (the columns
// in pgReadWritten's order).
func (m *pgWriteMemory) created(t pgTable, id int64, values ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id <= m.last[t].id {
		return
	}
	m.version++
	m.last[t] = pgRemembered{table: t, id: id, values: values, version: m.version}
}

// changing tells the memory that row id of table t is being changed or
// deleted (an acknowledged change is not a loss): no check judges it until
// done is called, with the columns it holds now, or with none when it was
// deleted or its outcome is unknown (then it is forgotten).
func (m *pgWriteMemory) changing(t pgTable, id int64) (done func(values ...any)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range []*pgRemembered{&m.last[t], &m.pending[t]} {
		if r.id == id {
			r.changing++
		}
	}
	var once sync.Once
	return func(values ...any) {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.version++
			for _, r := range []*pgRemembered{&m.last[t], &m.pending[t]} {
				if r.id != id || r.changing == 0 {
					continue
				}
				r.changing--
				r.version = m.version
				if len(values) == 0 {
					*r = pgRemembered{}
				} else {
					r.values = values
				}
			}
		})
	}
}

// reconnected keeps the rows remembered now for the next check: they were
// acknowledged by the server before the one just reached.
func (m *pgWriteMemory) reconnected() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for t, r := range m.last {
		if r.id != 0 {
			m.pending[t] = r
		}
	}
}

// due returns the rows to check: those remembered before the last
// reconnection, and with all (the minute's check) the last ones too; none
// that a change holds.
func (m *pgWriteMemory) due(all bool) []pgRemembered {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rows []pgRemembered
	for t := range pgTableCount {
		for _, r := range []pgRemembered{m.pending[t], m.last[t]} {
			if r.id != 0 && r.changing == 0 && (all || r.is(m.pending[t])) && !pgContainsRow(rows, r) {
				rows = append(rows, r)
			}
		}
	}
	return rows
}

func pgContainsRow(rows []pgRemembered, r pgRemembered) bool {
	for _, x := range rows {
		if x.table == r.table && x.id == r.id {
			return true
		}
	}
	return false
}

// judge takes the check's reading of row r: found, holding print
// (pgRowPrint of the columns read). It
// reports whether that is a loss not seen before: the row missing, or
// another one in its place, and the memory of it unchanged since due. A
// row judged, either way, is not checked again (a loss is forgotten;
// one found is looked for again only among the last rows).
func (m *pgWriteMemory) judge(r pgRemembered, found bool, print string) (lost bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	same := func(x pgRemembered) bool { return x.is(r) && x.changing == 0 }
	if !same(m.pending[r.table]) && !same(m.last[r.table]) {
		return false // changed since: judged with its new content next time
	}
	if found && print == pgRowPrint(r.values...) {
		if same(m.pending[r.table]) {
			m.pending[r.table] = pgRemembered{}
		}
		return false
	}
	for _, x := range []*pgRemembered{&m.pending[r.table], &m.last[r.table]} {
		if same(*x) {
			*x = pgRemembered{}
		}
	}
	w := lostWrite{Table: lostTables[r.table], ID: r.id}
	for _, x := range m.lost {
		if x == w {
			return false
		}
	}
	m.lost = append(m.lost, w)
	m.lostBy[r.table]++
	return true
}

// losses returns the losses found, in the order found, and their counts by
// table.
func (m *pgWriteMemory) losses() ([]lostWrite, [pgTableCount]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]lostWrite(nil), m.lost...), m.lostBy
}

// pgServerSeen follows the server behind the pool's new connections: a
// connection to another server than the last one's (a promoted standby, a
// restarted or restored primary: pg_postmaster_start_time differs), or the
// first one after pgConnReset dropped them all, is a reconnection, which
// wakes the store's watch.
type pgServerSeen struct {
	mu      sync.Mutex
	started time.Time // the last server's start; zero: none yet
	dropped atomic.Bool
	wake    chan struct{}
	changes atomic.Int64 // reconnections seen
}

func newPgServerSeen() *pgServerSeen { return &pgServerSeen{wake: make(chan struct{}, 1)} }

// afterConnect is the pool's AfterConnect: one round trip per new
// connection, which the pool makes rarely.
func (s *pgServerSeen) afterConnect(ctx context.Context, conn *pgx.Conn) error {
	var started time.Time
	if err := conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started); err != nil {
		return err
	}
	s.mu.Lock()
	changed := !s.started.IsZero() && (!s.started.Equal(started) || s.dropped.Swap(false))
	s.started = started
	s.mu.Unlock()
	if changed {
		s.changes.Add(1)
		select {
		case s.wake <- struct{}{}:
		default: // a wake is pending already
		}
	}
	return nil
}

// checkWrites looks, on the primary, for the rows the memory says are due
// (all: the minute's check; else those remembered before the last
// reconnection), and logs an ERROR for each loss found. A database that
// does not answer leaves them due.
func (s *pgStore) checkWrites(ctx context.Context, all bool) error {
	for _, r := range s.written.due(all) {
		found, print, err := s.readWritten(ctx, r)
		if err != nil {
			return err
		}
		if s.written.judge(r, found, print) {
			how := "missing"
			if found {
				how = "another row holds its id"
			}
			s.log.Error("an acknowledged write is lost: the database went back in time (a failover to a standby that lacked it, or a restore); see High availability in docs/operations.md",
				"table", lostTables[r.table], "id", r.id, "found", how)
		}
	}
	return nil
}

// readWritten reads row r back: whether it is there, and what it holds.
func (s *pgStore) readWritten(ctx context.Context, r pgRemembered) (bool, string, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, pgReadWritten[r.table], r.id)
	if err != nil {
		return false, "", describePostgres(err)
	}
	vals, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([]any, error) { return row.Values() })
	if err != nil {
		return false, "", describePostgres(err)
	}
	if len(vals) == 0 {
		return false, "", nil
	}
	v := vals[0]
	if changed, _ := v[len(v)-1].(bool); changed {
		return true, pgRowPrint(r.values...), nil // as it should be: an acknowledged change's
	}
	return true, pgRowPrint(v[:len(v)-1]...), nil
}

// watchPrimary reads the replication and checks the remembered rows each
// pgReplicationEvery, and at once after a reconnection to another server,
// until the store closes.
func (s *pgStore) watchPrimary() {
	tick := time.NewTicker(pgReplicationEvery)
	defer tick.Stop()
	for {
		all := false
		select {
		case <-s.closed:
			return
		case <-tick.C:
			all = true
		case <-s.server.wake:
			s.written.reconnected()
		}
		s.readReplication(context.Background())
		err := s.checkWrites(context.Background(), all)
		if err == nil {
			s.checked.Add(1)
		} else if !errors.Is(err, errUnavailable) {
			s.log.Warn("check of the last acknowledged writes", "err", err)
		}
	}
}

// pgLogOf is o's logger, or one that writes nothing.
func pgLogOf(o storeOptions) *slog.Logger {
	if o.log != nil {
		return o.log
	}
	return slog.New(slog.DiscardHandler)
}
