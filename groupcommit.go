// groupcommit.go owns the group commit: the writes waiting at once share
// one transaction and one durable commit, and each is answered with its
// own outcome only after that commit. The loop is the same for both
// stores; each store brings the commit of a batch (sqliteCommit,
// pgStore.commitBatch).

package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// maxBatch bounds how many writes share one transaction.
const maxBatch = 256

// writeJob is one write waiting for the group commit; T is the batch's
// transaction as the store's writes see it.
type writeJob[T any] struct {
	ctx   context.Context
	run   func(tx T) error
	done  chan error
	start time.Time // when it was queued
}

// groupCommitter runs the API's writes, gathering the ones waiting at the
// moment into one batch, which commit writes in one transaction, so that one
// durable commit (an fsync) covers the whole batch before any of it is
// answered. commit must answer every job of the batch with its own
// outcome: made (nil), or refused, not found or precondition failed
// (isOwnOutcome, store.go), each of which fails that write alone, so that
// no write's answer depends on another's; only a failure that may have
// cost the transaction fails the whole batch, none of which was answered
// yet, as errUnavailable, which is safe to retry.
type groupCommitter[T any] struct {
	commit   func(batch []*writeJob[T])
	jobs     chan *writeJob[T]
	stop     chan struct{} // closed by close: take no more jobs
	stopOnce sync.Once
	done     chan struct{} // closed when the loop has ended

	batches, writes atomic.Int64 // for the metrics
}

func newGroupCommitter[T any](commit func(batch []*writeJob[T])) *groupCommitter[T] {
	g := &groupCommitter[T]{commit: commit, jobs: make(chan *writeJob[T], maxBatch), stop: make(chan struct{}), done: make(chan struct{})}
	go g.loop()
	return g
}

// write runs fn, which must execute exactly one SQL statement, in a
// transaction shared with other writes, and returns once that transaction
// is committed (and fn's work durable) or has failed.
func (g *groupCommitter[T]) write(ctx context.Context, fn func(tx T) error) error {
	job := &writeJob[T]{ctx: ctx, run: fn, done: make(chan error, 1), start: time.Now()}
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
func (g *groupCommitter[T]) close() {
	g.stopOnce.Do(func() { close(g.stop) })
	<-g.done
}

func (g *groupCommitter[T]) loop() {
	defer close(g.done)
	batch := make([]*writeJob[T], 0, maxBatch)
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
func (g *groupCommitter[T]) gather(batch []*writeJob[T]) []*writeJob[T] {
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
func (g *groupCommitter[T]) stats() (batches, writes int64) {
	return g.batches.Load(), g.writes.Load()
}
