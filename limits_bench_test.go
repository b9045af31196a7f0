package main

import (
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

func BenchmarkAllowKeyMillionKeys(b *testing.B) {
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
	for b.Loop() {
		l.allowKey(id, 60, 1000)
		if id++; id == keys {
			id = 0
			b.StopTimer()
			l.takeDayDeltas(nil) // as the caller's flush would, so dirty does not grow
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
