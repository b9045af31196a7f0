// main.go owns the process: main and its exit codes, and serve, which
// starts the server, runs its background work and stops it gracefully.
// docs/design.md has a map of the other files.

// Command petstore is the pet store API server: one static binary, one
// SQLite file.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode prints err as one line and maps it to the exit code: 0 success,
// 1 runtime failure, 2 bad usage.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	// Some errors (pgx's, of a connection that failed at every address)
	// span lines: the message stays one line, for a log shipper.
	msg := strings.NewReplacer("\n\t", " ", "\n", " ").Replace(err.Error())
	fmt.Fprintf(stderr, "petstore: %s\n", msg)
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// serve runs the API server until ctx ends, then shuts it down gracefully.
func serve(ctx context.Context, cfg serveConfig, stderr io.Writer) error {
	// Whoever reads our stderr may go away (a pipe to a log shipper that
	// died): the log's write then fails with EPIPE, instead of SIGPIPE
	// killing the server in the middle of its requests.
	signal.Ignore(syscall.SIGPIPE)
	// SIGHUP reads the certificate files again (DECISIONS.md section 13);
	// it never ends the server.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	logs := newLogWriter(stderr)
	defer logs.Flush() // registered first: runs after every other deferred log line
	logger := newLogger(cfg.logFormat, cfg.logLevel, logs)
	if cfg.trustProxy {
		logger.Warn("--trust-proxy believes X-Forwarded-For from any sender: a client that reaches this server without going through the proxy chooses the address its requests are limited by; name the proxies with --trusted-proxies instead")
	}
	// Sockets passed by systemd (DECISIONS.md section 14) are taken first:
	// they say whether this serve is the next process of a restart, and
	// their queue holds new connections until it accepts.
	passed, err := systemdListeners(cfg)
	if err != nil {
		return err
	}
	defer passed.close()
	// One serve per SQLite file, before migrating or listening: a second
	// one would keep caches and minute buckets of its own.
	release, err := sqliteHoldServeLock(ctx, cfg.db, len(passed.fromSystemd) > 0, cfg.shutdownTimeout, func(pid int, wait time.Duration) {
		logger.Info("waiting for the previous serve to let go of the database", "holder_pid", pid, "wait", wait)
		logs.Flush()
	})
	if errors.Is(err, errSQLiteStoppedWaiting) {
		logger.Info(err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	defer release() // registered before the store's close: runs after it
	store, err := openStore(ctx, cfg.db, storeOptions{migrate: true, now: time.Now, busy: cfg.busyTimeout, maxConns: cfg.dbMaxConns,
		replica: cfg.dbReplica, replicaWait: cfg.replicaWait, replicaMaxLag: cfg.replicaMaxLag, log: logger})
	if err != nil {
		return err
	}
	store = wrapStore(ctx, store)
	tr := newTracer(cfg.trace, logger) // nil: tracing off
	pgWarnReplication(logger, store.Replication())
	listening := false // "stopped" only follows "listening": a failed start prints its error alone
	defer func() {
		// Runs last: after the servers drained and the upkeep wrote the
		// day counts, fold the WAL into the database file.
		if err := store.Checkpoint(context.WithoutCancel(ctx)); err != nil {
			logger.Warn("checkpoint on shutdown", "err", err)
		}
		store.Close()
		if listening {
			logger.Info("stopped")
		}
	}()

	// HTTPS (DECISIONS.md section 13): a pair of files that does not load
	// ends the start here.
	certs, err := newCertSource(ctx, cfg, store, logger)
	if err != nil {
		return err
	}

	bans := newBanQueue()
	lim := newLimiter(limiterConfig{
		Now:          time.Now,
		AnonRPM:      cfg.anonRPM,
		MaxAddrs:     cfg.maxAddrs,
		BanThreshold: cfg.banThreshold,
		BanDuration:  cfg.banDuration,
		OnBan:        func(id int64, until time.Time) { bans.push(keyBan{id, until}) },
	})
	var limits rateLimiter = lim
	var redisLim *redisLimiter
	redisPrefix := ""
	if cfg.redis != "" {
		if redisPrefix, err = redisPrefixOf(ctx, cfg.redisPrefix, store.DeploymentID); err != nil {
			return err
		}
		if redisLim, err = newRedisLimiter(ctx, redisOptions{url: cfg.redis, prefix: redisPrefix, timeout: cfg.redisTimeout}, lim, logger); err != nil {
			return err
		}
		defer redisLim.close() // run closes it too; this covers a start that fails
		limits = redisLim
	}
	metrics := newServerMetrics(limits, store)
	metrics.limitsShared(limits)
	metrics.logsDropped(&logs.lost)
	metrics.tracesDropped(tr)
	keys := newKeyring(store, cfg.env, clockOf(ctx), func(k *apiKey) { limits.setBan(k.Lineage, k.BannedUntil) })
	if err := keys.refresh(ctx); err != nil {
		return err
	}
	today := time.Now().UTC().Format(time.DateOnly)
	counts, err := store.DayCounts(ctx, today)
	if err != nil {
		return err
	}
	for id, n := range counts {
		lim.loadDayCount(id, today, n)
	}

	lns, err := openListeners(cfg, passed)
	if err != nil {
		return err
	}
	defer lns.close()
	idem := newIdempotency(traceIdem(store, tr, isPostgresURL(cfg.db)), cfg.idempotencyTTL, clockOf(ctx))
	reqLog := newRequestLog(cfg.logFormat, cfg.logLevel, logs)
	reqLog.now = clockOf(ctx)
	logs.beforeFlush = func(final bool) { reqLog.endSecond(reqLog.now(), final) }
	ready := newReadiness(store, clockOf(ctx)) // /readyz's, on both listeners
	// The caps on connections (DECISIONS.md section 17), kept at accept on
	// the API and plain listeners.
	caps := newConnCaps(cfg.maxConnsPerAddr, maxConnsOf(cfg, logger), cfg.adminMaxConns, inPrefixes(cfg.trustedProxies), cfg.readHeaderTimeout)
	caps.onRefuse = reqLog.connRefused
	caps.register(metrics.set)
	// The requests in flight (inflight.go): as many as connections, and a
	// share of them per address unless the cap per address is off.
	flight := newInFlight(caps.total, min(cfg.maxConnsPerAddr, 1)*maxInFlightPerAddr, cfg.proxies())
	flight.register(metrics.set)
	api := newHTTPServer(newServer(logger, reqLog, traceCatalog(store, tr, isPostgresURL(cfg.db)), ready, idem, keys, limits, metrics, flight, cfg, certs, tr), cfg, logger)
	if certs != nil {
		useTLS(api, certs)
		api.HTTP2.CountError = metrics.http2Error
		api.ErrorLog = tlsErrorLog(reqLog, metrics, logger) // failed handshakes: on the log budget, counted
		metrics.servesTLS(certs, len(cfg.acmeDomains) > 0)
		if a, ok := certs.(*acmeCerts); ok {
			a.metrics = metrics // its failed attempts (acmeFailed), its refused challenges
			a.limits = limits   // the challenges' limit (DECISIONS.md section 17)
			a.tracer = tr
			// HTTP-01 wherever the plain listener is: bound from
			// --http-addr or passed by systemd without it.
			a.http01 = lns.http != nil
		}
	}
	servers := []*http.Server{api}
	listeners := []net.Listener{&closeOnce{Listener: caps.listen(lns.api, listenerAPI)}}
	capped := []*http.Server{api}
	if lns.http != nil {
		plain := newHTTPServer(plainHandler(cfg, certs, reqLog, metrics, logger), cfg, logger)
		servers, capped = append(servers, plain), append(capped, plain)
		listeners = append(listeners, &closeOnce{Listener: caps.listen(lns.http, listenerPlain)})
	}
	if lns.admin != nil {
		// Its own cap (--admin-max-conns), not the API's: it answers while
		// they are full.
		admin := newHTTPServer(newAdminServer(ready, limits, metrics, cfg, certs), cfg, logger)
		servers, capped = append(servers, admin), append(capped, admin)
		listeners = append(listeners, &closeOnce{Listener: caps.listen(lns.admin, listenerAdmin)})
	}
	var fresh newConns
	for _, srv := range servers {
		srv.ConnState = fresh.track
	}
	for _, srv := range capped {
		caps.serve(srv)
	}
	if err := createFirstKey(ctx, store, keys, cfg.env, stderr); err != nil {
		return err
	}

	// The background work outlives ctx: it stops only once the servers have
	// drained (deferred, so it runs on the way out), so that the log is
	// still written during the drain, and the upkeep's last write of day
	// counts and bans comes after the last request.
	var wg sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopBackground()
		wg.Wait()
	}()
	wg.Go(func() { keys.watch(bgCtx, time.Second, logger) })
	if redisLim != nil {
		wg.Go(func() { redisLim.run(bgCtx) })
	}
	up := &upkeep{lim: limits, store: store, keys: keys, bans: bans, m: metrics, log: logger, shared: isPostgresURL(cfg.db), now: time.Now}
	wg.Go(func() { up.run(bgCtx) })
	wg.Go(func() { idem.purge(bgCtx, logger) })
	wg.Go(func() { logs.flushEvery(bgCtx, 100*time.Millisecond) })
	if tr != nil {
		wg.Go(func() { tr.exp.run(bgCtx) }) // after the drain: the last requests' spans go too
	}
	wg.Go(func() { flight.releaseMemory(bgCtx, cfg.memoryRelease, logger) })

	serveErr := make(chan error, len(servers))
	if certs != nil {
		wg.Go(func() { certs.run(bgCtx) })
	}
	wg.Go(func() {
		for {
			select {
			case <-bgCtx.Done():
				return
			case <-hup:
				if certs == nil {
					logger.Info("SIGHUP: nothing to reload (no --tls-cert)")
					continue
				}
				certs.reload()
			}
		}
	})
	for i, srv := range servers {
		if srv == api && certs != nil {
			go func() { serveErr <- srv.ServeTLS(listeners[i], "", "") }()
			continue
		}
		go func() { serveErr <- srv.Serve(listeners[i]) }()
	}
	attrs := []any{"addr", lns.api.Addr().String(), "env", cfg.env, "db", redactDB(cfg.db), "version", buildVersion()}
	if lns.http != nil {
		attrs = append(attrs, "http_addr", lns.http.Addr().String())
	}
	if lns.admin != nil {
		attrs = append(attrs, "admin_addr", lns.admin.Addr().String())
	}
	if len(lns.fromSystemd) > 0 {
		attrs = append(attrs, "systemd", strings.Join(lns.fromSystemd, ","))
	}
	if cfg.redis != "" {
		attrs = append(attrs, "redis", redactDB(cfg.redis), "redis_prefix", redisPrefix)
	}
	if tr != nil {
		attrs = append(attrs, "otlp_endpoint", redactDB(tr.exp.url))
	}
	attrs = append(attrs, "max_conns", caps.total, "max_conns_per_addr", caps.perAddr)
	logger.Info("listening", attrs...)
	listening = true
	logs.Flush()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", cfg.shutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	// Stop accepting (systemd's sockets keep new connections in their
	// queue for the next process), then let the connections accepted just
	// before have their first request answered: Shutdown would drop it.
	for _, ln := range listeners {
		ln.Close()
	}
	// Connections silent for a second without a request hold no one's
	// request (a stalled ClientHello, HTTP/2 without a stream): closed now,
	// not waited for.
	if n := caps.closeSilent(); n > 0 {
		logger.Info("closed connections silent without a request", "count", n)
	}
	fresh.wait(shutdownCtx)
	for _, srv := range servers {
		if err := shutdownServer(shutdownCtx, srv); err != nil {
			logger.Warn("requests still running at the shutdown timeout; closing their connections", "err", err)
			srv.Close()
		}
	}
	return nil
}

// shutdownServer is srv.Shutdown(ctx), called again every 100 ms until it
// is done or ctx ends. Go's HTTP/2 sends its GOAWAY only to the
// connections it holds when Shutdown starts (golang/go#81153): one whose
// TLS handshake ends later (it outlasted newConns.wait's newConnGrace)
// would serve on without one, and hold the drain open until the timeout
// cut it. Each call sends the GOAWAY to those that have none yet (a
// connection gets it once).
func shutdownServer(ctx context.Context, srv *http.Server) error {
	for {
		round, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := srv.Shutdown(round)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

// newHTTPServer returns an http.Server for h with timeouts that keep slow
// or idle clients from holding connections for long.
func newHTTPServer(h http.Handler, cfg serveConfig, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.readHeaderTimeout,
		ReadTimeout:       cfg.readTimeout,
		WriteTimeout:      cfg.writeTimeout,
		IdleTimeout:       cfg.idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// "OPTIONS *" goes to our handler (a JSON 404 with a request id)
		// instead of net/http's bare 200.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// maxHeaderBytes bounds a request's header section.
const maxHeaderBytes = 32 << 10

func unwrapOpError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return se.Err
		}
		return oe.Err
	}
	return err
}

// createFirstKey creates a free key and prints it once to stderr when the
// database has no keys at all, so that a new user can call the API at once.
func createFirstKey(ctx context.Context, store keyStore, keys *keyring, env string, stderr io.Writer) error {
	secret := newKeySecret(env)
	k, created, err := store.CreateFirstKey(ctx, hashKey(secret), "first key", env)
	if err != nil || !created {
		return err
	}
	fmt.Fprintf(stderr, "petstore: the database had no API keys, so this free %s key (id %d) was created.\n"+
		"petstore: it is shown only this once; keep it safe:\n%s\n", env, k.ID, secret)
	return keys.refresh(ctx)
}
