// limits_upkeep.go owns the limiter's way to the database: day counts written
// once a second (and, on a shared database, everyone's read back), bans as
// they come (retried until written), and idle limiter state swept away.

package main

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// sweepEvery is how many upkeep ticks (seconds) pass between sweeps.
const sweepEvery = 10

// upkeep keeps a limiter's state in the store.
type upkeep struct {
	lim   rateLimiter
	store upkeepStore
	keys  *keyring // whose used keys get their last use written with the counts
	bans  *banQueue
	m     *serverMetrics
	log   *slog.Logger
	// shared is set when other instances count on the same database: each
	// second, after writing its own counts, the upkeep reads everyone's.
	shared bool
	now    func() time.Time

	deltas    []dayDelta // reused from one flush to the next
	used      []int64    // likewise
	fresh     []keyBan   // reused from one take of the queue to the next
	unwritten []keyBan   // bans whose write failed, oldest first
}

// run writes the day counts once a second and the bans as they come, and
// sweeps idle state every sweepEvery seconds, until ctx ends; on the way
// out it writes what is left.
func (u *upkeep) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ticks := 1; ; {
		select {
		case <-ctx.Done():
			final := context.WithoutCancel(ctx)
			u.newBans(final)
			u.retryBans(final)
			u.flush(final)
			return
		case <-u.bans.wake:
			u.newBans(ctx)
		case <-tick.C:
			u.retryBans(ctx)
			u.flush(ctx)
			if u.shared {
				u.readDayCounts(ctx)
			}
			if ticks++; ticks%sweepEvery == 0 {
				u.lim.sweep()
			}
		}
	}
}

// flush writes the day counts counted since the last flush, and the last
// use of the keys used meanwhile (to the minute); on failure they are
// taken back for the next one.
func (u *upkeep) flush(ctx context.Context) {
	u.deltas = u.lim.takeDayDeltas(u.deltas[:0])
	u.used = u.keys.takeUsed(u.used[:0])
	if len(u.deltas) == 0 && len(u.used) == 0 {
		return
	}
	if err := u.store.AddDayCounts(ctx, u.deltas, u.used, u.now()); err != nil {
		u.m.dbErrors.Inc()
		u.lim.returnDayDeltas(u.deltas)
		u.keys.returnUsed(u.used)
		u.log.Error("write day counts; will retry", "err", err)
	}
}

// readDayCounts loads today's stored counts of every key into the limiter,
// which adds the increments it has not written yet: the requests the other
// instances served reach this one's quota at most a second (a tick) late.
func (u *upkeep) readDayCounts(ctx context.Context) {
	today := u.now().UTC().Format(time.DateOnly)
	counts, err := u.store.DayCounts(ctx, today)
	if err != nil {
		u.m.dbErrors.Inc()
		u.log.Error("read day counts; will retry", "err", err)
		return
	}
	for id, n := range counts {
		u.lim.loadDayCount(id, today, n)
	}
}

// writeBan stores b, or keeps it for a retry and reports false.
func (u *upkeep) writeBan(ctx context.Context, b keyBan) bool {
	if err := u.store.SetKeyBan(context.WithoutCancel(ctx), b.id, b.until); err != nil {
		u.m.dbErrors.Inc()
		u.unwritten = append(u.unwritten, b)
		u.log.Error("store ban; will retry", "key", b.id, "err", err)
		return false
	}
	return true
}

// retryBans writes the bans that could not be written, every tick and on
// the way out, while the limiter still holds each as it was: not once it
// has ended, or "keys unban" lifted it meanwhile (a retry must not undo
// that).
func (u *upkeep) retryBans(ctx context.Context) {
	bs := u.unwritten
	u.unwritten = nil
	for i, b := range bs {
		if u.lim.banOf(b.id).Equal(b.until) && b.until.After(time.Now()) && !u.writeBan(ctx, b) {
			// The database still fails: keep the rest for the next tick
			// rather than wait out a busy timeout for each.
			u.unwritten = append(u.unwritten, bs[i+1:]...)
			return
		}
	}
}

// newBans writes the bans imposed since the last call, in order, until one
// fails; the rest wait for the next tick's retryBans, as do all of them
// while earlier ones wait there.
func (u *upkeep) newBans(ctx context.Context) {
	u.fresh = u.bans.take(u.fresh[:0])
	for _, b := range u.fresh {
		u.m.bans.Inc()
		u.log.Warn("key banned", "key", b.id, "until", b.until.Format(time.RFC3339))
	}
	if len(u.unwritten) > 0 {
		u.unwritten = append(u.unwritten, u.fresh...)
		return
	}
	for i, b := range u.fresh {
		if !u.writeBan(ctx, b) {
			u.unwritten = append(u.unwritten, u.fresh[i+1:]...)
			return
		}
	}
}

// keyBan is a ban the limiter imposed, on its way to the database.
type keyBan struct {
	id    int64
	until time.Time
}

// banQueue carries the bans the limiter imposes to upkeep. It keeps every
// one, however many come while upkeep waits for the database (a channel
// would have to drop them once full, and a dropped ban would not survive a
// restart). It holds at most one ban per key and ban duration.
type banQueue struct {
	mu   sync.Mutex
	bans []keyBan
	wake chan struct{} // signalled when bans is no longer empty
}

func newBanQueue() *banQueue {
	return &banQueue{wake: make(chan struct{}, 1)}
}

func (q *banQueue) push(b keyBan) {
	q.mu.Lock()
	q.bans = append(q.bans, b)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take appends the queued bans to dst, oldest first, and empties the queue.
func (q *banQueue) take(dst []keyBan) []keyBan {
	q.mu.Lock()
	defer q.mu.Unlock()
	dst = append(dst, q.bans...)
	clear(q.bans)
	q.bans = q.bans[:0]
	return dst
}
