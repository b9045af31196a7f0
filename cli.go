package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

const usageText = `petstore: the pet store API server

Usage:
  petstore serve [--db PATH] [--addr HOST:PORT] [--admin-addr HOST:PORT] [--env production|staging]
                [--public-url URL] [--trust-proxy] [--anon-rpm N] [--max-addrs N]
                [--ban-threshold N] [--ban-duration D]
                [--pets-deprecated-at DATE] [--pets-sunset-at DATE] [--busy-timeout D] [--shutdown-timeout D]
                [--read-header-timeout D] [--read-timeout D] [--write-timeout D] [--idle-timeout D]
                [--log-format text|json] [--log-level debug|info|warn|error]
  petstore keys create --plan free|pro|business|enterprise [--name TEXT] [--rpm N --rpd N] [--env ENV] [--json]
  petstore keys list [--json]
  petstore keys revoke ID
  petstore keys unban ID
  petstore backup DEST
  petstore migrate
  petstore version

Every command takes --db PATH (default petstore.db). Every flag can also be
set as PETSTORE_<FLAG> in the environment (--public-url: PETSTORE_PUBLIC_URL);
a flag on the command line wins. 'petstore COMMAND -h' lists a command's flags.
`

// run is the whole program: it parses args (without the program name) and
// runs the command they name.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
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
	case "version":
		fs := newFlagSet("version")
		dbFlag(fs) // "All subcommands take --db"; version does not open it
		if _, err := parseFlags(fs, rest, getenv, stdout, 0); err != nil {
			return helpIsNoError(err)
		}
		fmt.Fprintln(stdout, "petstore", buildVersion())
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
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

func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", "petstore.db", "path of the SQLite database `file`")
}

// checkDBPath refuses a --db that SQLite would not take as the file it
// names: an empty one, one with '?' or '#', which SQLite's driver reads
// as the start of a query, or one starting with file:, which SQLite reads
// as a URI and opens another file than the one checked and created (0600).
func checkDBPath(path string) error {
	if path == "" {
		return usagef("no database path given (--db)")
	}
	if strings.ContainsAny(path, "?#") {
		return usagef("database path %q: '?' and '#' are not allowed in the path", path)
	}
	if strings.HasPrefix(path, "file:") {
		return usagef("database path %q: SQLite reads a path starting with file: as a URI; write ./%s", path, path)
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
				fmt.Fprintf(stdout, "Usage of %s:\n", fs.Name())
				fs.SetOutput(stdout)
				fs.PrintDefaults()
				return nil, errHelp
			}
			return nil, usagef("%s: %v", fs.Name(), err)
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
			err = usagef("%s: invalid value %q for %s: %v", fs.Name(), v, env, serr)
		}
	})
	if err != nil {
		return nil, err
	}
	if len(pos) != nargs {
		if nargs == 0 {
			return nil, usagef("%s: unexpected argument %q", fs.Name(), pos[0])
		}
		return nil, usagef("%s: want %d argument(s), got %d; see '%s -h'", fs.Name(), nargs, len(pos), fs.Name())
	}
	return pos, nil
}

func checkEnv(env string) error {
	if !slices.Contains(environments, env) {
		return usagef("--env must be production or staging, got %q", env)
	}
	return nil
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve")
	var cfg serveConfig
	fs.StringVar(&cfg.db, "db", "petstore.db", "path of the SQLite database `file`")
	fs.StringVar(&cfg.addr, "addr", ":8080", "`host:port` to listen on")
	fs.StringVar(&cfg.env, "env", "production", "environment: production or staging; only its keys are accepted")
	fs.StringVar(&cfg.publicURL, "public-url", "http://localhost:8080/v1", "the base `URL` clients use, advertised in the OpenAPI document")
	fs.StringVar(&cfg.adminAddr, "admin-addr", "127.0.0.1:9090", "`host:port` of the admin listener (metrics, health); empty or off turns it off")
	fs.BoolVar(&cfg.trustProxy, "trust-proxy", false, "take the client address from the last X-Forwarded-For entry")
	fs.Int64Var(&cfg.anonRPM, "anon-rpm", 60, "requests per minute for each client address without a valid key")
	fs.IntVar(&cfg.maxAddrs, "max-addrs", 100_000, "client addresses whose rate limits are tracked at most")
	fs.Int64Var(&cfg.banThreshold, "ban-threshold", 60, "refused requests within a minute that get a key banned")
	fs.DurationVar(&cfg.banDuration, "ban-duration", 15*time.Minute, "how long a ban lasts")
	cfg.petsDeprecatedAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg.petsSunsetAt = time.Date(2027, 7, 1, 0, 0, 0, 0, time.UTC)
	fs.Var((*dateFlag)(&cfg.petsDeprecatedAt), "pets-deprecated-at", "when GET /v1/pets/{petId} was deprecated: YYYY-MM-DD (00:00 UTC) or RFC 3339")
	fs.Var((*dateFlag)(&cfg.petsSunsetAt), "pets-sunset-at", "when GET /v1/pets/{petId} stops working (410): YYYY-MM-DD (00:00 UTC) or RFC 3339")
	fs.DurationVar(&cfg.busyTimeout, "busy-timeout", defaultBusyTimeout, "how long a write waits for a database locked by another process before it answers 503")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long requests in flight may take to finish on SIGTERM")
	fs.DurationVar(&cfg.readHeaderTimeout, "read-header-timeout", 5*time.Second, "how long a client may take to send its request headers")
	fs.DurationVar(&cfg.readTimeout, "read-timeout", 30*time.Second, "how long a client may take to send a whole request")
	fs.DurationVar(&cfg.writeTimeout, "write-timeout", 60*time.Second, "how long writing a response may take")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 120*time.Second, "how long an idle keep-alive connection stays open")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format: text or json")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	if _, err := parseFlags(fs, args, getenv, stdout, 0); err != nil {
		return helpIsNoError(err)
	}
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
	case cfg.logFormat != "text" && cfg.logFormat != "json":
		return usagef("--log-format must be text or json, got %q", cfg.logFormat)
	case cfg.shutdownTimeout < 0:
		return usagef("--shutdown-timeout must not be negative, got %v", cfg.shutdownTimeout)
	case cfg.busyTimeout < time.Millisecond:
		return usagef("--busy-timeout must be at least 1ms, got %v", cfg.busyTimeout)
	case cfg.readHeaderTimeout <= 0, cfg.readTimeout <= 0, cfg.writeTimeout <= 0, cfg.idleTimeout <= 0:
		return usagef("--read-header-timeout, --read-timeout, --write-timeout and --idle-timeout must be positive, got %v, %v, %v, %v",
			cfg.readHeaderTimeout, cfg.readTimeout, cfg.writeTimeout, cfg.idleTimeout)
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
	if err := checkDBPath(cfg.db); err != nil {
		return err
	}
	return serve(ctx, cfg, stderr)
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

func (d *dateFlag) String() string { return time.Time(*d).UTC().Format(time.RFC3339) }

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
	store, err := openStore(ctx, *db, true, time.Now, defaultBusyTimeout)
	if err != nil {
		return err
	}
	latest, err := latestMigration()
	if err != nil {
		return errors.Join(err, store.Close())
	}
	fmt.Fprintf(stdout, "%s: schema at version %d\n", *db, latest)
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
	if err := backupDatabase(ctx, *db, pos[0], defaultBusyTimeout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s\n", *db, pos[0])
	return nil
}

func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("keys: want a subcommand: create, list, revoke or unban")
	}
	sub, args := args[0], args[1:]
	if sub == "-h" || sub == "-help" || sub == "--help" || sub == "help" {
		fmt.Fprint(stdout, "usage: petstore keys create|list|revoke|unban [flags]\n"+
			"petstore keys SUBCOMMAND -h lists a subcommand's flags.\n")
		return nil
	}
	fs := newFlagSet("keys " + sub)
	db := dbFlag(fs)
	switch sub {
	case "create":
		planName := fs.String("plan", "", "the key's plan: free, pro, business or enterprise (required)")
		name := fs.String("name", "", "a `name` to recognise the key by")
		rpm := fs.Int64("rpm", 0, "requests per minute (enterprise only, required there)")
		rpd := fs.Int64("rpd", 0, "requests per day (enterprise only, required there)")
		env := fs.String("env", "production", "the key's environment: production or staging")
		asJSON := fs.Bool("json", false, "print a JSON object instead of the key alone")
		if _, err := parseFlags(fs, args, getenv, stdout, 0); err != nil {
			return helpIsNoError(err)
		}
		if err := checkKeyPlan(fs, *planName, *rpm, *rpd, *env); err != nil {
			return err
		}
		if utf8.RuneCountInString(*name) > maxNameLen || !utf8.ValidString(*name) || strings.IndexFunc(*name, unicode.IsControl) >= 0 {
			return usagef("keys create: --name must be at most %d characters of UTF-8 without control characters", maxNameLen)
		}
		return withStore(ctx, *db, func(s Store) error {
			return keysCreate(ctx, s, *planName, *name, *rpm, *rpd, *env, *asJSON, stdout, stderr)
		})
	case "list":
		asJSON := fs.Bool("json", false, "print a JSON array")
		if _, err := parseFlags(fs, args, getenv, stdout, 0); err != nil {
			return helpIsNoError(err)
		}
		if err := mustExist(*db); err != nil {
			return err
		}
		return withStore(ctx, *db, func(s Store) error { return keysList(ctx, s, *asJSON, stdout) })
	case "revoke", "unban":
		pos, err := parseFlags(fs, args, getenv, stdout, 1)
		if err != nil {
			return helpIsNoError(err)
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return usagef("keys %s: ID must be a positive integer, got %q", sub, pos[0])
		}
		if err := mustExist(*db); err != nil {
			return err
		}
		return withStore(ctx, *db, func(s Store) error {
			if sub == "revoke" {
				err = s.RevokeKey(ctx, id)
			} else {
				err = s.SetKeyBan(ctx, id, time.Time{})
			}
			if errors.Is(err, errNotFound) {
				return fmt.Errorf("keys %s: no key with id %d", sub, id)
			}
			if err == nil {
				fmt.Fprintf(stdout, "key %d %s\n", id, map[string]string{"revoke": "revoked", "unban": "unbanned"}[sub])
			}
			return err
		})
	}
	return usagef("keys: unknown subcommand %q: want create, list, revoke or unban", sub)
}

// mustExist fails when the database at path does not exist: only keys
// create (like serve and migrate) starts a new one.
func mustExist(path string) error {
	if err := checkDBPath(path); err != nil {
		return err
	}
	return checkDatabaseFile(path, false)
}

// withStore runs do on the migrated database at path, then closes it.
func withStore(ctx context.Context, path string, do func(Store) error) error {
	if err := checkDBPath(path); err != nil {
		return err
	}
	store, err := openStore(ctx, path, true, time.Now, defaultBusyTimeout)
	if err != nil {
		return err
	}
	return errors.Join(do(store), store.Close())
}

// checkKeyPlan checks the flags of keys create: a known plan, and --rpm and
// --rpd with enterprise only.
func checkKeyPlan(fs *flag.FlagSet, planName string, rpm, rpd int64, env string) error {
	if planName == "" {
		return usagef("keys create: --plan is required: free, pro, business or enterprise")
	}
	if _, ok := planByName(planName); !ok {
		return usagef("keys create: unknown plan %q: want free, pro, business or enterprise", planName)
	}
	// Visit sees values from the environment too: Set marks them as given.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if planName == "enterprise" {
		if !given["rpm"] || !given["rpd"] {
			return usagef("keys create: --rpm and --rpd are required with --plan enterprise")
		}
		if rpm <= 0 || rpd <= 0 {
			return usagef("keys create: --rpm and --rpd must be positive")
		}
		if rpm > limMaxRPM {
			return usagef("keys create: --rpm must be at most %d, got %d", limMaxRPM, rpm)
		}
	} else if given["rpm"] || given["rpd"] {
		return usagef("keys create: --rpm and --rpd are only for --plan enterprise; %s has fixed limits", planName)
	}
	return checkEnv(env)
}

// keyView is a key as the keys commands print it; Key, the secret, is
// set only by keys create.
type keyView struct {
	ID        int64     `json:"id"`
	Key       string    `json:"key,omitempty"`
	Name      string    `json:"name"`
	Plan      string    `json:"plan"`
	RPM       int64     `json:"rpm"`
	RPD       int64     `json:"rpd"`
	Env       string    `json:"env"`
	CreatedAt time.Time `json:"createdAt"`
}

// keyListView is a key as keys list --json prints it.
type keyListView struct {
	keyView
	Revoked     bool       `json:"revoked"`
	BannedUntil *time.Time `json:"bannedUntil"`
}

func viewKey(k apiKey) keyView {
	rpm, rpd := planLimits(k.Plan, k.RPM, k.RPD)
	return keyView{ID: k.ID, Name: k.Name, Plan: k.Plan, RPM: rpm, RPD: rpd, Env: k.Env, CreatedAt: k.CreatedAt.UTC()}
}

func keysCreate(ctx context.Context, s Store, planName, name string, rpm, rpd int64, env string, asJSON bool, stdout, stderr io.Writer) error {
	secret := newKeySecret(env)
	k, err := s.CreateKey(ctx, hashKey(secret), name, planName, rpm, rpd, env)
	if err != nil {
		return err
	}
	v := viewKey(k)
	if asJSON {
		v.Key = secret
		return json.NewEncoder(stdout).Encode(v)
	}
	fmt.Fprintf(stderr, "created key %d: %s plan, %d/min, %d/day, %s; the key is shown only this once\n", v.ID, v.Plan, v.RPM, v.RPD, v.Env)
	_, err = fmt.Fprintln(stdout, secret)
	return err
}

func keysList(ctx context.Context, s Store, asJSON bool, stdout io.Writer) error {
	keys, err := s.KeysSince(ctx, -1)
	if err != nil {
		return err
	}
	if asJSON {
		views := make([]keyListView, 0, len(keys))
		for _, k := range keys {
			v := keyListView{keyView: viewKey(k), Revoked: k.Revoked}
			if !k.BannedUntil.IsZero() {
				until := k.BannedUntil.UTC()
				v.BannedUntil = &until
			}
			views = append(views, v)
		}
		return json.NewEncoder(stdout).Encode(views)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPLAN\tPER MIN\tPER DAY\tENV\tCREATED\tSTATE")
	now := time.Now()
	for _, k := range keys {
		state := "active"
		switch {
		case k.Revoked:
			state = "revoked"
		case k.BannedUntil.After(now):
			state = "banned until " + k.BannedUntil.UTC().Format(time.RFC3339)
		}
		v := viewKey(k)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", v.ID, v.Name, v.Plan, v.RPM, v.RPD, v.Env, v.CreatedAt.Format(time.RFC3339), state)
	}
	return tw.Flush()
}
