package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSharedReadNeverAnswersWithAnOlderRead has writers that each make a
// change and then read: the value read must include their own change, so
// no caller may be answered by a read that started before it called.
func TestSharedReadNeverAnswersWithAnOlderRead(t *testing.T) {
	var sr pgSharedRead
	var committed atomic.Uint64
	var queries atomic.Int64
	query := func() (uint64, error) {
		queries.Add(1)
		v := committed.Load()
		time.Sleep(50 * time.Microsecond) // a round trip, during which others call
		return v, nil
	}
	const goroutines, rounds = 8, 200
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				mine := committed.Add(1)
				got, err := sr.read(context.Background(), query)
				if err != nil || got < mine {
					t.Errorf("read %d (%v) after committing %d", got, err, mine)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d reads answered by %d queries", goroutines*rounds, queries.Load())
}

// TestSharedReadShares holds one read in flight while ten callers arrive:
// they share the next read, so eleven callers cost two queries.
func TestSharedReadShares(t *testing.T) {
	var sr pgSharedRead
	release := make(chan struct{})
	var queries atomic.Int64
	query := func() (uint64, error) {
		if queries.Add(1) == 1 {
			<-release
		}
		return uint64(queries.Load()), nil
	}
	results := make(chan uint64, 11)
	go func() { v, _ := sr.read(context.Background(), query); results <- v }()
	joined := func() int {
		sr.mu.Lock()
		defer sr.mu.Unlock()
		if sr.next == nil || !sr.running {
			return 0
		}
		return sr.next.waiters
	}
	for deadline := time.Now().Add(5 * time.Second); queries.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first read did not start within 5s")
		}
	}
	for range 10 {
		go func() { v, _ := sr.read(context.Background(), query); results <- v }()
	}
	for deadline := time.Now().Add(5 * time.Second); joined() < 10; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers joined the next read within 5s, want 10", joined())
		}
	}
	close(release)
	got := map[uint64]int{}
	for range 11 {
		got[<-results]++
	}
	if queries.Load() != 2 || got[1] != 1 || got[2] != 10 {
		t.Errorf("%d queries, answers %v; want 2 queries: the first caller's, then one for the other ten", queries.Load(), got)
	}
}

// TestSharedReadWaitEndsWithContext: a caller whose context ends stops
// waiting for a read that does not end.
func TestSharedReadWaitEndsWithContext(t *testing.T) {
	var sr pgSharedRead
	release := make(chan struct{})
	defer close(release)
	go sr.read(context.Background(), func() (uint64, error) { <-release; return 1, nil })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		sr.mu.Lock()
		running := sr.running
		sr.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first read did not start")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := sr.read(ctx, func() (uint64, error) { return 2, nil }); err != context.DeadlineExceeded {
		t.Errorf("read with a context that ended: %v, want context.DeadlineExceeded", err)
	}
}
