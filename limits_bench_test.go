package main

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// newLimBench returns a limiter whose clock advances 1µs per reading, so
// that buckets refill and the benchmarks do not measure time.Now.
func newLimBench(cfg limiterConfig) *limiter {
	var ns atomic.Int64
	ns.Store(limT0.UnixNano())
	cfg.Now = func() time.Time { return time.Unix(0, ns.Add(1000)) }
	cfg.BanThreshold = 1 << 30
	return newLimiter(cfg)
}

func BenchmarkAllowKeyHot(b *testing.B) {
	l := newLimBench(limiterConfig{})
	b.ReportAllocs()
	for b.Loop() {
		l.allowKey(42, 1000, 100000)
	}
}

func BenchmarkAllowKeyHotParallel(b *testing.B) {
	l := newLimBench(limiterConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.allowKey(42, 1000, 100000)
		}
	})
}

// BenchmarkAllowKeyMillionKeys checks a million keys in id order, the
// order their states were made in: the state a check needs is next to the
// last one's, and the CPU fetches it ahead. BenchmarkAllowKeyMillionKeysRandom
// checks them in random order, as a million clients would come.
func BenchmarkAllowKeyMillionKeys(b *testing.B) { benchMillionKeys(b, false) }

func BenchmarkAllowKeyMillionKeysRandom(b *testing.B) { benchMillionKeys(b, true) }

func benchMillionKeys(b *testing.B, random bool) {
	const keys = 1_000_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := newLimBench(limiterConfig{})
	for id := range int64(keys) {
		l.allowKey(id, 60, 1000)
	}
	l.takeDayDeltas(nil)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / keys
	b.ReportAllocs()
	id := int64(0)
	// As upkeep's flush does, into a buffer kept from one flush to the
	// next: a fresh 40 MB one each time would set the collector going
	// through the million states while the loop is timed.
	deltas := make([]dayDelta, 0, keys)
	order := make([]int64, keys)
	for i := range order {
		order[i] = int64(i)
	}
	if random {
		rand.Shuffle(keys, func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	for b.Loop() {
		l.allowKey(order[id], 60, 1000)
		if id++; id == keys {
			id = 0
			b.StopTimer()
			deltas = l.takeDayDeltas(deltas[:0]) // so that dirty does not grow
			b.StartTimer()
		}
	}
	if st := l.stats(); st.keys != keys {
		b.Fatalf("stats %+v", st)
	}
	b.ReportMetric(perKey, "heapB/key") // after the loop: it resets reported metrics
}

func BenchmarkAllowAddr(b *testing.B) {
	l := newLimBench(limiterConfig{})
	addrs := make([]netip.Addr, 4096)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.allowAddr(addrs[i&4095])
		i++
	}
}

func BenchmarkAllowAddrChurn(b *testing.B) {
	l := newLimBench(limiterConfig{})
	b.ReportAllocs()
	i := uint32(0)
	for b.Loop() {
		l.allowAddr(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		i++
	}
}

func BenchmarkDecisionSetHeaders(b *testing.B) {
	l := newLimBench(limiterConfig{})
	d := l.allowKey(1, 60, 1000)
	b.ReportAllocs()
	for b.Loop() {
		h := make(map[string][]string, 8)
		d.setHeaders(h)
	}
}

// BenchmarkDependentMiss measures this machine's floor for the million-key
// case: one load from memory that the next load depends on, over 128 MiB
// in random order (a pointer chase), so that no cache or prefetcher helps.
// A limiter check among a million keys cannot cost less than one such load
// plus the hot check's own work (BenchmarkAllowKeyHot).
func BenchmarkDependentMiss(b *testing.B) {
	const n = 1 << 21 // 64-byte slots: 128 MiB
	type slot struct {
		next uint32
		_    [60]byte
	}
	s := make([]slot, n)
	perm := rand.Perm(n)
	for i, p := range perm {
		s[p].next = uint32(perm[(i+1)%n])
	}
	j := uint32(0)
	for b.Loop() {
		j = s[j].next
	}
	if j >= n {
		b.Fatal("the chase left the array")
	}
}
