// inflight.go owns the requests in flight (DECISIONS.md section 21): how
// many the server holds in all (--max-conns of them) and what share of
// them one client address may hold (maxInFlightPerAddr), so that an
// address that never reads its answers cannot take the server's memory
// or starve the others; and giving the memory of a flood back to the
// system once it is over (releaseMemory). docs/operations.md ("Memory")
// works the bound out from these.

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// maxInFlightPerAddr is the share of the requests in flight of one client
// address (an IPv6 /64): far more than a program or a browser needs at
// once (a page of /docs is five), and a sixty-fourth of the default
// --max-conns, so that it takes many addresses to fill the server.
const maxInFlightPerAddr = 64

// The reasons of a request refused for what is in flight, as the metrics
// name them.
const (
	inFlightPerAddr = iota
	inFlightTotal
	inFlightReasons
)

var inFlightReasonNames = [inFlightReasons]string{"per_addr", "total"}

// inFlight counts the requests in flight, in all and by client address. A
// request counts from the time a handler takes it until its stream lets
// it go (its context ends): over HTTP/2 that is after its last frame is
// written, so an answer that a client does not read still counts, as it
// still holds the server's memory. Over HTTP/1.1 it counts until its
// handler returns: what is left to write is the connection's, which the
// connection caps bound.
type inFlight struct {
	total   int // in all; 0: no cap
	perAddr int // one address's share; 0: no share (a TCP load balancer in front)
	proxies proxyTrust

	mu     sync.Mutex
	n      int
	byAddr map[netip.Addr]int

	refused [inFlightReasons]atomic.Uint64
}

func newInFlight(total, perAddr int, proxies proxyTrust) *inFlight {
	return &inFlight{total: total, perAddr: perAddr, proxies: proxies, byAddr: map[netip.Addr]int{}}
}

// enter counts a request of addr in, or says why not (-1: it is in).
func (f *inFlight) enter(addr netip.Addr) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	share := f.perAddr > 0 && addr.IsValid() // no address (not TCP): the total alone
	if share && f.byAddr[addr] >= f.perAddr {
		return inFlightPerAddr
	}
	if f.total > 0 && f.n >= f.total {
		return inFlightTotal
	}
	f.n++
	if share {
		f.byAddr[addr]++
	}
	return -1
}

// leave counts a request of addr out.
func (f *inFlight) leave(addr netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.perAddr > 0 && addr.IsValid() {
		if n := f.byAddr[addr] - 1; n > 0 {
			f.byAddr[addr] = n
		} else {
			delete(f.byAddr, addr)
		}
	}
}

// count is the number of requests in flight.
func (f *inFlight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// limit is the middleware that keeps the counts. A request over them is
// refused at once, before it costs anything: 429 over the address's
// share, 503 over the server's, each with Retry-After: 1. Over HTTP/2
// the refusal is a reset of the stream (RST_STREAM, as Go's server
// resets a stream whose handler panicked), not an answer: an answer that
// the client does not read would hold its handler and its stream, which
// is what the share is there to bound. The log and the metrics say 429 or
// 503 all the same.
func (f *inFlight) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := connAddrKey(f.proxies.clientAddr(r))
		if why := f.enter(addr); why >= 0 {
			f.refused[why].Add(1)
			status, err := http.StatusTooManyRequests, errorf("rate_limited", "more than %d requests of your address are in flight; retry once some are answered", f.perAddr)
			if why == inFlightTotal {
				status, err = http.StatusServiceUnavailable, errorf("unavailable", "the server holds as many requests as it may (%d); retry later", f.total)
			}
			w.Header().Set("Retry-After", "1")
			if r.ProtoMajor == 2 {
				w.WriteHeader(status) // for the log and the metrics: never sent
				panic(http.ErrAbortHandler)
			}
			writeError(w, r, err)
			return
		}
		if r.ProtoMajor != 2 {
			// HTTP/1.1: the connection's one goroutine, bounded by the
			// connections, writes what is left once the handler returns.
			defer f.leave(addr)
			next.ServeHTTP(w, r)
			return
		}
		// HTTP/2: the stream lives on until its last frame is written,
		// which a client that does not read holds back; its context ends
		// then. (context.AfterFunc runs in a goroutine of its own: not
		// paid on HTTP/1.1.)
		context.AfterFunc(r.Context(), func() { f.leave(addr) })
		next.ServeHTTP(w, r)
	})
}

// register adds the counts to the metrics.
func (f *inFlight) register(set *vm.Set) {
	set.RegisterMetricsWriter(func(w io.Writer) {
		vm.WriteGaugeUint64(w, "petstore_requests_in_flight", uint64(f.count()))
		vm.WriteMetadataIfNeeded(w, "petstore_requests_in_flight_refused_total", "counter")
		for i, name := range inFlightReasonNames {
			fmt.Fprintf(w, "petstore_requests_in_flight_refused_total{reason=%q} %d\n", name, f.refused[i].Load())
		}
	})
}

// Memory given back: when the process holds releaseAbove more than after
// its last release (a flood's goroutines, stacks and buffers, which Go
// keeps for reuse and gives back only slowly) and the requests in flight
// are down to releaseBelow, releaseMemory returns what is free to the
// system (debug.FreeOSMemory: a garbage collection, then every free page),
// at most once per --memory-release-interval.
const (
	releaseAbove = 16 << 20
	releaseBelow = maxInFlightPerAddr
)

// releaseMemory gives free memory back to the system after a flood, as
// the constants above say, until ctx ends.
func (f *inFlight) releaseMemory(ctx context.Context, every time.Duration, logger *slog.Logger) {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	held := func() uint64 {
		metrics.Read(samples)
		return samples[0].Value.Uint64() - samples[1].Value.Uint64()
	}
	base := held()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := held()
		if before < base+releaseAbove || f.count() > releaseBelow {
			continue
		}
		debug.FreeOSMemory()
		base = held()
		logger.Info("memory given back to the system", "held_mib", before>>20, "now_mib", base>>20)
	}
}
