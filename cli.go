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
	{"version", "", "Prints the version of petstore (so does petstore --version)."},
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
'petstore COMMAND -h' says what a command does and what each flag takes;
'petstore --version' prints the version.
`)
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
		return inCommand(cmd, runServe(ctx, rest, getenv, stdout, stderr))
	case "keys":
		if len(rest) > 0 && slices.Contains(keySubcommands(), rest[0]) {
			cmd += " " + rest[0]
		}
		return inCommand(cmd, runKeys(ctx, rest, getenv, stdout, stderr))
	case "backup":
		return inCommand(cmd, runBackup(ctx, rest, getenv, stdout))
	case "migrate":
		return inCommand(cmd, runMigrate(ctx, rest, getenv, stdout))
	case "copy":
		return inCommand(cmd, runCopy(ctx, rest, getenv, stdout))
	case "version", "--version", "-version":
		fs := newFlagSet("version")
		fs.String("db", "", "") // "All subcommands take --db"; version ignores it, and -h does not show it
		if _, err := parseFlags(fs, rest, getenv, stdout, 0); err != nil {
			return inCommand("version", helpIsNoError(err))
		}
		fmt.Fprintln(stdout, "petstore", buildVersion())
		return nil
	case "help", "-h", "-help", "--help":
		printUsage(stdout, topUsage, "")
		return nil
	}
	return usagef("unknown command %q; run 'petstore help'", cmd)
}

// commandError is the failure of a command, whose name its message
// begins with, as every message of a command does: "petstore: serve:
// --tls-cert and --tls-key go together".
type commandError struct {
	cmd string
	err error
}

func (e *commandError) Error() string { return e.cmd + ": " + e.err.Error() }

func (e *commandError) Unwrap() error { return e.err }

// inCommand makes err, of command cmd, begin with cmd's name, unless its
// message does already.
func inCommand(cmd string, err error) error {
	if err == nil || strings.HasPrefix(err.Error(), cmd+": ") {
		return err
	}
	return &commandError{cmd: cmd, err: err}
}

// errHelp is returned by parseFlags after it printed a command's help.
var errHelp = errors.New("help printed")

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("petstore "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// cmdName is the command a flag set parses ("keys create").
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
	db := fs.String("db", "petstore.db", "the `PATH` of the SQLite file to copy (back up PostgreSQL with pg_dump)")
	pos, err := parseFlags(fs, args, getenv, stdout, 1)
	if err != nil {
		return helpIsNoError(err)
	}
	if pos[0] == "" {
		return usagef("DEST must not be empty")
	}
	if err := checkDBPath(*db); err != nil {
		return err
	}
	if isPostgresURL(*db) {
		return usagef("--db is a PostgreSQL URL and backup copies a SQLite file; back up PostgreSQL with pg_dump (pg_dump --format=custom --file=DEST DBNAME)")
	}
	if err := sqliteBackup(ctx, *db, pos[0], defaultBusyTimeout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s\n", *db, pos[0])
	return nil
}
