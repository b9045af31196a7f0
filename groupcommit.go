// groupcommit.go owns the group commit: the creates waiting at once share
// one SQLite transaction and one fsync, and each is answered only after
// that commit.

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// maxBatch bounds how many writes share one transaction.
const maxBatch = 256

// writeJob is one write waiting for the group commit.
type writeJob struct {
	ctx  context.Context
	run  func(tx *batchTx) error
	done chan error
}

// groupCommitter runs the API's writes on the writer connection, gathering
// the ones waiting at the moment into one transaction, so that one fsync
// (synchronous=FULL) makes a whole batch durable before any of it is
// answered. Each write is one SQL statement, and SQLite undoes a statement
// that fails on a constraint (a unique or foreign key violation) alone,
// leaving the transaction open: that write fails and the others commit. Any
// other failure (a full disk, a lock, an interrupted statement) may have
// cost the transaction, so it fails every write of the batch, none of which
// was answered yet; the others as errUnavailable, which is safe to retry.
type groupCommitter struct {
	db       *sql.DB
	jobs     chan *writeJob
	stop     chan struct{} // closed by close: take no more jobs
	stopOnce sync.Once
	done     chan struct{} // closed when the loop has ended

	batches, writes atomic.Int64 // for the metrics
}

func newGroupCommitter(db *sql.DB) *groupCommitter {
	g := &groupCommitter{db: db, jobs: make(chan *writeJob, maxBatch), stop: make(chan struct{}), done: make(chan struct{})}
	go g.loop()
	return g
}

// write runs fn, which must execute exactly one SQL statement, in a
// transaction shared with other writes, and returns once that transaction
// is committed (and fn's work durable) or has failed.
func (g *groupCommitter) write(ctx context.Context, fn func(tx *batchTx) error) error {
	job := &writeJob{ctx: ctx, run: fn, done: make(chan error, 1)}
	select {
	case g.jobs <- job:
	case <-g.stop:
		return errClosing
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-job.done:
		return err
	case <-g.done: // the loop ended; it may have answered just before
		select {
		case err := <-job.done:
			return err
		default:
			return errClosing
		}
	}
}

var errClosing = fmt.Errorf("%w: the database is closing", errUnavailable)

// close stops the loop after the batch in progress; writes still queued
// fail with errClosing, so no caller waits forever.
func (g *groupCommitter) close() {
	g.stopOnce.Do(func() { close(g.stop) })
	<-g.done
}

func (g *groupCommitter) loop() {
	defer close(g.done)
	batch := make([]*writeJob, 0, maxBatch)
	for {
		select {
		case job := <-g.jobs:
			batch = append(batch[:0], job)
		case <-g.stop:
			for {
				select {
				case j := <-g.jobs:
					j.done <- errClosing
				default:
					return
				}
			}
		}
		batch = g.gather(batch)
		g.batches.Add(1)
		g.writes.Add(int64(len(batch)))
		g.commit(batch)
	}
}

// statementOnly reports whether a write's error undid that write's
// statement alone and left the batch's transaction as it was: only a
// constraint violation is known to, SQLite's ABORT undoing the statement.
// Other errors may have rolled the whole transaction back (SQLite does so
// when a statement is interrupted, as a cancelled context does, or on a
// full disk, an I/O error or no memory); the writes after it would then run
// and commit one by one outside it while all of them are answered with the
// commit's error. So any other error fails the batch, none of it answered
// yet, and its clients may retry.
func statementOnly(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// batchTx is the transaction that a batch of writes shares.
type batchTx struct {
	*sql.Tx
	stmts [][2]*sql.Stmt // prepared statements and their forms in this transaction
}

// stmt returns s for use in the transaction, made once per batch rather
// than once per write.
func (tx *batchTx) stmt(s *sql.Stmt) *sql.Stmt {
	for _, p := range tx.stmts {
		if p[0] == s {
			return p[1]
		}
	}
	ts := tx.Stmt(s)
	tx.stmts = append(tx.stmts, [2]*sql.Stmt{s, ts})
	return ts
}

// maxYields bounds how often gather lets other goroutines run before a
// batch is committed.
const maxYields = 4

// gather adds the writes waiting now to batch. Before it settles, it yields
// the processor to the handlers that are runnable, for as long as that
// brings more writes (at most maxYields times). Without this, on one CPU
// (GOMAXPROCS=1) a handler's send woke the loop at once, ahead of every
// other handler, and each fsync held the only P: every batch had one write.
// The yields made the batches, and so the creates a second, many times
// larger (BENCHMARKS.md has the figures). On an idle server a yield finds
// nothing to run and returns at once.
func (g *groupCommitter) gather(batch []*writeJob) []*writeJob {
	for yields := 0; ; yields++ {
	drain:
		for len(batch) < maxBatch {
			select {
			case j := <-g.jobs:
				batch = append(batch, j)
			default:
				break drain
			}
		}
		if len(batch) == maxBatch || yields == maxYields {
			return batch
		}
		runtime.Gosched()
		if len(g.jobs) == 0 { // the yield brought nothing
			return batch
		}
	}
}

// stats returns how many batches were committed (or failed), and how many
// writes they held.
func (g *groupCommitter) stats() (batches, writes int64) {
	return g.batches.Load(), g.writes.Load()
}

func (g *groupCommitter) commit(batch []*writeJob) {
	results := make([]error, len(batch))
	err := func() error {
		sqlTx, err := g.db.Begin()
		if err != nil {
			return describe(err)
		}
		defer sqlTx.Rollback()
		tx := &batchTx{Tx: sqlTx}
		for i, j := range batch {
			if err := j.ctx.Err(); err != nil {
				results[i] = err // the client is gone: do not write for it
				continue
			}
			if err := j.run(tx); err != nil {
				results[i] = err
				if !statementOnly(err) {
					return describe(err) // the transaction itself may be gone
				}
			}
		}
		if err := tx.Commit(); err != nil {
			return describe(err)
		}
		return nil
	}()
	for i, j := range batch {
		if err != nil && results[i] == nil {
			// Not made, through no fault of this write: safe to retry.
			results[i] = fmt.Errorf("%w: the batch's transaction failed: %w", errUnavailable, err)
		}
		j.done <- results[i]
	}
}
