// cli.go owns the command line: run, flag parsing with PETSTORE_*
// defaults, serveConfig and its validation, and the serve, migrate, backup
// and version commands (the keys commands are in cli_keys.go).

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// command is one command of the command line: its name, what follows the
// name on its usage line (required flags, then [flags] if it has others,
// then its arguments) and what it does.
type command struct{ name, args, about string }

// commands is the command table: 'petstore help' lists it, and each
// command's -h begins with its line.
var commands = []command{
	{"serve", "[flags]", "Serves the API until SIGINT or SIGTERM, and the metrics and health checks on --admin-addr."},
	{"keys create", "--plan " + strings.Join(planNames(), "|") + " [flags]",
		"Creates an API key and shows it this once: the key alone on stdout, what it is on stderr."},
	{"keys list", "[flags]", "Lists the keys: limits, environment, scope, expiry, requests today, last use and state."},
	{"keys rotate", "[flags] ID", "Makes a new key in place of key ID; key ID keeps working for --overlap."},
	{"keys revoke", "[flags] ID", "Revokes key ID for good."},
	{"keys unban", "[flags] ID", "Lifts the ban of key ID and of the keys rotated from or into it."},
	{"backup", "[flags] DEST", "Copies the SQLite database, also while serve runs on it, into DEST, a file that must not exist."},
	{"copy", "--from PATH --to PATH", "Copies every row of one database into another, empty one: SQLite to PostgreSQL or back."},
	{"migrate", "[flags]", "Brings the database's schema up to this version's, and prints the schema version."},
	{"version", "", "Prints the version of petstore."},
}

// usageLine is the usage line of the command called name.
func usageLine(name string) string {
	for _, c := range commands {
		if c.name == name {
			return strings.TrimSpace("petstore " + c.name + " " + c.args)
		}
	}
	panic("no command " + name + " in the command table")
}

// printUsage prints petstore's usage: the command lines of those whose
// name begins with prefix ("" for all, "keys " for the keys commands).
func printUsage(w io.Writer, usage, prefix string) {
	fmt.Fprintf(w, "usage: %s\n\n", usage)
	for _, c := range commands {
		if strings.HasPrefix(c.name, prefix) {
			fmt.Fprintf(w, "  %s\n", usageLine(c.name))
		}
	}
	fmt.Fprint(w, `
Every command that opens one database takes --db PATH (default petstore.db):
a SQLite file, or a postgres:// URL (the PG* variables and ~/.pgpass fill in
what it leaves out, so that a password need not be on the command line).
Every flag can also be set as PETSTORE_<FLAG> in the environment
(--public-url: PETSTORE_PUBLIC_URL); a flag on the command line wins. A
DURATION is written as 90s, 15m or 1h30m.
'petstore COMMAND -h' says what a command does and what each flag takes.
`)
}

// printHelp prints what -h shows for the command fs parses: its usage
// line, what it does, and each flag with what it takes (the word in
// backquotes in its usage, as flag.PrintDefaults reads it) and its
// default. A flag with an empty usage is accepted and not shown.
func printHelp(fs *flag.FlagSet, w io.Writer) {
	name := cmdName(fs)
	about := ""
	for _, c := range commands {
		if c.name == name {
			about = c.about
		}
	}
	fmt.Fprintf(w, "usage: %s\n\n%s\n", usageLine(name), about)
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage != "" {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue // -h may follow a flag given a value
		}
	})
	if hasFlags(shown) {
		fmt.Fprintf(w, "\nflags (each also read from PETSTORE_<FLAG>):\n")
		shown.SetOutput(w)
		shown.PrintDefaults()
	}
}

// hasFlags reports whether fs defines any flag.
func hasFlags(fs *flag.FlagSet) bool {
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	return has
}

// run is the whole program: it parses args (without the program name) and
// runs the command they name.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr, topUsage, "")
		return usagef("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, getenv, stdout, stderr)
	case "keys":
		return runKeys(ctx, rest, getenv, stdout, stderr)
	case "backup":
		return runBackup(ctx, rest, getenv, stdout)
	case "migrate":
		return runMigrate(ctx, rest, getenv, stdout)
	case "copy":
		return runCopy(ctx, rest, getenv, stdout)
	case "version":
		fs := newFlagSet("version")
		fs.String("db", "", "") // "All subcommands take --db"; version ignores it, and -h does not show it
		if _, err := parseFlags(fs, rest, getenv, stdout, 0); err != nil {
			return helpIsNoError(err)
		}
		fmt.Fprintln(stdout, "petstore", buildVersion())
		return nil
	case "help", "-h", "-help", "--help":
		printUsage(stdout, topUsage, "")
		return nil
	}
	return usagef("unknown command %q; run 'petstore help'", cmd)
}

// errHelp is returned by parseFlags after it printed a command's help.
var errHelp = errors.New("help printed")

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("petstore "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// cmdName is the command a flag set parses ("keys create"), for messages
// that exitCode prefixes with "petstore: ".
func cmdName(fs *flag.FlagSet) string {
	return strings.TrimPrefix(fs.Name(), "petstore ")
}

// topUsage is the usage line of petstore itself.
const topUsage = "petstore COMMAND [flags] [ARGUMENTS]"

// dbUsage is the help of --db.
const dbUsage = "the database: the `PATH` of a SQLite file, or a postgres:// URL"

func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", "petstore.db", dbUsage)
}

// orList writes names as "a, b or c", for messages.
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// checkDBPath refuses a --db that names neither a PostgreSQL database nor a
// SQLite file as it is written: an empty one; a URL of another scheme; for
// SQLite, one with '?' or '#', which SQLite's driver reads as the start of
// a query, or one starting with file:, which SQLite reads as a URI and
// opens another file than the one checked and created (0600), or SQLite's
// :memory:, which no file (nor lock file) stands for. A URL is
// shown with its password masked.
func checkDBPath(db string) error {
	if db == "" {
		return usagef("no database path given (--db)")
	}
	if isPostgresURL(db) {
		return checkPostgresURL(db) // before any command connects
	}
	if scheme, _, ok := strings.Cut(db, "://"); ok {
		return usagef("--db %s: %q URLs are not supported; --db takes a SQLite file path or a postgres:// URL", redactDB(db), scheme)
	}
	for _, scheme := range []string{"postgres:", "postgresql:"} {
		if len(db) >= len(scheme) && strings.EqualFold(db[:len(scheme)], scheme) {
			return usagef("--db: a PostgreSQL URL starts with postgres:// (with two slashes)")
		}
	}
	if strings.ContainsAny(db, "?#") {
		return usagef("database path %q: '?' and '#' are not allowed in the path", db)
	}
	if db == ":memory:" {
		return usagef("--db :memory:: petstore keeps its data in a file (SQLite's in-memory database would vanish with the process); write ./:memory: for a file of that name")
	}
	if strings.HasPrefix(db, "file:") {
		return usagef("database path %q: SQLite reads a path starting with file: as a URI; write ./%s", db, db)
	}
	return nil
}

// parseFlags parses args into fs, allowing flags after positional
// arguments, and fills every flag not given from PETSTORE_<NAME> in the
// environment. It returns the positional arguments, which must number
// nargs. A mistake is a usageError naming it.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string, stdout io.Writer, nargs int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printHelp(fs, stdout)
				return nil, errHelp
			}
			return nil, usagef("%s: %v", cmdName(fs), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := "PETSTORE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v := getenv(env)
		if given[f.Name] || v == "" || err != nil {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usagef("%s: invalid value %q for %s: %v", cmdName(fs), v, env, serr)
		}
	})
	if err != nil {
		return nil, err
	}
	if len(pos) != nargs {
		if nargs == 0 {
			return nil, usagef("%s: unexpected argument %q", cmdName(fs), pos[0])
		}
		return nil, usagef("%s: want %d argument(s), got %d; see '%s -h'", cmdName(fs), nargs, len(pos), fs.Name())
	}
	return pos, nil
}

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
	addr             string
	adminAddr        string
	env              string
	publicURL        string
	trustProxy       bool
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

	busyTimeout       time.Duration
	shutdownTimeout   time.Duration
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	logFormat         string
	logLevel          slog.Level
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
	switch {
	case cfg.anonRPM < 1 || cfg.anonRPM > limMaxRPM:
		return usagef("--anon-rpm must be 1 to %d, got %d", limMaxRPM, cfg.anonRPM)
	case cfg.maxAddrs < 1:
		return usagef("--max-addrs must be at least 1, got %d", cfg.maxAddrs)
	case cfg.banThreshold < 1:
		return usagef("--ban-threshold must be at least 1, got %d", cfg.banThreshold)
	case cfg.banDuration < time.Second:
		return usagef("--ban-duration must be at least 1s, got %v", cfg.banDuration)
	case cfg.banHold < 0 || cfg.banHold > maxBanHold:
		return usagef("--ban-hold must be 0 to %v, got %v", maxBanHold, cfg.banHold)
	case !slices.Contains(logFormats, cfg.logFormat):
		return usagef("--log-format must be %s, got %q", orList(logFormats), cfg.logFormat)
	case cfg.shutdownTimeout < 0:
		return usagef("--shutdown-timeout must not be negative, got %v", cfg.shutdownTimeout)
	case cfg.dbMaxConns < 1:
		return usagef("--db-max-conns must be at least 1, got %d", cfg.dbMaxConns)
	case cfg.busyTimeout < time.Millisecond:
		return usagef("--busy-timeout must be at least 1ms, got %v", cfg.busyTimeout)
	case cfg.readHeaderTimeout <= 0, cfg.readTimeout <= 0, cfg.writeTimeout <= 0, cfg.idleTimeout <= 0:
		return usagef("--read-header-timeout, --read-timeout, --write-timeout and --idle-timeout must be positive, got %v, %v, %v, %v",
			cfg.readHeaderTimeout, cfg.readTimeout, cfg.writeTimeout, cfg.idleTimeout)
	case cfg.idempotencyTTL < time.Minute:
		return usagef("--idempotency-ttl must be at least 1m, got %v", cfg.idempotencyTTL)
	case cfg.redisTimeout < time.Millisecond:
		return usagef("--redis-timeout must be at least 1ms, got %v", cfg.redisTimeout)
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
	return checkDBPath(cfg.db)
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
	fs.IntVar(&cfg.dbMaxConns, "db-max-conns", defaultMaxConns, "PostgreSQL connections this instance opens at most, `N`; instances x N must stay below the server's max_connections")
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "`HOST:PORT` to listen on; loopback by default, so a first run is not open to the network (:8080 listens on every interface)")
	fs.StringVar(&cfg.env, "env", "production", "the environment whose keys are accepted, `"+strings.Join(environments, "|")+"`")
	fs.StringVar(&cfg.publicURL, "public-url", "http://localhost:8080/v1", "the base `URL` clients use, advertised in the OpenAPI document")
	fs.StringVar(&cfg.adminAddr, "admin-addr", "127.0.0.1:9090", "`HOST:PORT` of the admin listener (metrics, health); empty or off turns it off")
	fs.BoolVar(&cfg.trustProxy, "trust-proxy", false, "take the client address from the last X-Forwarded-For entry")
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
	fs.DurationVar(&cfg.redisTimeout, "redis-timeout", defaultRedisTimeout, "how long a request waits for Redis, a `DURATION`, before this instance falls back to its own limits")
	fs.StringVar(&cfg.redisPrefix, "redis-prefix", "", "the `TEXT` the names of petstore's keys in Redis begin with; empty: petstore:<deployment id>:, the database's own random id, so that two deployments on one Redis never share limits")
	fs.StringVar(&cfg.corsOrigins, "cors-origins", "", "browser origins that may call the API: a comma-separated `LIST` of scheme://host[:port], or *; empty: none")
	fs.DurationVar(&cfg.idempotencyTTL, "idempotency-ttl", defaultIdemTTL, "how long the answer to a POST sent with an Idempotency-Key is kept for its retries, a `DURATION`")
	fs.DurationVar(&cfg.busyTimeout, "busy-timeout", defaultBusyTimeout, "how long an operation waits for the database (a SQLite lock another process holds; PostgreSQL's connection, locks and answer), a `DURATION`, before it answers 503")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long requests in flight may take to finish on SIGTERM, a `DURATION`")
	fs.DurationVar(&cfg.readHeaderTimeout, "read-header-timeout", 5*time.Second, "how long a client may take to send its request headers, a `DURATION`")
	fs.DurationVar(&cfg.readTimeout, "read-timeout", 30*time.Second, "how long a client may take to send a whole request, a `DURATION`")
	fs.DurationVar(&cfg.writeTimeout, "write-timeout", 60*time.Second, "how long writing a response may take, a `DURATION`")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 120*time.Second, "how long an idle keep-alive connection stays open, a `DURATION`")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format, `"+strings.Join(logFormats, "|")+"`")
	cfg.logLevel = slog.LevelInfo
	fs.Var(levelFlag{&cfg.logLevel}, "log-level", "log level, `"+strings.Join(logLevelNames(), "|")+"`")
	if _, err := parseFlags(fs, args, getenv, stdout, 0); err != nil {
		return serveConfig{}, err
	}
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

// dateFlag is a flag.Value for a time given as YYYY-MM-DD (00:00 UTC) or
// as an RFC 3339 timestamp.
type dateFlag time.Time

// String writes a time at 00:00 UTC as its date, as the docs write it.
func (d *dateFlag) String() string {
	t := time.Time(*d).UTC()
	if t.Equal(t.Truncate(24 * time.Hour)) {
		return t.Format(time.DateOnly)
	}
	return t.Format(time.RFC3339)
}

func (d *dateFlag) Set(s string) error {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		t, err = time.Parse(time.RFC3339, s)
	}
	if err != nil {
		return errors.New("want YYYY-MM-DD or an RFC 3339 time")
	}
	*d = dateFlag(t.UTC())
	return nil
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

func helpIsNoError(err error) error {
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := newFlagSet("migrate")
	db := dbFlag(fs)
	if _, err := parseFlags(fs, args, getenv, stdout, 0); err != nil {
		return helpIsNoError(err)
	}
	if err := checkDBPath(*db); err != nil {
		return err
	}
	store, err := openStore(ctx, *db, storeOptions{migrate: true, now: time.Now, busy: defaultBusyTimeout, maxConns: 1})
	if err != nil {
		return err
	}
	version, err := store.SchemaVersion(ctx)
	if err != nil {
		return errors.Join(err, store.Close())
	}
	fmt.Fprintf(stdout, "%s: schema at version %d\n", redactDB(*db), version)
	return store.Close()
}

func runBackup(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := newFlagSet("backup")
	db := dbFlag(fs)
	pos, err := parseFlags(fs, args, getenv, stdout, 1)
	if err != nil {
		return helpIsNoError(err)
	}
	if pos[0] == "" {
		return usagef("backup: DEST must not be empty")
	}
	if err := checkDBPath(*db); err != nil {
		return err
	}
	if isPostgresURL(*db) {
		return usagef("backup copies a SQLite file; back up PostgreSQL with pg_dump (pg_dump --format=custom --file=DEST DBNAME)")
	}
	if err := backupDatabase(ctx, *db, pos[0], defaultBusyTimeout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s\n", *db, pos[0])
	return nil
}
