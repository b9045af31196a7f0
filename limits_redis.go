// limits_redis.go owns the shared limiter of --redis: every request's
// minute bucket, day count and ban checked and updated in Redis in one
// script call (limits_redis.lua), so that limits hold across instances; and
// the fall back to the in-process limiter while Redis does not answer.

package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

//go:embed limits_redis.lua
var redisScriptText string

var redisScript = rueidis.NewLuaScript(redisScriptText)

const (
	defaultRedisTimeout = 50 * time.Millisecond
	// redisProbeEvery is how often a limiter whose Redis does not answer
	// asks again.
	redisProbeEvery = 500 * time.Millisecond
)

// redisLimiter is a rateLimiter whose decisions come from Redis. It keeps
// an in-process limiter beside it (embedded: the day counts' way to the
// database, the bans the keyring loads, the sweep and the stats are its),
// which counts every request Redis allows, for the database, and decides
// alone while Redis does not answer.
type redisLimiter struct {
	*limiter
	opt          rueidis.ClientOption
	prefix       string
	timeout      time.Duration
	banThreshold int64
	banDuration  int64 // µs
	onBan        func(id int64, until time.Time)
	log          *slog.Logger
	// now, when set, is passed to the script as the time; nil uses
	// Redis's own clock, so that instances' clocks do not matter.
	now func() time.Time

	client    atomic.Pointer[rueidis.Client] // nil until a connection was made
	up        atomic.Bool                    // the last call to Redis answered
	calls     atomic.Int64                   // script calls, answered or not
	fails     atomic.Int64                   // script calls that failed or timed out
	closeOnce sync.Once

	// The leases (limits_redis_lease.go).
	instance  string       // this instance's name for its leases in Redis, random
	rtt       atomic.Int64 // ns, a call's time, averaged (observe)
	rttMin    atomic.Int64 // ns, the quickest calls' time (observe)
	leases    redisLeases  // by key
	noLease   bool         // decide every request in Redis, as before leases (tests)
	fixedWant int64        // when > 0, the lease a key in use wants, whatever its rate (tests)
	async     func(func()) // runs a lease's call in the background; nil: go f()
}

// redisLimiter must stay a rateLimiter: serve uses it in place of the
// in-process one when --redis is set.
var _ rateLimiter = (*redisLimiter)(nil)

type redisOptions struct {
	url     string
	prefix  string
	timeout time.Duration
	now     func() time.Time // nil: Redis's clock
	noLease bool             // no leases: every request decided in Redis (tests)
}

// parseRedisURL checks a --redis URL and returns its client options. Its
// errors never quote the URL, which may hold a password.
func parseRedisURL(s string) (rueidis.ClientOption, error) {
	u, err := url.Parse(s)
	if err != nil {
		return rueidis.ClientOption{}, errors.New("--redis is not a valid URL")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return rueidis.ClientOption{}, fmt.Errorf("--redis must be a redis:// or rediss:// URL, got scheme %q", u.Scheme)
	}
	if u.Host == "" {
		return rueidis.ClientOption{}, errors.New("--redis names no host")
	}
	// A raw @ or # after the host is a password that was not
	// percent-encoded (redis://u:12/34@h/0): what follows its / ? or #
	// would be shown as a path, query or fragment.
	_, rest, _ := strings.Cut(s, "://")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 && strings.ContainsAny(rest[i:], "@#") {
		return rueidis.ClientOption{}, errors.New("--redis: an @ or # after the host; " + percentEncodeHint)
	}
	opt, err := rueidis.ParseURL(s)
	if err != nil {
		return opt, errors.New("--redis: " + strings.TrimPrefix(withoutPassword(err.Error(), u), "redis: "))
	}
	// Through Sentinel the host and addr= are the Sentinels, asked over
	// plain TCP without credentials; rueidis would take rediss:// as TLS
	// to the master checked against the first Sentinel's host name.
	if u.Query().Has("master_set") {
		if opt.Sentinel.MasterSet == "" {
			return opt, errors.New("--redis: master_set is empty: name the master the Sentinels watch (redis://sentinel:26379/0?master_set=NAME)")
		}
		if opt.TLSConfig != nil {
			return opt, errors.New("--redis: rediss:// with master_set is not supported: petstore reaches Sentinel and the master it names over plain TCP (redis://)")
		}
	}
	return opt, nil
}

// redisPrefixOf returns the key prefix: --redis-prefix as given, or when
// it is empty the default, petstore:<deployment id>:, which deploymentID
// reads from the database (DECISIONS.md section 15).
func redisPrefixOf(ctx context.Context, flag string, deploymentID func(context.Context) (string, error)) (string, error) {
	if flag != "" {
		return flag, nil
	}
	id, err := deploymentID(ctx)
	if err != nil {
		return "", err
	}
	return "petstore:" + id + ":", nil
}

// redisRefusals begin the errors with which Redis refuses a client for
// good: who it is (NOAUTH, WRONGPASS, and Redis 5's "invalid password"),
// what it may run (NOPERM), or the database number, which this Redis lacks;
// or Sentinel its master set name (redisSentinelNoMaster). No retry cures them:
// at start they stop the start. (rueidis drops the "ERR " of Redis's "ERR
// DB index is out of range".)
var redisRefusals = []string{"NOAUTH", "WRONGPASS", "NOPERM", "DB index is out of range", "invalid password",
	"ERR DB index is out of range", "ERR invalid password", redisSentinelNoMaster, "ERR " + redisSentinelNoMaster}

// redisSentinelNoMaster is Sentinel's answer to a master set name it does not
// watch (the last Sentinel asked, when each was).
const redisSentinelNoMaster = "No such master with that name"

// isRedisRefusal reports whether err is one of redisRefusals. The
// handshake's errors (HELLO, AUTH, SELECT) are Redis's own; a refused
// CLIENT SETNAME comes wrapped, but begins with Redis's words too.
func isRedisRefusal(err error) bool {
	msg := err.Error()
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg = re.Error()
	}
	for _, p := range redisRefusals {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// newRedisLimiter returns a shared limiter on Redis beside local. It tries
// to connect and run the script once, for at most a second; if Redis does
// not answer it starts with local limits and run keeps trying, but if
// Redis refuses it for good (isRedisRefusal) it returns that error.
func newRedisLimiter(ctx context.Context, o redisOptions, local *limiter, log *slog.Logger) (*redisLimiter, error) {
	opt, err := parseRedisURL(o.url)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(o.url) // parseRedisURL parsed it
	r := &redisLimiter{
		limiter:      local,
		prefix:       o.prefix,
		timeout:      o.timeout,
		banThreshold: local.banThreshold,
		banDuration:  max(1, min(local.banDuration/1000, 1<<52)), // µs, exact in Lua
		onBan:        local.onBan,
		log:          log,
		now:          o.now,
		instance:     redisInstanceName(8),
		noLease:      o.noLease,
	}
	opt.DisableCache = true // no client-side caching: every state changes on every call
	opt.Dialer.Timeout = max(time.Second, o.timeout)
	opt.Dialer.KeepAlive = rueidis.DefaultTCPKeepAlive
	// Through Sentinel, the Sentinels are dialled with a dialer of their
	// own: without the timeout, one whose host is gone would hold the
	// start, or the search for a new master, for the system's two minutes.
	// Their user and password stay empty: the URL's are the master's.
	opt.Sentinel.Dialer = opt.Dialer
	opt.Sentinel.ClientName = "petstore"
	// Redis that stalls is given up on by the request's timeout; this
	// closes the connection too, so that a new one is made.
	opt.ConnWriteTimeout = max(2*time.Second, 10*o.timeout)
	opt.ClientName = "petstore"
	opt.MaxFlushDelay = 20 * time.Microsecond
	r.opt = opt
	if err := r.start(ctx); err != nil {
		if isRedisRefusal(err) {
			r.close()
			msg, _, _ := strings.Cut(err.Error(), "\n")
			if strings.Contains(msg, redisSentinelNoMaster) {
				msg = fmt.Sprintf("the Sentinels know no master named %q (%s)", opt.Sentinel.MasterSet, msg)
			}
			return nil, fmt.Errorf("redis %s refused this instance: %s", redactDB(o.url), withoutPassword(msg, u))
		}
		r.log.Warn("redis does not answer; rate limits are local to this instance until it does", "redis", redactDB(o.url), "err", err)
	} else {
		r.up.Store(true)
	}
	return r, nil
}

// connect makes the client if there is none yet, and checks that Redis
// answers.
func (r *redisLimiter) connect(ctx context.Context) error {
	c := r.client.Load()
	if c == nil {
		nc, err := rueidis.NewClient(r.opt)
		if err != nil {
			return err
		}
		c = &nc
		r.client.Store(c)
	}
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, r.timeout))
	defer cancel()
	return (*c).Do(ctx, (*c).B().Ping().Build()).Error()
}

// start connects and checks that Redis runs the script (a Redis that
// answers PING may still refuse it: NOPERM), within a second.
func (r *redisLimiter) start(ctx context.Context) error {
	if err := r.connect(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, r.timeout))
	defer cancel()
	start := time.Now()
	_, err := r.stepIn(ctx, r.keyName('p', "probe"), 0, 0, 0, 0, 0, 0, nil)
	if err == nil {
		r.observe(time.Since(start))
	}
	return err
}

// run checks Redis every redisProbeEvery with a call of the script itself
// (a Redis that answers PING may still refuse scripts: out of memory, read
// only, no permission), switching to local limits when it fails and back
// when it answers, until ctx ends; then it closes the client.
func (r *redisLimiter) run(ctx context.Context) {
	tick := time.NewTicker(redisProbeEvery)
	defer tick.Stop()
	defer r.close()
	go r.tendLeases(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := r.connect(ctx)
		if err == nil {
			// Given a second (or the timeout, if longer): Redis is down
			// only when it does not answer at all, not when it is far.
			pctx, cancel := context.WithTimeout(ctx, max(redisLateCall, r.timeout))
			_, err = r.stepIn(pctx, r.keyName('p', "probe"), 0, 0, 0, 0, 0, 0, nil)
			cancel()
		}
		switch {
		case err != nil && ctx.Err() == nil:
			r.down(err)
		case err == nil && r.up.CompareAndSwap(false, true):
			r.log.Info("redis answers again; rate limits are shared")
		}
	}
}

// backend reports Redis and how the calls to it went.
func (r *redisLimiter) backend() limiterBackend {
	return limiterBackend{shared: true, up: r.up.Load(), calls: r.calls.Load(), fails: r.fails.Load(),
		leaseLocal: r.leases.local.Load(), leaseWaited: r.leases.waited.Load(), leaseTimedOut: r.leases.timedOut.Load(),
		leaseGranted: r.leases.granted.Load(), leaseReturned: r.leases.returned.Load()}
}

// close closes the client, once.
func (r *redisLimiter) close() {
	r.closeOnce.Do(func() {
		if c := r.client.Load(); c != nil {
			(*c).Close()
		}
	})
}

// down records a failed call: the first one after Redis answered logs it
// and switches to local limits.
func (r *redisLimiter) down(err error) {
	r.fails.Add(1)
	if r.up.CompareAndSwap(true, false) {
		r.log.Warn("redis does not answer; rate limits are local to this instance until it does", "err", err)
	}
}

// allowAddr counts an anonymous request from addr in Redis, or in the
// local limiter while Redis does not answer.
func (r *redisLimiter) allowAddr(addr netip.Addr) decision {
	if !r.up.Load() {
		return r.limiter.allowAddr(addr)
	}
	k := limAddrKeyOf(addr)
	rpm := r.limiter.anonRPM
	res, err := r.step(r.keyName('a', strconv.FormatUint(k.hi, 16)+":"+strconv.FormatUint(k.lo, 16)), rpm, 0, 0, 0, 0, 0, nil)
	var d decision
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		// Slow, not down (the probe says when it is): this request is
		// decided here; the call may still count it in Redis.
		d = r.limiter.allowAddr(addr)
	case err != nil:
		r.down(err)
		d = r.limiter.allowAddr(addr)
	default:
		d = keyDecision(res.now, rpm, 0, res.bucket, 0, res.day, res.allowed, true)
	}
	d.ViaRedis = true
	return d
}

// keyName is the Redis key of a key's (kind 'k') or an address's ('a') state.
func (r *redisLimiter) keyName(kind byte, id string) string {
	return r.prefix + string(kind) + ":" + id
}

// redisStep is the script's answer, in the in-process limiter's units.
type redisStep struct {
	allowed, bannedNow bool
	code               int64 // 0 allowed, 1 rate_limited, 2 quota_exceeded, 3 key_banned, 4 lease only
	bucket             limBucket
	count              int64
	day                int32
	ban, now           int64 // Unix ns
	alive              bool  // the caller's lease was still recorded
	granted, leased    int64 // tokens added to its lease; tokens of every lease after the step
}

// redisLeaseArgs is what a call says of the caller's lease: whether it
// decides a request too (take), the tokens it holds unspent, and the lease
// it wants in all (0 ends it); sentAt (local Unix ns) is when it was sent.
type redisLeaseArgs struct {
	take       bool
	held, want int64
	sentAt     int64
}

// step runs the script on one key's state, within the timeout.
func (r *redisLimiter) step(key string, rpm, rpd, count int64, day int32, banUntil, threshold int64, la *redisLeaseArgs) (redisStep, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	return r.stepIn(ctx, key, rpm, rpd, count, day, banUntil, threshold, la)
}

// stepIn is step within ctx: the one place that calls Redis for a
// decision or a lease.
func (r *redisLimiter) stepIn(ctx context.Context, key string, rpm, rpd, count int64, day int32, banUntil, threshold int64, la *redisLeaseArgs) (redisStep, error) {
	c := r.client.Load()
	if c == nil {
		return redisStep{}, errors.New("not connected")
	}
	var now int64
	if r.now != nil {
		now = r.now().UnixMicro()
	}
	r.calls.Add(1)
	args := []string{
		strconv.FormatInt(now, 10), strconv.FormatInt(rpm, 10), strconv.FormatInt(rpd, 10),
		strconv.FormatInt(count, 10), strconv.FormatInt(int64(day), 10),
		strconv.FormatInt(banUntil/1000, 10), strconv.FormatInt(threshold, 10), strconv.FormatInt(r.banDuration, 10),
	}
	if la != nil {
		take := "0"
		if la.take {
			take = "1"
		}
		args = append(args, take, r.instance, strconv.FormatInt(la.held, 10), strconv.FormatInt(la.want, 10),
			strconv.FormatInt(redisLeaseLife.Microseconds(), 10))
	}
	v, err := redisScript.Exec(ctx, *c, []string{key}, args).AsIntSlice()
	if err != nil {
		return redisStep{}, err
	}
	if len(v) != 12 {
		return redisStep{}, fmt.Errorf("rate-limit script answered %d values, want 12", len(v))
	}
	// µs to ns; a token is 60,000,000 units in the script, 60e9 here.
	return redisStep{
		allowed:   v[0] == 1,
		code:      v[1],
		bannedNow: v[8] == 1,
		bucket:    limBucket{tokens: v[2] * 1000, last: v[3] * 1000},
		count:     v[4],
		day:       int32(v[5]),
		ban:       min(v[6], math.MaxInt64/1000) * 1000, // a ban "until the end of time" saturates
		now:       v[7] * 1000,
		alive:     v[9] == 1,
		granted:   v[10],
		leased:    v[11],
	}, nil
}
