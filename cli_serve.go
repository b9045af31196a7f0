// cli_serve.go owns "petstore serve"'s command line: serveConfig, its flags
// with PETSTORE_* defaults, and its validation (serve itself is in
// main.go).

package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
)

func checkEnv(env string) error {
	if !slices.Contains(environments, env) {
		return usagef("--env must be %s, got %q", orList(environments), env)
	}
	return nil
}

// serveConfig is the configuration of the serve command.
type serveConfig struct {
	db               string
	dbMaxConns       int
	dbReplica        string        // --db-replica: a PostgreSQL standby's URL for the reads; empty: none
	replicaWait      time.Duration // --replica-wait
	replicaMaxLag    time.Duration // --replica-max-lag
	addr             string
	adminAddr        string
	httpAddr         string // the plain listener (section 13): ACME's HTTP-01 and redirects; empty: none
	tlsCert, tlsKey  string // a certificate pair's files: HTTPS on addr
	acmeDomains      []string
	acmeDomainsList  string // --acme-domains as given
	acmeDirectory    string
	acmeEmail        string
	acmeCAFile       string
	env              string
	publicURL        string
	publicURLSet     bool           // --public-url was given (flag or environment), not defaulted
	trustProxy       bool           // --trust-proxy: any sender's X-Forwarded-For is believed
	trustedProxies   []netip.Prefix // --trusted-proxies: the senders whose X-Forwarded-For is believed
	trustedList      string         // --trusted-proxies as given
	anonRPM          int64
	maxAddrs         int
	banThreshold     int64
	banDuration      time.Duration
	banHold          time.Duration
	petsDeprecatedAt time.Time
	petsSunsetAt     time.Time
	redis            string // a redis:// URL, or empty for in-process limits only
	redisTimeout     time.Duration
	redisPrefix      string // empty: petstore:<deployment id>: (redisPrefixOf)
	idempotencyTTL   time.Duration
	corsOrigins      string     // --cors-origins as given
	cors             corsPolicy // what validate made of it

	// Connections (listeners_caps.go): --max-conns-per-addr (0: no cap),
	// --max-conns (when not given, serve lowers it to autoMaxConns); the
	// proxies exempt from the cap per address are trustedProxies.
	maxConnsPerAddr int
	maxConns        int
	maxConnsSet     bool
	adminMaxConns   int           // --admin-max-conns: the admin listener's own cap
	memoryRelease   time.Duration // --memory-release-interval (inflight.go)

	busyTimeout       time.Duration
	shutdownTimeout   time.Duration
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	logFormat         string
	logLevel          slog.Level

	trace traceConfig // tracing's flags and variables (trace_config.go)
}

// validate checks the configuration as the flags gave it, naming the first
// bad value in a usage error, and normalises what has two spellings (an
// --admin-addr of off, a --public-url with a trailing slash).
func (cfg *serveConfig) validate() error {
	if err := checkEnv(cfg.env); err != nil {
		return err
	}
	if cfg.adminAddr == "off" {
		cfg.adminAddr = ""
	}
	if err := checkHostPort(cfg.addr); err != nil {
		return usagef("--addr must be host:port, got %q: %v", cfg.addr, err)
	}
	if err := checkHostPort(cfg.adminAddr); err != nil && cfg.adminAddr != "" {
		return usagef("--admin-addr must be host:port or empty, got %q: %v", cfg.adminAddr, err)
	}
	if err := cfg.validateTLS(); err != nil {
		return err
	}
	if err := cfg.validateProxies(); err != nil {
		return err
	}
	// The bounds of single numeric flags are flagBounds', checked by
	// parseFlags.
	switch {
	case !slices.Contains(logFormats, cfg.logFormat):
		return usagef("--log-format must be %s, got %q", orList(logFormats), cfg.logFormat)
	case cfg.petsSunsetAt.Before(cfg.petsDeprecatedAt):
		return usagef("--pets-sunset-at (%s) must not be before --pets-deprecated-at (%s)",
			cfg.petsSunsetAt.Format(time.RFC3339), cfg.petsDeprecatedAt.Format(time.RFC3339))
	}
	if u, err := url.Parse(cfg.publicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		strings.Contains(cfg.publicURL, "#") ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return usagef("--public-url must be an absolute http(s) URL without a query or fragment, got %q", cfg.publicURL)
	}
	// Paths are appended to it ("/categories?..." in a Link): a trailing
	// slash would make "//categories", which is a 404 here.
	cfg.publicURL = strings.TrimRight(cfg.publicURL, "/")
	var err error
	if cfg.cors, err = parseCORSOrigins(cfg.corsOrigins); err != nil {
		return usagef("%v", err)
	}
	if cfg.redis != "" {
		if _, err := parseRedisURL(cfg.redis); err != nil {
			return usagef("%v", err)
		}
	}
	if err := checkDBPath(cfg.db); err != nil {
		return err
	}
	return cfg.validateReplica()
}

// validateReplica checks --db-replica: a PostgreSQL URL beside a
// PostgreSQL --db (a SQLite file has one process, which reads its own
// writes).
func (cfg *serveConfig) validateReplica() error {
	switch {
	case cfg.dbReplica == "":
		return nil
	case !isPostgresURL(cfg.db):
		return usagef("--db-replica needs a PostgreSQL --db (postgres://...): a SQLite database has no replicas")
	case !isPostgresURL(cfg.dbReplica):
		return usagef("--db-replica must be a postgres:// or postgresql:// URL, got %s", redactDB(cfg.dbReplica))
	}
	if err := checkDBPath(cfg.dbReplica); err != nil {
		return usagef("%s", strings.Replace(err.Error(), "--db", "--db-replica", 1))
	}
	return nil
}

// validateProxies reads --trusted-proxies and checks it and --trust-proxy
// against each other and petstore's own HTTPS (after validateTLS).
func (cfg *serveConfig) validateProxies() error {
	var err error
	if cfg.trustedProxies, err = parseTrustedProxies(cfg.trustedList); err != nil {
		return usagef("--trusted-proxies: %v", err)
	}
	switch {
	case cfg.trustProxy && len(cfg.trustedProxies) > 0:
		return usagef("--trust-proxy and --trusted-proxies exclude each other: list the proxies in front, or believe any sender with --trust-proxy")
	case cfg.trustProxy && (cfg.tlsCert != "" || len(cfg.acmeDomains) > 0):
		return usagef("--trust-proxy goes with a proxy in front, not with petstore's own HTTPS (--tls-cert, --acme-domains): clients that connect directly would choose their own address in X-Forwarded-For; list the proxies with --trusted-proxies")
	}
	return nil
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseServe(args, getenv, stdout)
	if err != nil {
		return helpIsNoError(err)
	}
	return serve(ctx, cfg, stderr)
}

// parseServe reads the serve command's flags and environment into a
// validated serveConfig.
func parseServe(args []string, getenv func(string) string, stdout io.Writer) (serveConfig, error) {
	fs := newFlagSet("serve")
	var cfg serveConfig
	fs.StringVar(&cfg.db, "db", "petstore.db", dbUsage)
	fs.IntVar(&cfg.dbMaxConns, "db-max-conns", pgDefaultMaxConns, "PostgreSQL connections this instance opens at most, `N`; instances x N must stay below the server's max_connections")
	fs.StringVar(&cfg.dbReplica, "db-replica", "", "a PostgreSQL standby's `URL` (multi-host form allowed) near this instance: the reads (the lists, GET /v1/pets/{petId}, GET /v1/store/inventory) go to it while it keeps up; empty: every read goes to --db")
	fs.DurationVar(&cfg.replicaWait, "replica-wait", defaultReplicaWait, "how long a read waits for --db-replica to replay the Petstore-Read-After position it must include, a `DURATION`, before it reads from --db")
	fs.DurationVar(&cfg.replicaMaxLag, "replica-max-lag", defaultReplicaMaxLag, "how far --db-replica may fall behind the primary, a `DURATION`, before reads go to --db until it catches up")
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "`HOST:PORT` to listen on; loopback by default, so a first run is not open to the network (:8080 listens on every interface)")
	fs.StringVar(&cfg.env, "env", "production", "the environment whose keys are accepted, `"+strings.Join(environments, "|")+"`")
	fs.StringVar(&cfg.publicURL, "public-url", "http://localhost:8080/v1", "the base `URL` clients use, advertised in the OpenAPI document; with --tls-cert https://localhost:PORT/v1, with --acme-domains https://FIRST-DOMAIN/v1")
	fs.StringVar(&cfg.httpAddr, "http-addr", "", "`HOST:PORT` of the plain HTTP listener beside HTTPS: ACME's HTTP-01 challenges, and a redirect to https (a JSON 403 for /v1/...); empty: none")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "a PEM certificate chain `FILE`: HTTPS on --addr, read again when it changes and on SIGHUP; needs --tls-key")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "the PEM private key `FILE` of --tls-cert")
	fs.StringVar(&cfg.acmeDomainsList, "acme-domains", "", "HTTPS with certificates from an ACME CA (Let's Encrypt by default) for these host names, a comma-separated `LIST`; only they are ever requested. Setting it accepts the CA's terms of service")
	fs.StringVar(&cfg.acmeDirectory, "acme-directory", defaultACMEDirectory, "the ACME CA's directory `URL`")
	fs.StringVar(&cfg.acmeEmail, "acme-email", "", "the ACME account's contact `ADDRESS`; empty: none")
	fs.StringVar(&cfg.acmeCAFile, "acme-ca-file", "", "a PEM `FILE` of extra roots to trust for the ACME directory's own HTTPS (a private CA's)")
	fs.StringVar(&cfg.adminAddr, "admin-addr", "127.0.0.1:9090", "`HOST:PORT` of the admin listener (metrics, health); empty or off turns it off")
	fs.StringVar(&cfg.trustedList, "trusted-proxies", "", "the proxies in front, a comma-separated `LIST` of addresses and CIDR ranges: their X-Forwarded-For is believed, and the client is its last entry that is not one of them")
	fs.BoolVar(&cfg.trustProxy, "trust-proxy", false, "believe X-Forwarded-For from any sender (its last entry), for a proxy whose address is not known in advance; not with --tls-cert or --acme-domains")
	fs.Int64Var(&cfg.anonRPM, "anon-rpm", 60, "requests per minute, `N`, for each client address without a valid key")
	fs.IntVar(&cfg.maxAddrs, "max-addrs", 100_000, "client addresses whose rate limits are tracked at most, `N`")
	fs.Int64Var(&cfg.banThreshold, "ban-threshold", 60, "refused requests within a minute, `N`, that get a key banned")
	fs.DurationVar(&cfg.banDuration, "ban-duration", 15*time.Minute, "how long a ban lasts, a `DURATION`")
	fs.DurationVar(&cfg.banHold, "ban-hold", defaultBanHold, "how long a banned key's request waits for its 429, a `DURATION` (0: none), so that a client looping on it sends few")
	cfg.petsDeprecatedAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg.petsSunsetAt = time.Date(2027, 7, 1, 0, 0, 0, 0, time.UTC)
	fs.Var((*dateFlag)(&cfg.petsDeprecatedAt), "pets-deprecated-at", "when GET /v1/pets/{petId} was deprecated: a `DATE` (YYYY-MM-DD, 00:00 UTC) or an RFC 3339 time")
	fs.Var((*dateFlag)(&cfg.petsSunsetAt), "pets-sunset-at", "when GET /v1/pets/{petId} stops working (410): a `DATE` (YYYY-MM-DD, 00:00 UTC) or an RFC 3339 time")
	fs.StringVar(&cfg.redis, "redis", "", "a redis:// or rediss:// `URL`: rate limits shared by every instance that uses it; empty keeps them in this process")
	fs.DurationVar(&cfg.redisTimeout, "redis-timeout", defaultRedisTimeout, "how long a request its key's lease cannot cover waits for Redis, a `DURATION`, before it is decided from the key's shared state as last seen; Redis is down, and limits local, when a call gets no answer within a second or this")
	fs.StringVar(&cfg.redisPrefix, "redis-prefix", "", "the `TEXT` the names of petstore's keys in Redis begin with; empty: petstore:<deployment id>:, the database's own random id, so that two deployments on one Redis never share limits")
	fs.StringVar(&cfg.corsOrigins, "cors-origins", "", "browser origins that may call the API: a comma-separated `LIST` of scheme://host[:port], or *; empty: none")
	fs.DurationVar(&cfg.idempotencyTTL, "idempotency-ttl", defaultIdemTTL, "how long the answer to a POST sent with an Idempotency-Key is kept for its retries, a `DURATION`")
	fs.DurationVar(&cfg.busyTimeout, "busy-timeout", defaultBusyTimeout, "how long an operation waits for the database (a SQLite lock another process holds; PostgreSQL's connection, locks and answer), a `DURATION`, before it answers 503")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long requests in flight may take to finish on SIGTERM, a `DURATION`")
	fs.DurationVar(&cfg.readHeaderTimeout, "read-header-timeout", 5*time.Second, "how long a client may take to send its request headers, a `DURATION`")
	fs.DurationVar(&cfg.readTimeout, "read-timeout", 30*time.Second, "how long a client may take to send a whole request, a `DURATION`")
	fs.DurationVar(&cfg.writeTimeout, "write-timeout", 60*time.Second, "how long writing a response may take, a `DURATION`")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 120*time.Second, "how long an idle keep-alive connection stays open, a `DURATION`")
	fs.IntVar(&cfg.maxConnsPerAddr, "max-conns-per-addr", defaultMaxConnsPerAddr, "connections one client address (an IPv6 /64) may hold open on the API and plain listeners together, `N`; 0: no cap (a TCP load balancer in front)")
	fs.IntVar(&cfg.maxConns, "max-conns", defaultMaxConnsTotal, "connections the API and plain listeners hold open in all, `N`; by default lowered to 80% of the open-file limit less the database's and Redis's files and --admin-max-conns")
	fs.DurationVar(&cfg.memoryRelease, "memory-release-interval", 15*time.Second, "how often, at most, memory that a flood left free is given back to the system once the requests in flight are few again, a `DURATION`")
	fs.IntVar(&cfg.adminMaxConns, "admin-max-conns", defaultAdminMaxConns, "connections the admin listener (--admin-addr) holds open at once, `N`, apart from the API's caps")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format, `"+strings.Join(logFormats, "|")+"`")
	cfg.logLevel = slog.LevelInfo
	fs.Var(levelFlag{&cfg.logLevel}, "log-level", "log level, `"+strings.Join(logLevelNames(), "|")+"`")
	cfg.trace.flags(fs)
	if _, err := parseFlags(fs, args, getenv, stdout, 0); err != nil {
		return serveConfig{}, err
	}
	if err := cfg.trace.resolve(getenv); err != nil {
		return serveConfig{}, err
	}
	fs.Visit(func(f *flag.Flag) { cfg.publicURLSet = cfg.publicURLSet || f.Name == "public-url" })
	fs.Visit(func(f *flag.Flag) { cfg.maxConnsSet = cfg.maxConnsSet || f.Name == "max-conns" })
	return cfg, cfg.validate()
}

// checkHostPort checks that addr is host:port with a port net.Listen takes.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	_, err = net.LookupPort("tcp", port)
	return err
}

// logFormats are the values of --log-format.
var logFormats = []string{"text", "json"}

// logLevels are the levels --log-level names; it takes slog's spellings
// (INFO, info, warn+2) too.
var logLevels = []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError}

func logLevelNames() []string {
	var names []string
	for _, l := range logLevels {
		names = append(names, strings.ToLower(l.String()))
	}
	return names
}

// levelFlag is the flag.Value of --log-level: slog's level, written in
// lower case as the docs write it. Its zero value writes nothing, so that
// -h shows the default (info) however the level is set.
type levelFlag struct{ l *slog.Level }

func (f levelFlag) String() string {
	if f.l == nil {
		return ""
	}
	return strings.ToLower(f.l.String())
}

func (f levelFlag) Set(s string) error { return f.l.UnmarshalText([]byte(s)) }

func (f levelFlag) form() string { return "a log level (" + orList(logLevelNames()) + ")" }
