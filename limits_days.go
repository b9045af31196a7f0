// limits_days.go owns the limiter's side of the day counts: loading the
// stored counts, and handing out the increments not yet written (and
// taking back the ones a failed write returns).

package main

import "time"

// loadDayCount sets key id's count for day to the stored n (plus increments
// not yet taken). Counts of any day but today (UTC, by the injected clock) are
// ignored: the quota of another day does not matter any more.
func (l *limiter) loadDayCount(id int64, day string, n int64) {
	now := l.now().UnixNano()
	today := limDay(now)
	s := l.keyShard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if day != s.dayString(today) {
		return
	}
	st := s.state(id)
	if st.day < today {
		if st.pending > 0 {
			s.stale = append(s.stale, dayDelta{id, s.dayString(st.day), st.pending})
		}
		st.day, st.pending = today, 0
	}
	st.count = n + st.pending
}

// takeDayDeltas appends to dst the day increments counted since the last call,
// past days' included, and forgets them.
func (l *limiter) takeDayDeltas(dst []dayDelta) []dayDelta {
	for i := range l.keys {
		s := &l.keys[i]
		s.mu.Lock()
		dst = append(dst, s.stale...)
		clear(s.stale)
		s.stale = s.stale[:0]
		for _, id := range s.dirty {
			if st := s.t[id]; st != nil && st.pending > 0 {
				dst = append(dst, dayDelta{id, s.dayString(st.day), st.pending})
				st.pending = 0
			}
		}
		s.dirty = s.dirty[:0]
		s.mu.Unlock()
	}
	return dst
}

// returnDayDeltas puts back deltas taken by takeDayDeltas that could not be
// written, so that the next takeDayDeltas hands them out again.
func (l *limiter) returnDayDeltas(ds []dayDelta) {
	for _, d := range ds {
		s := l.keyShard(d.KeyID)
		s.mu.Lock()
		if st := s.t[d.KeyID]; st != nil && d.Day == s.dayString(st.day) {
			if st.pending == 0 {
				s.dirty = append(s.dirty, d.KeyID)
			}
			st.pending += d.N
		} else {
			s.stale = append(s.stale, d)
		}
		s.mu.Unlock()
	}
}

// toDay moves key id's state st on to day if that is a later one: its
// count starts again at 0, and its increments not yet taken keep their day.
func (s *limKeyShard) toDay(id int64, st *limKeyState, day int32) {
	if day > st.day {
		if st.pending > 0 {
			s.stale = append(s.stale, dayDelta{id, s.dayString(st.day), st.pending})
		}
		st.day, st.count, st.pending = day, 0, 0
	}
}

func (s *limKeyShard) dayString(day int32) string {
	c := &s.days[day&1]
	if c.s == "" || c.day != day {
		c.day, c.s = day, time.Unix(int64(day)*86400, 0).UTC().Format(time.DateOnly)
	}
	return c.s
}

// known returns what this limiter knows of key id for a shared limiter
// (limits_redis.go) to start from: its count for today and that day, and
// the end of its ban (Unix ns, 0 for none).
func (l *limiter) known(id int64) (count int64, day int32, banUntil int64) {
	today := limDay(l.now().UnixNano())
	s := l.keyShard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.t[id]
	if st == nil {
		return 0, today, 0
	}
	if st.day == today {
		count = st.count
	}
	return count, today, st.banUntil
}

// countAllowed counts a request of key id that a shared limiter allowed:
// the day count goes to the database from here, as if this limiter had
// allowed it. The minute bucket is not touched.
func (l *limiter) countAllowed(id int64) {
	now := l.now().UnixNano()
	s := l.keyShard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state(id)
	s.toDay(id, st, limDay(now))
	st.count++
	if st.pending == 0 {
		s.dirty = append(s.dirty, id)
	}
	st.pending++
}
