// limits_http.go owns rate limiting on the request path: the interface a
// limiter offers the middleware and the upkeep, limitRequests, the
// rate-limit headers and 429s, and the client address that requests
// without a key are counted by.

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// rateLimiter is what the rest of petstore needs of a limiter: the request
// path counts a request of a key or of an address; serve loads the day
// counts and the keyring's bans into it; the upkeep takes and returns day
// counts, reads bans and sweeps; the metrics read its size, and they and
// /readyz its backend. The in-process limiter (limits.go) is one; the Redis
// one (limits_redis.go) another.
type rateLimiter interface {
	allowKey(id int64, rpm, rpd int64) decision
	allowAddr(addr netip.Addr) decision
	loadDayCount(id int64, day string, n int64)
	takeDayDeltas(dst []dayDelta) []dayDelta
	returnDayDeltas(ds []dayDelta)
	setBan(id int64, until time.Time)
	banOf(id int64) time.Time
	sweep()
	stats() limiterStats
	backend() limiterBackend
}

// limiterBackend says where a limiter keeps its counts, for /readyz and the
// metrics: in this process (the zero value), or shared, in Redis, with how
// its calls there went.
type limiterBackend struct {
	shared bool  // the counts are in Redis
	up     bool  // the last call to Redis answered
	calls  int64 // calls to Redis, answered or not
	fails  int64 // calls to Redis that failed or timed out
}

// limitRequests applies the rate limits to every request under /v1/, before
// routing: a request with a usable key (in its state, from authenticate)
// counts against that key, any other against its client address. Every
// response under /v1/ gets the binding window's headers; a refused request
// gets 429 and goes no further.
//
// A banned key's request waits hold before its 429 (--ban-hold): a key is
// banned for sending on and on while refused, so a client that loops
// without reading Retry-After gets at most 1/hold answers a second for each
// request it has open at a time (one on an HTTP/1.1 connection, up to
// maxStreams on an HTTP/2 one), and its flood costs the server next to
// nothing, instead of a refusal's CPU as fast as the loop can go, taken
// from every other key (BENCHMARKS.md, row 10). The wait holds no lock; it
// ends early when the client hangs up, as far as net/http notices (a
// request whose body is still unread waits the whole hold); a server
// shutting down waits for it at most hold. The log's duration and the
// latency metrics include it.
//
// A refused request is not routed: routeOf names the route it would have
// matched, for the log and the metrics.
func limitRequests(lim rateLimiter, proxies proxyTrust, hold time.Duration, m *serverMetrics, routeOf func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !isAPIPath(r.URL.Path) {
				next.ServeHTTP(w, r)
				return
			}
			var d decision
			st := stateOf(r)
			rs := startRedis(r, lim)
			if st != nil && st.key != nil {
				d = lim.allowKey(st.key.Lineage, st.key.RPM, st.key.RPD) // one bucket, quota and ban for a lineage
			} else {
				d = lim.allowAddr(proxies.clientAddr(r))
			}
			rs.end(lim, d)
			d.setHeaders(w.Header())
			if !d.Allowed {
				if st != nil {
					st.pattern = routeOf(r)
				}
				m.refused(d.Code)
				if d.Code == "key_banned" && hold > 0 {
					wait(r.Context(), hold)
				}
				writeRefusal(w, d)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Bounds of --ban-hold: a wait long enough to slow a loop, and short
// enough that a server shutting down is not kept waiting for it.
const (
	defaultBanHold = 100 * time.Millisecond
	maxBanHold     = 5 * time.Second
)

// wait returns after d, or sooner when ctx ends.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// writeRefusal answers a refused request: 429 and its Error, the body
// written by hand, as writeJSON would write it (TestRefusalBody), for a
// refusal must stay cheap while a key floods (BENCHMARKS.md, row 10).
func writeRefusal(w http.ResponseWriter, d decision) {
	var buf [192]byte
	code := d.Code
	if code != "quota_exceeded" && code != "key_banned" {
		code = "rate_limited"
	}
	b := append(buf[:0], `{"status":429,"code":"`...)
	b = append(b, code...)
	b = append(b, `","message":"`...)
	switch code {
	case "quota_exceeded":
		b = append(strconv.AppendInt(append(b, "the daily quota of "...), d.Limit, 10), " requests is used up; it resets at 00:00 UTC, in "...)
		b = append(strconv.AppendInt(b, d.RetryAfter, 10), " s"...)
	case "key_banned":
		b = append(strconv.AppendInt(append(b, "this key is banned for "...), d.RetryAfter, 10),
			" s for sending too many requests while rate limited"...)
	default:
		b = append(strconv.AppendInt(append(b, "rate limit of "...), d.Limit, 10), " requests per minute exceeded; retry after "...)
		b = append(strconv.AppendInt(b, d.RetryAfter, 10), " s"...)
	}
	writeRaw(w, http.StatusTooManyRequests, append(b, "\"}\n"...))
}

// proxyTrust says whose X-Forwarded-For is believed: --trust-proxy's any
// sender, or the senders of --trusted-proxies (list); the zero value,
// nobody's.
type proxyTrust struct {
	any  bool
	list []netip.Prefix
}

// proxies is cfg's proxyTrust.
func (cfg *serveConfig) proxies() proxyTrust {
	return proxyTrust{any: cfg.trustProxy, list: cfg.trustedProxies}
}

// clientAddr is the address a request's rate limit is kept by (DECISIONS.md
// section 17): the connection's peer, unless the peer is a proxy whose
// X-Forwarded-For is believed.
//
// A listed proxy's header lines are read as one list, in order, and the
// client is the last entry that is not itself a listed proxy: those
// before it are the client's word and can be forged. Every entry listed:
// the first; an entry that does not parse: the peer, for no proxy of ours
// wrote it. With --trust-proxy the client is the last entry of any
// sender's header, the one the proxy in front appended.
func (p proxyTrust) clientAddr(r *http.Request) netip.Addr {
	peer := remoteAddr(r)
	if !p.any && (len(p.list) == 0 || !p.listed(peer)) {
		return peer
	}
	lines := r.Header.Values("X-Forwarded-For")
	if len(lines) == 0 {
		return peer
	}
	var first netip.Addr
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for {
			j := strings.LastIndexByte(line, ',')
			a, ok := parseForwarded(line[j+1:])
			if !ok {
				return peer
			}
			if p.any || !p.listed(a) {
				return a
			}
			first = a
			if j < 0 {
				break
			}
			line = line[:j]
		}
	}
	return first
}

// listed reports whether a is in --trusted-proxies.
func (p proxyTrust) listed(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, pf := range p.list {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

// parseForwarded reads an X-Forwarded-For entry: an address, or one with
// the port that some proxies append ("1.2.3.4:5678", "[2001:db8::1]:5678").
func parseForwarded(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a, true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), true
	}
	return netip.Addr{}, false
}

// remoteAddr is the address of r's connection's peer.
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}

// parseTrustedProxies reads --trusted-proxies: addresses or CIDR ranges,
// comma-separated; an address is a range of one.
func parseTrustedProxies(list string) ([]netip.Prefix, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var out []netip.Prefix
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, errors.New("an empty entry")
		}
		if strings.Contains(e, "/") {
			pf, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("%q is not an address or a CIDR range", e)
			}
			if pf.Addr().Is4In6() && pf.Bits() >= 96 {
				pf = netip.PrefixFrom(pf.Addr().Unmap(), pf.Bits()-96)
			}
			out = append(out, pf.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is not an address or a CIDR range", e)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// setHeaders writes d as X-RateLimit-*, the RateLimit-Policy and RateLimit
// fields of draft-ietf-httpapi-ratelimit-headers-09, and Retry-After.
func (d decision) setHeaders(h http.Header) {
	// All values go into one buffer and then one string, and all header
	// slices share one backing array: two allocations instead of a dozen
	// on a path every request takes.
	var buf [192]byte
	var names [6]string
	var ends [6]int
	b, n := buf[:0], 0
	add := func(name string) {
		names[n], ends[n] = name, len(b)
		n++
	}
	if !d.Allowed {
		b = strconv.AppendInt(b, d.RetryAfter, 10)
		add("Retry-After")
	}
	if d.Window != 0 {
		b = strconv.AppendInt(b, d.Limit, 10)
		add("X-Ratelimit-Limit")
		b = strconv.AppendInt(b, d.Remaining, 10)
		add("X-Ratelimit-Remaining")
		b = strconv.AppendInt(b, d.Reset, 10)
		add("X-Ratelimit-Reset")
		if d.MinuteRPM > 0 {
			b = limPolicyItem(b, "minute", d.MinuteRPM, 60)
		}
		if d.DayRPD > 0 {
			if d.MinuteRPM > 0 {
				b = append(b, ", "...)
			}
			b = limPolicyItem(b, "day", d.DayRPD, 86400)
		}
		add("Ratelimit-Policy")
		name := "minute"
		if d.Window == 86400 {
			name = "day"
		}
		// The draft wants t to name the same instant as Retry-After when both are sent.
		t := d.ResetIn
		if !d.Allowed {
			t = d.RetryAfter
		}
		b = append(append(append(b, '"'), name...), `";r=`...)
		b = append(strconv.AppendInt(b, d.Remaining, 10), ";t="...)
		b = strconv.AppendInt(b, t, 10)
		add("Ratelimit")
	}
	if n == 0 {
		return
	}
	all := string(b)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = all[start:ends[i]]
		h[names[i]] = vals[i : i+1 : i+1]
		start = ends[i]
	}
}

func limPolicyItem(b []byte, name string, q, w int64) []byte {
	b = append(append(append(b, '"'), name...), `";q=`...)
	b = append(strconv.AppendInt(b, q, 10), ";w="...)
	return strconv.AppendInt(b, w, 10)
}
