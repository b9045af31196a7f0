// cli.go owns the command line: run, flag parsing with PETSTORE_*
// defaults, and the migrate, backup and version commands (serve's flags
// are in cli_serve.go, the keys commands in cli_keys.go).

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
