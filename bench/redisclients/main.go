// Command redisclients compares two Redis clients, rueidis (auto-pipelining)
// and go-redis v9 (connection pool), on the rate-limit step of the GET path:
// one call of ../../limits_redis.lua per request, each with a 50 ms timeout.
//
// It is its own module so that the main binary does not depend on go-redis.
// See README.md.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// The allowed path: limits so large that every call is allowed.
// now(0: Redis TIME), rpm, rpd, floor, floorDay, knownBan, threshold, banFor.
var scriptArgs = []string{"0", "1000000", "100000000", "0", "0", "0", "60", "900000000"}

const callTimeout = 50 * time.Millisecond
const warmup = 500 * time.Millisecond

// countConn counts the Write calls (round trips sent) on a connection.
type countConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// counters shared by all connections of one client.
type counters struct {
	writes atomic.Int64
	dials  atomic.Int64
}

func (k *counters) wrap(conn net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	k.dials.Add(1)
	return countConn{Conn: conn, writes: &k.writes}, nil
}

// caller runs one script call for the given key.
type caller func(ctx context.Context, key string) error

type target struct {
	call  caller
	close func()
}

func newRueidis(addr string, db int, src string, k *counters) (target, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{addr},
		DisableCache: true,
		SelectDB:     db,
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, tlsCfg *tls.Config) (net.Conn, error) {
			if tlsCfg != nil {
				return k.wrap(tls.DialWithDialer(d, "tcp", dst, tlsCfg))
			}
			return k.wrap(d.DialContext(ctx, "tcp", dst))
		},
	})
	if err != nil {
		return target{}, err
	}
	script := rueidis.NewLuaScript(src)
	return target{
		call: func(ctx context.Context, key string) error {
			return script.Exec(ctx, c, []string{key}, scriptArgs).Error()
		},
		close: c.Close,
	}, nil
}

func newGoRedis(addr string, db int, src string, k *counters) (target, error) {
	c := redis.NewClient(&redis.Options{
		Addr: addr,
		DB:   db,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return k.wrap(d.DialContext(ctx, network, addr))
		},
	})
	script := redis.NewScript(src)
	args := make([]any, len(scriptArgs))
	for i, a := range scriptArgs {
		args[i] = a
	}
	return target{
		call: func(ctx context.Context, key string) error {
			return script.Run(ctx, c, []string{key}, args...).Err()
		},
		close: func() { c.Close() },
	}, nil
}

type phase struct {
	calls, errs int64
	elapsed     time.Duration
	lat         []time.Duration // every successful call's latency
	firstErr    error
}

// run calls the script from n goroutines until d has passed.
func run(t target, keys []string, n int, d time.Duration) phase {
	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var p phase
	// A safety net: no call outlives the run by more than its own timeout.
	parent, cancel := context.WithTimeout(context.Background(), d+5*time.Second)
	defer cancel()
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1<<14)
			var calls, errs int64
			var firstErr error
			for !stop.Load() && parent.Err() == nil {
				key := keys[rand.IntN(len(keys))]
				ctx, cancel := context.WithTimeout(parent, callTimeout)
				t0 := time.Now()
				err := t.call(ctx, key)
				el := time.Since(t0)
				cancel()
				calls++
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				lat = append(lat, el)
			}
			mu.Lock()
			p.calls += calls
			p.errs += errs
			p.lat = append(p.lat, lat...)
			if p.firstErr == nil {
				p.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	p.elapsed = time.Since(start)
	return p
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverStats is what the server reports of its own work: CPU
// (used_cpu_user+used_cpu_sys) and the reads it made from client sockets
// (total_reads_processed), from INFO cpu and INFO stats.
type serverStats struct {
	cpu   time.Duration
	reads int64
}

func redisStats(ctx context.Context, admin *redis.Client) (serverStats, error) {
	var st serverStats
	info, err := admin.Info(ctx, "cpu", "stats").Result()
	if err != nil {
		return st, err
	}
	var cpu float64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch name {
		case "used_cpu_user", "used_cpu_sys":
			f, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return st, err
			}
			cpu += f
		case "total_reads_processed":
			if st.reads, err = strconv.ParseInt(val, 10, 64); err != nil {
				return st, err
			}
		}
	}
	st.cpu = time.Duration(cpu * float64(time.Second))
	return st, nil
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func fmtDur(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	if us >= 1000 {
		return fmt.Sprintf("%.2f ms", us/1000)
	}
	return fmt.Sprintf("%.0f µs", us)
}

type row struct {
	client string
	conc   int
	p      phase
	writes int64
	dials  int64
	cpu    time.Duration
	srv    serverStats // the server's, during the measured run
	srvErr error
}

func main() {
	scriptPath := flag.String("script", "../../limits_redis.lua", "the rate-limit Lua script")
	addr := flag.String("addr", "127.0.0.1:6379", "Redis address")
	db := flag.Int("db", 0, "Redis database")
	prefix := flag.String("prefix", "bench:redisclients:", "prefix of every key written (deleted at the end)")
	duration := flag.Duration("duration", 5*time.Second, "measured time per client and concurrency")
	concList := flag.String("concurrency", "1,16,64,256", "comma-separated numbers of goroutines")
	nkeys := flag.Int("keys", 1000, "number of distinct keys; each call picks one at random")
	which := flag.String("client", "both", "both, rueidis or goredis")
	flag.Parse()

	if err := mainErr(*scriptPath, *addr, *db, *prefix, *duration, *concList, *nkeys, *which); err != nil {
		fmt.Fprintln(os.Stderr, "redisclients:", err)
		os.Exit(1)
	}
}

func mainErr(scriptPath, addr string, db int, prefix string, duration time.Duration, concList string, nkeys int, which string) error {
	srcBytes, err := os.ReadFile(scriptPath)
	if err != nil {
		return err
	}
	src := string(srcBytes)
	if prefix == "" {
		return errors.New("-prefix must not be empty")
	}
	if nkeys < 1 || duration <= 0 {
		return errors.New("-keys and -duration must be positive")
	}
	var concs []int
	for _, s := range strings.Split(concList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("bad -concurrency %q", concList)
		}
		concs = append(concs, n)
	}
	var clients []string
	switch which {
	case "both":
		clients = []string{"rueidis", "goredis"}
	case "rueidis", "goredis":
		clients = []string{which}
	default:
		return fmt.Errorf("bad -client %q: both, rueidis or goredis", which)
	}
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = prefix + "k:" + strconv.Itoa(i)
	}

	// An uncounted client for INFO and the final clean-up.
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	defer admin.Close()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	err = admin.Ping(pctx).Err()
	pcancel()
	if err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	defer cleanup(admin, prefix)
	if err := checkAllowed(ctx, admin, src, keys[0]); err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "script %s, %d keys, %v per run, GOMAXPROCS %d\n",
		scriptPath, nkeys, duration, runtime.GOMAXPROCS(0))
	var rows []row
	for _, name := range clients {
		for _, n := range concs {
			var k counters
			var t target
			if name == "rueidis" {
				t, err = newRueidis(addr, db, src, &k)
			} else {
				t, err = newGoRedis(addr, db, src, &k)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			w := run(t, keys, n, warmup) // also loads the script
			if w.calls == w.errs {
				t.close()
				return fmt.Errorf("%s: every warm-up call failed: %v", name, w.firstErr)
			}
			runtime.GC()
			r := row{client: name, conc: n}
			srv0, srvErr := redisStats(ctx, admin)
			w0, cpu0 := k.writes.Load(), cpuTime()
			r.p = run(t, keys, n, duration)
			r.cpu = cpuTime() - cpu0
			r.writes = k.writes.Load() - w0
			srv1, err1 := redisStats(ctx, admin)
			r.srv = serverStats{cpu: srv1.cpu - srv0.cpu, reads: srv1.reads - srv0.reads}
			r.srvErr = errors.Join(srvErr, err1)
			r.dials = k.dials.Load() // connections opened in all, warm-up included
			t.close()
			slices.Sort(r.p.lat)
			rows = append(rows, r)
			fmt.Fprintf(os.Stderr, "%s c=%d: %d calls, %d errors\n", name, n, r.p.calls, r.p.errs)
			if r.p.firstErr != nil {
				fmt.Fprintf(os.Stderr, "  first error: %v\n", r.p.firstErr)
			}
		}
	}

	// The calls measured must have taken the allowed path to the end.
	if err := checkAllowed(ctx, admin, src, keys[0]); err != nil {
		return err
	}

	fmt.Println("| client | concurrency | calls/s | p50 | p99 | round trips per call | client CPU µs per call | errors | conns | redis reads per call | redis CPU µs per call |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		calls := float64(r.p.calls)
		if calls == 0 {
			calls = 1
		}
		srvReads, srvCPU := "n/a", "n/a"
		if r.srvErr == nil {
			srvReads = fmt.Sprintf("%.3f", float64(r.srv.reads)/calls)
			srvCPU = fmt.Sprintf("%.1f", float64(r.srv.cpu)/float64(time.Microsecond)/calls)
		}
		fmt.Printf("| %s | %d | %.0f | %s | %s | %.3f | %.1f | %d | %d | %s | %s |\n",
			r.client, r.conc,
			float64(r.p.calls)/r.p.elapsed.Seconds(),
			fmtDur(pct(r.p.lat, 0.50)), fmtDur(pct(r.p.lat, 0.99)),
			float64(r.writes)/calls,
			float64(r.cpu)/float64(time.Microsecond)/calls,
			r.p.errs, r.dials, srvReads, srvCPU)
	}
	return nil
}

// checkAllowed makes one uncounted call and checks that it was allowed
// (reply {1, 0, ...}), so that the benchmark measures the allowed path.
func checkAllowed(ctx context.Context, admin *redis.Client, src, key string) error {
	args := make([]any, len(scriptArgs))
	for i, a := range scriptArgs {
		args[i] = a
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	reply, err := redis.NewScript(src).Run(ctx, admin, []string{key}, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("check call: %w", err)
	}
	if len(reply) < 2 || reply[0] != 1 || reply[1] != 0 {
		return fmt.Errorf("check call not allowed: reply %v", reply)
	}
	return nil
}

// cleanup deletes every key under prefix with SCAN and UNLINK.
func cleanup(admin *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cursor uint64
	var n int64
	pattern := escapeGlob(prefix) + "*"
	for {
		keys, next, err := admin.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			fmt.Fprintln(os.Stderr, "clean-up scan:", err)
			return
		}
		if len(keys) > 0 {
			d, err := admin.Unlink(ctx, keys...).Result()
			if err != nil {
				fmt.Fprintln(os.Stderr, "clean-up unlink:", err)
				return
			}
			n += d
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	fmt.Fprintf(os.Stderr, "deleted %d keys under %q\n", n, prefix)
}

// escapeGlob escapes the characters SCAN MATCH treats specially.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
