// Command petstore is the pet store API server: one static binary, one
// SQLite file.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
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
	fmt.Fprintf(stderr, "petstore: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// serveConfig is the configuration of the serve command.
type serveConfig struct {
	db               string
	addr             string
	adminAddr        string
	env              string
	publicURL        string
	trustProxy       bool
	anonRPM          int64
	maxAddrs         int
	banThreshold     int64
	banDuration      time.Duration
	petsDeprecatedAt time.Time
	petsSunsetAt     time.Time

	busyTimeout       time.Duration
	shutdownTimeout   time.Duration
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	logFormat         string
	logLevel          slog.Level
}

// serve runs the API server until ctx ends, then shuts it down gracefully.
func serve(ctx context.Context, cfg serveConfig, stderr io.Writer) error {
	// Whoever reads our stderr may go away (a pipe to a log shipper that
	// died): the log's write then fails with EPIPE, instead of SIGPIPE
	// killing the server in the middle of its requests.
	signal.Ignore(syscall.SIGPIPE)
	logs := newLogWriter(stderr)
	defer logs.Flush() // registered first: runs after every other deferred log line
	logger := newLogger(cfg.logFormat, cfg.logLevel, logs)
	store, err := openStore(ctx, cfg.db, true, time.Now, cfg.busyTimeout)
	if err != nil {
		return err
	}
	defer func() {
		// Runs last: after the servers drained and the upkeep wrote the
		// day counts, fold the WAL into the database file.
		if err := store.Checkpoint(context.WithoutCancel(ctx)); err != nil {
			logger.Warn("checkpoint on shutdown", "err", err)
		}
		store.Close()
		logger.Info("stopped")
	}()

	bans := newBanQueue()
	lim := newLimiter(limiterConfig{
		Now:          time.Now,
		AnonRPM:      cfg.anonRPM,
		MaxAddrs:     cfg.maxAddrs,
		BanThreshold: cfg.banThreshold,
		BanDuration:  cfg.banDuration,
		OnBan:        func(id int64, until time.Time) { bans.push(keyBan{id, until}) },
	})
	metrics := newServerMetrics(lim, store)
	metrics.set.NewGauge("petstore_log_bytes_dropped_total", func() float64 { return float64(logs.lost.Load()) })
	keys := newKeyring(store, cfg.env, func(k *apiKey) { lim.setBan(k.ID, k.BannedUntil) })
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

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, unwrapOpError(err))
	}
	defer ln.Close()
	servers := []*http.Server{newHTTPServer(newServer(logger, newRequestLog(cfg.logFormat, cfg.logLevel, logs), store, keys, lim, metrics, cfg), cfg, logger)}
	listeners := []net.Listener{ln}
	if cfg.adminAddr != "" {
		aln, err := net.Listen("tcp", cfg.adminAddr)
		if err != nil {
			return fmt.Errorf("listen on %s (--admin-addr): %w", cfg.adminAddr, unwrapOpError(err))
		}
		defer aln.Close()
		servers = append(servers, newHTTPServer(withRequestID(newAdminServer(store, metrics, cfg)), cfg, logger))
		listeners = append(listeners, aln)
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
	up := &upkeep{lim: lim, store: store, bans: bans, m: metrics, log: logger}
	wg.Go(func() { up.run(bgCtx) })
	wg.Go(func() { logs.flushEvery(bgCtx, 100*time.Millisecond) })

	serveErr := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { serveErr <- srv.Serve(listeners[i]) }()
	}
	attrs := []any{"addr", ln.Addr().String(), "env", cfg.env, "db", cfg.db, "version", buildVersion()}
	if cfg.adminAddr != "" {
		attrs = append(attrs, "admin_addr", listeners[1].Addr().String())
	}
	logger.Info("listening", attrs...)
	logs.Flush()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", cfg.shutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			logger.Warn("requests still running at the shutdown timeout; closing their connections", "err", err)
			srv.Close()
		}
	}
	return nil
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
func createFirstKey(ctx context.Context, store Store, keys *keyring, env string, stderr io.Writer) error {
	has, err := store.HasKeys(ctx)
	if err != nil || has {
		return err
	}
	secret := newKeySecret(env)
	k, err := store.CreateKey(ctx, hashKey(secret), "first key", "free", 0, 0, env)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "petstore: the database had no API keys, so this free %s key (id %d) was created.\n"+
		"petstore: it is shown only this once; keep it safe:\n%s\n", env, k.ID, secret)
	return keys.refresh(ctx)
}

// route is one entry of the API's route table.
type route struct {
	pattern string
	handler http.Handler
}

// apiRoutes is the route table of the API under /v1: every entry is an
// operation of the OpenAPI document, and the other way round.
func apiRoutes(store Store, cfg serveConfig) []route {
	return []route{
		{"GET /v1/categories", requireKey(handleCategoryList(store, cfg.publicURL))},
		{"POST /v1/categories", requireKey(handleCategoryCreate(store))},
		{"GET /v1/pets", requireKey(handlePetList(store))},
		{"POST /v1/pets", requireKey(handlePetCreate(store))},
		{"GET /v1/pets/{petId}", sunset(cfg.petsDeprecation(), time.Now, requireKey(handlePetGet(store)))},
		{"GET /v1/store/orders", requireKey(handleOrderList(store))},
		{"POST /v1/store/orders", requireKey(handleOrderCreate(store))},
		{"GET /v1/openapi.json", handleOpenAPI(cfg.publicURL, cfg.env)},
	}
}

// petsDeprecation is the timeline of GET /v1/pets/{petId}.
func (cfg serveConfig) petsDeprecation() deprecation {
	return deprecation{deprecatedAt: cfg.petsDeprecatedAt, sunsetAt: cfg.petsSunsetAt, successor: cfg.publicURL + "/pets"}
}

// newServer returns the whole API: the route table and the middleware chain.
func newServer(logger *slog.Logger, reqLog *requestLog, store Store, keys *keyring, lim *limiter, m *serverMetrics, cfg serveConfig) http.Handler {
	routes := append(apiRoutes(store, cfg),
		route{"GET /healthz", handleHealth(cfg.env)},
		route{"GET /readyz", handleReady(store)})
	h := newRouter(routes)
	h = limitRequests(lim, keys, cfg.trustProxy, m, h)
	h = areaHeaders(cfg.petsDeprecation(), h)
	h = recoverPanics(logger, h)
	h = logRequests(reqLog, m, h)
	h = withRequestID(h) // runs first
	return h
}

// newAdminServer returns what the admin listener serves: metrics and the
// health checks, never the API.
func newAdminServer(store Store, m *serverMetrics, cfg serveConfig) http.Handler {
	return newRouter([]route{
		{"GET /metrics", handleMetrics(m)},
		{"GET /healthz", handleHealth(cfg.env)},
		{"GET /readyz", handleReady(store)},
	})
}

func handleHealth(env string) http.Handler {
	body := map[string]string{"status": "ok", "env": env, "version": buildVersion()}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, body)
	})
}

func handleReady(store Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := store.Ready(ctx); err != nil {
			noteError(w, err)
			w.Header().Set("Retry-After", retryAfterUnavailable)
			writeError(w, r, errorf("unavailable", "the database is not reachable"))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}

// newRouter routes requests to routes, and answers what they do not match
// (404, 405 with Allow, and the redirects of non-canonical paths) with a
// JSON Error instead of the mux's plain text. A request is matched once: a
// catch-all "/" takes what the routes do not, and only then asks a second
// mux, of the routes alone, whether the path exists with other methods.
func newRouter(routes []route) http.Handler {
	known := http.NewServeMux()
	mux := http.NewServeMux()
	for _, rt := range routes {
		known.Handle(rt.pattern, rt.handler)
		mux.Handle(rt.pattern, notePattern(rt.handler))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Only the mux's own 404 and 405 handlers are probed, never a route:
		// a route's pattern would have matched before "/" did.
		h, pattern := known.Handler(r)
		probe := &headerProbe{header: http.Header{}}
		if pattern == "" {
			h.ServeHTTP(probe, r)
		}
		if probe.status == http.StatusMethodNotAllowed {
			allow := probe.header.Get("Allow")
			w.Header().Set("Allow", allow)
			writeError(w, r, errorf("method_not_allowed", "method %s is not allowed here; allowed: %s", r.Method, allow))
			return
		}
		writeError(w, r, errorf("not_found", "no such path: %s", r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isCanonicalPath(r.URL.Path) {
			writeError(w, r, errorf("not_found", "no such path: %s (paths must not contain . or .. segments or empty segments)", r.URL.Path))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// notePattern tells the request log which route matched.
func notePattern(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec := recorderOf(w); rec != nil {
			rec.pattern = r.Pattern
		}
		next.ServeHTTP(w, r)
	})
}

// isCanonicalPath reports whether p is absolute and free of ".", ".." and
// empty segments, which the mux would answer with a redirect.
func isCanonicalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean == p
}

// headerProbe is a ResponseWriter that keeps the status and headers and
// drops the body.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(status int)      { p.status = status }

// withRequestID gives every response an X-Request-Id: the client's own when
// it is sane, else a random one.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !saneRequestID(id) {
			id = rand.Text()
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r)
	})
}

// saneRequestID accepts 1 to 128 characters of letters, digits and "-_.:",
// but nothing that holds a key's prefix, anywhere (a key after "trace:" is
// still a key): the id is echoed and logged.
func saneRequestID(id string) bool {
	if id == "" || len(id) > 128 || strings.Contains(id, "ps_live_") || strings.Contains(id, "ps_test_") {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:", c) >= 0) {
			return false
		}
	}
	return true
}

// recorder watches a response for the request log; inner handlers add the
// route, the key and the cause of an error.
type recorder struct {
	http.ResponseWriter
	status  int
	bytes   int64
	pattern string
	keyID   int64
	err     error
}

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 && status >= 200 {
		rec.status = status
	}
	rec.ResponseWriter.WriteHeader(status)
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	n, err := rec.ResponseWriter.Write(b)
	rec.bytes += int64(n)
	return n, err
}

func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// recorderOf returns the request log's recorder. logRequests hands it on
// as the ResponseWriter, and no inner layer wraps the writer again, so a
// type assertion finds it without a context value per request.
func recorderOf(w http.ResponseWriter) *recorder {
	rec, _ := w.(*recorder)
	return rec
}

// logRequests logs one line per request and counts it in the metrics. It
// never logs a header or the query, so never a key.
func logRequests(log *requestLog, m *serverMetrics, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			end := time.Now()
			log.write(end, &requestLine{
				method:    r.Method,
				route:     rec.pattern,
				status:    rec.status,
				duration:  end.Sub(start),
				bytes:     rec.bytes,
				key:       rec.keyID,
				requestID: w.Header().Get("X-Request-Id"),
				remote:    r.RemoteAddr,
				err:       rec.err,
			})
			m.observe(rec.pattern, rec.status, end.Sub(start), rec.err)
		}()
		next.ServeHTTP(rec, r)
	})
}

// recoverPanics turns a panic in a handler into a logged 500.
func recoverPanics(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			logger.Error("panic", "panic", p, "request_id", w.Header().Get("X-Request-Id"), "stack", string(debug.Stack()))
			if rec := recorderOf(w); rec != nil && rec.status != 0 {
				// The status went out, perhaps part of the body: abort the
				// connection, so that the client sees the answer cut off
				// instead of a short body that looks complete.
				noteError(w, fmt.Errorf("panic after the status was sent: %v", p))
				panic(http.ErrAbortHandler)
			}
			writeError(w, r, errors.New("panic"))
		}()
		next.ServeHTTP(w, r)
	})
}
