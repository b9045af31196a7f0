package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestKeysCommands(t *testing.T) {
	db := testDB(t)
	out, errOut, err := runCLI(t, nil, "keys", "create", "--db", db, "--plan", "pro", "--name", "mobile app")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^ps_live_[0-9A-Za-z]{40}\n$`).MatchString(out) {
		t.Errorf("keys create stdout = %q, want the key alone on one line", out)
	}
	if !strings.Contains(errOut, "pro") || strings.Contains(errOut, strings.TrimSpace(out)) {
		t.Errorf("keys create stderr = %q: want details, never the key", errOut)
	}
	if !strings.Contains(errOut, "300/min, 10000/day") {
		t.Errorf("keys create stderr = %q: want the pro plan's limits, 300/min, 10000/day", errOut)
	}

	out, _, err = runCLI(t, nil, "keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "5000", "--rpd", "900000", "--env", "staging", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var created map[string]any
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("keys create --json: %v: %q", err, out)
	}
	for _, f := range []string{"id", "key", "name", "plan", "rpm", "rpd", "env", "createdAt"} {
		if _, ok := created[f]; !ok {
			t.Errorf("keys create --json lacks %q: %s", f, out)
		}
	}
	if created["plan"] != "enterprise" || created["rpm"] != 5000.0 || created["rpd"] != 900000.0 || created["env"] != "staging" ||
		!strings.HasPrefix(created["key"].(string), "ps_test_") {
		t.Errorf("keys create --json = %s", out)
	}

	if out, _, err = runCLI(t, nil, "keys", "revoke", "1", "--db", db); err != nil || !strings.Contains(out, "revoked") {
		t.Errorf("keys revoke: %v %q", err, out)
	}
	out, _, err = runCLI(t, nil, "keys", "list", "--json", "--db", db)
	if err != nil {
		t.Fatal(err)
	}
	var listed []map[string]any
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 {
		t.Fatalf("keys list --json: %s", out)
	}
	if _, ok := listed[0]["key"]; ok || strings.Contains(out, "ps_") {
		t.Errorf("keys list shows a secret: %s", out)
	}
	if listed[0]["revoked"] != true || listed[1]["revoked"] != false || listed[0]["rpm"] != 300.0 || listed[0]["name"] != "mobile app" {
		t.Errorf("keys list --json = %s", out)
	}
	if _, ok := listed[1]["bannedUntil"]; !ok {
		t.Errorf("keys list --json lacks bannedUntil: %s", out)
	}

	out, _, err = runCLI(t, nil, "keys", "list", "--db", db)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(lines[1], "revoked") || !strings.Contains(lines[2], "5000") ||
		!regexp.MustCompile(`\bpro\s+300\s+10000\s`).MatchString(lines[1]) {
		t.Errorf("keys list = %q; want the pro key with its plan's limits, 300 and 10000", out)
	}
	if out, _, err = runCLI(t, nil, "keys", "unban", "2", "--db", db); err != nil || !strings.Contains(out, "unbanned") {
		t.Errorf("keys unban: %v %q", err, out)
	}
	if _, _, err := runCLI(t, nil, "keys", "revoke", "99", "--db", db); err == nil || exitCode(err, &bytes.Buffer{}) != 1 {
		t.Errorf("revoke of an unknown id: %v, want a runtime failure", err)
	}
}

func TestUsageErrors(t *testing.T) {
	db := filepath.Join(t.TempDir(), "u.db")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // in the one-line message
	}{
		{"no command", nil, nil, "no command"},
		{"unknown command", []string{"frobnicate"}, nil, "unknown command"},
		{"unknown flag", []string{"serve", "--colour", "red"}, nil, "colour"},
		{"bad env", []string{"serve", "--env", "dev"}, nil, "--env"},
		{"bad addr", []string{"serve", "--addr", "nowhere"}, nil, "--addr"},
		{"bad public url", []string{"serve", "--public-url", "ftp://x"}, nil, "--public-url"},
		{"public url with a query", []string{"serve", "--public-url", "http://x/v1?a=1"}, nil, "--public-url"},
		{"bad env variable", []string{"serve"}, map[string]string{"PETSTORE_TRUST_PROXY": "maybe"}, "PETSTORE_TRUST_PROXY"},
		{"trusted proxies that do not parse", []string{"serve", "--db", db, "--trusted-proxies", "10.0.0.1,proxy.example.com"}, nil, "--trusted-proxies"},
		{"an empty trusted proxy", []string{"serve", "--db", db}, map[string]string{"PETSTORE_TRUSTED_PROXIES": "10.0.0.1,"}, "--trusted-proxies"},
		{"trusted proxies with trust-proxy", []string{"serve", "--db", db, "--trusted-proxies", "10.0.0.1", "--trust-proxy"}, nil, "exclude each other"},
		{"a replica beside SQLite", []string{"serve", "--db", db, "--db-replica", "postgres://h/petstore"}, nil, "--db-replica needs a PostgreSQL --db"},
		{"a replica that is not PostgreSQL", []string{"serve", "--db", "postgres://h/petstore"}, map[string]string{"PETSTORE_DB_REPLICA": "mysql://h/petstore"}, "--db-replica must be a postgres://"},
		{"a replica wait out of bounds", []string{"serve", "--db", db, "--replica-wait", "1m"}, nil, "--replica-wait"},
		{"extra argument", []string{"migrate", "now"}, nil, "unexpected argument"},
		{"keys without subcommand", []string{"keys"}, nil, "subcommand"},
		{"no plan", []string{"keys", "create", "--db", db}, nil, "--plan"},
		{"unknown plan", []string{"keys", "create", "--db", db, "--plan", "gold"}, nil, "gold"},
		{"enterprise without limits", []string{"keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "5"}, nil, "--rpd"},
		{"limits on free", []string{"keys", "create", "--db", db, "--plan", "free", "--rpm", "5"}, nil, "enterprise"},
		{"zero limits", []string{"keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "0", "--rpd", "5"}, nil, "--rpm must be 1 to"},
		{"bad key env", []string{"keys", "create", "--db", db, "--plan", "free", "--env", "qa"}, nil, "--env"},
		{"revoke without id", []string{"keys", "revoke", "--db", db}, nil, "argument"},
		{"revoke bad id", []string{"keys", "revoke", "abc", "--db", db}, nil, "positive integer"},
		{"backup without dest", []string{"backup", "--db", db}, nil, "argument"},
		{"empty backup dest", []string{"backup", "--db", db, ""}, nil, "DEST"},
		{"port out of range", []string{"serve", "--db", db, "--addr", "127.0.0.1:99999"}, nil, "--addr"},
		{"admin port out of range", []string{"serve", "--db", db, "--admin-addr", "127.0.0.1:99999"}, nil, "--admin-addr"},
		{"public url ending in #", []string{"serve", "--db", db, "--public-url", "http://x/v1#"}, nil, "--public-url"},
		{"public url without a host", []string{"serve", "--db", db, "--public-url", "http://:8080/v1"}, nil, "--public-url"},
		{"anon rpm over the limiter's cap", []string{"serve", "--db", db, "--anon-rpm", "1000000000"}, nil, "--anon-rpm"},
		{"busy timeout under 1ms", []string{"serve", "--db", db, "--busy-timeout", "500us"}, nil, "--busy-timeout"},
		{"zero read timeout", []string{"serve", "--db", db, "--read-timeout", "0s"}, nil, "--read-timeout"},
		{"rpm over the limiter's cap", []string{"keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "1000000000", "--rpd", "5"}, nil, "--rpm"},
		{"key name with a newline", []string{"keys", "create", "--db", db, "--plan", "free", "--name", "a\nid 9 ps_live_x"}, nil, "--name"},
		{"empty db path", []string{"keys", "list", "--db", ""}, nil, "--db"},
		{"db path read as a URI", []string{"migrate", "--db", "file:x.db"}, nil, "URI"},
		{"db path with a query", []string{"keys", "list", "--db", "x.db?mode=ro"}, nil, "'?'"},
		{"serve on a db path with a query", []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--db", "x.db?mode=ro"}, nil, "'?'"},
		{"serve on an empty db path", []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--db", ""}, nil, "--db"},
		{"serve on SQLite's in-memory database", []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--db", ":memory:"}, nil, "./:memory:"},
		{"backup of a db path read as a URI", []string{"backup", "--db", "file:" + db, db + ".copy"}, nil, "URI"},
		{"keys create on a db path with a fragment", []string{"keys", "create", "--db", db + "#x", "--plan", "free"}, nil, "'#'"},
		{"keys revoke on an empty db path", []string{"keys", "revoke", "1", "--db", ""}, nil, "--db"},
		{"keys unban on a db path read as a URI", []string{"keys", "unban", "1", "--db", "file:" + db}, nil, "URI"},
		{"backup of a PostgreSQL database", []string{"backup", "--db", "postgres://u:hunter2@127.0.0.1:1/x", db + ".copy"}, nil, "pg_dump"},
		{"db URL of another scheme", []string{"migrate", "--db", "mysql://u:hunter2@127.0.0.1/x"}, nil, "mysql"},
		{"db URL with one slash", []string{"keys", "list", "--db", "postgres:/u:hunter2@127.0.0.1/x"}, nil, "postgres://"},
		{"db URL that does not parse", []string{"migrate", "--db", "postgres://u:hunter2@127.0.0.1:port/x"}, nil, "--db"},
		{"db URL with a slash in its password", []string{"migrate", "--db", "postgres://u:hunter2/x@127.0.0.1/db"}, nil, "percent-encode"},
		{"db URL with a stray % in its password", []string{"migrate", "--db", "postgres://u:hunter2%zz@127.0.0.1/db"}, nil, "percent-encode"},
		{"db URL pgx refuses", []string{"migrate", "--db", "postgres://u:hunter2@127.0.0.1/x?sslmode=sometimes"}, nil, "sslmode"},
		{"db URL with the password in its query", []string{"migrate", "--db", "postgres://u@127.0.0.1/x?password=hunter2&sslmode=sometimes"}, nil, "xxxxx"},
		{"no connections", []string{"serve", "--db", "postgres://u:hunter2@127.0.0.1/x", "--db-max-conns", "0"}, nil, "--db-max-conns"},
		{"cors origin with a path", []string{"serve", "--db", db, "--cors-origins", "https://app.example.com/ui"}, nil, "--cors-origins"},
		{"cors origin without a scheme", []string{"serve", "--db", db, "--cors-origins", "app.example.com"}, nil, "--cors-origins"},
		{"cors origin of another scheme", []string{"serve", "--db", db, "--cors-origins", "ftp://app.example.com"}, nil, "--cors-origins"},
		{"cors * among origins", []string{"serve", "--db", db, "--cors-origins", "https://a.example.com,*"}, nil, "stands alone"},
		{"cors list of commas", []string{"serve", "--db", db, "--cors-origins", " , "}, nil, "--cors-origins"},
		{"cors origin null", []string{"serve", "--db", db, "--cors-origins", "null"}, nil, "--cors-origins"},
		{"cors origin with a user", []string{"serve", "--db", db, "--cors-origins", "https://u@a.example.com"}, nil, "--cors-origins"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCLI(t, tt.env, tt.args...)
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 2 {
				t.Fatalf("exit code = %d (%v), want 2", code, err)
			}
			if strings.HasPrefix(msg.String(), "petstore: petstore") {
				t.Errorf("message %q names petstore twice", msg.String())
			}
			if line := msg.String(); strings.Count(line, "\n") != 1 || !strings.Contains(line, tt.want) {
				t.Errorf("message = %q, want one line naming %q", line, tt.want)
			}
			if strings.Contains(msg.String(), "hunter2") {
				t.Errorf("message = %q shows the database password", msg.String())
			}
		})
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("a refused command created the database")
	}
}

func TestEnvironmentFallbacks(t *testing.T) {
	dir := t.TempDir()
	envDB := filepath.Join(dir, "from-env.db")
	flagDB := filepath.Join(dir, "from-flag.db")
	env := map[string]string{"PETSTORE_DB": envDB, "PETSTORE_PLAN": "pro"}
	if _, _, err := runCLI(t, env, "keys", "create"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(envDB); err != nil {
		t.Errorf("PETSTORE_DB was not used: %v", err)
	}
	if _, _, err := runCLI(t, env, "keys", "create", "--db", flagDB, "--plan", "free"); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, nil, "keys", "list", "--json", "--db", flagDB)
	if err != nil || !strings.Contains(out, `"plan":"free"`) {
		t.Errorf("the flags did not win over the environment: %v %s", err, out)
	}
	out, _, err = runCLI(t, nil, "version")
	if err != nil || !strings.HasPrefix(out, "petstore ") {
		t.Errorf("version: %v %q", err, out)
	}
	out, _, err = runCLI(t, nil, "help")
	if err != nil || !strings.Contains(out, "keys create") {
		t.Errorf("help: %v %q", err, out)
	}
	out, _, err = runCLI(t, nil, "serve", "-h")
	if err != nil || !strings.Contains(out, "\n  --public-url URL\n") {
		t.Errorf("serve -h: %v %q", err, out)
	}
	if _, _, err = runCLI(t, nil, "version", "-h"); err != nil {
		t.Errorf("version -h: %v", err)
	}
	// "All subcommands take --db"; version does not open it.
	if out, _, err = runCLI(t, nil, "version", "--db", filepath.Join(dir, "v.db")); err != nil || !strings.HasPrefix(out, "petstore ") {
		t.Errorf("version --db: %v %q", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "v.db")); err == nil {
		t.Error("version --db created the database")
	}
	if out, _, err = runCLI(t, nil, "keys", "-h"); err != nil || !strings.Contains(out, "create") {
		t.Errorf("keys -h: %v %q", err, out)
	}
}

func TestStartupFailures(t *testing.T) {
	dir := t.TempDir()
	notSQLite := filepath.Join(dir, "notes.txt")
	content := []byte("these are my notes, not a database\n")
	if err := os.WriteFile(notSQLite, content, 0o600); err != nil {
		t.Fatal(err)
	}
	aFile := filepath.Join(dir, "plain")
	if err := os.WriteFile(aFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"not a SQLite file", []string{"--db", notSQLite}, "not a SQLite database"},
		{"missing directory", []string{"--db", filepath.Join(dir, "no", "such", "dir", "p.db")}, "cannot create database"},
		{"parent is a file", []string{"--db", filepath.Join(aFile, "p.db")}, "not a directory"},
		{"directory as database", []string{"--db", dir}, "database"},
		{"port in use", []string{"--db", filepath.Join(dir, "ok.db"), "--addr", busy.Addr().String()}, "address already in use"},
		{"admin port in use", []string{"--db", filepath.Join(dir, "ok.db"), "--addr", "127.0.0.1:0", "--admin-addr", busy.Addr().String()}, "--admin-addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, err := runCLI(t, nil, append([]string{"serve"}, tt.args...)...)
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 1 {
				t.Fatalf("exit code = %d (%v), want 1", code, err)
			}
			if stderr != "" { // no "stopped" before the error: it is the one line
				t.Errorf("a failed start printed %q before its error", stderr)
			}
			if line := msg.String(); strings.Count(line, "\n") != 1 || !strings.Contains(line, tt.want) {
				t.Errorf("message = %q, want one line with %q", line, tt.want)
			}
		})
	}
	if got, _ := os.ReadFile(notSQLite); !bytes.Equal(got, content) {
		t.Errorf("the non-SQLite file was changed: %q", got)
	}
}

func TestNewDatabaseIsPrivate(t *testing.T) {
	db := filepath.Join(t.TempDir(), "private.db")
	createKey(t, db, "--plan", "free")
	st, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
}

// TestKeysCommandsNeedTheDatabase checks that keys list, revoke and unban
// on a mistyped --db fail (exit 1) instead of creating a new, empty
// database there (owned by whoever ran the command) and, for list, printing
// an empty table as if all were well. Only keys create, serve and migrate
// start a database.
func TestKeysCommandsNeedTheDatabase(t *testing.T) {
	for _, args := range [][]string{{"keys", "list"}, {"keys", "revoke", "1"}, {"keys", "unban", "1"}} {
		db := filepath.Join(t.TempDir(), "typo.db")
		out, _, err := runCLI(t, nil, append(args, "--db", db)...)
		var msg bytes.Buffer
		if code := exitCode(err, &msg); code != 1 || !strings.Contains(msg.String(), "typo.db") {
			t.Errorf("%v on a missing database: exit %d, %q, stdout %q; want 1 naming the file", args, code, msg.String(), out)
		}
		if _, err := os.Stat(db); err == nil {
			t.Errorf("%v created the missing database", args)
		}
	}
}

// TestHelpTexts: 'petstore help', 'petstore -h' and every command's -h
// exit 0 and begin with the usage line, arguments included; each flag
// listed says what it takes (no Go type name such as "string" or "value"),
// no command lists a flag it ignores, the default of --log-level is
// written as the docs write it, and the lists of plans, scopes and
// environments are the tables in the code.
func TestHelpTexts(t *testing.T) {
	var names []string
	for _, p := range plans {
		names = append(names, p.Name)
	}
	plansList := strings.Join(names, "|")
	cases := []struct {
		args  []string
		usage string
	}{
		{[]string{"help"}, "usage: petstore COMMAND [flags] [ARGUMENTS]\n"},
		{[]string{"-h"}, "usage: petstore COMMAND [flags] [ARGUMENTS]\n"},
		{[]string{"--help"}, "usage: petstore COMMAND [flags] [ARGUMENTS]\n"},
		{[]string{"serve", "-h"}, "usage: petstore serve [flags]\n"},
		{[]string{"keys", "-h"}, "usage: petstore keys SUBCOMMAND [flags] [ID]\n"},
		{[]string{"keys", "create", "-h"}, "usage: petstore keys create --plan " + plansList + " [flags]\n"},
		{[]string{"keys", "list", "--help"}, "usage: petstore keys list [flags]\n"},
		{[]string{"keys", "rotate", "-h"}, "usage: petstore keys rotate [flags] ID\n"},
		{[]string{"keys", "revoke", "3", "-h"}, "usage: petstore keys revoke [flags] ID\n"},
		{[]string{"keys", "unban", "-help"}, "usage: petstore keys unban [flags] ID\n"},
		{[]string{"backup", "-h"}, "usage: petstore backup [flags] DEST\n"},
		{[]string{"copy", "-h"}, "usage: petstore copy --from PATH --to PATH\n"},
		{[]string{"migrate", "-h"}, "usage: petstore migrate [flags]\n"},
		{[]string{"version", "-h"}, "usage: petstore version\n"},
	}
	flagRE := regexp.MustCompile(`(?m)^  --([a-z-]+)(?: (\S+))?\n`)
	goTypeNames := map[string]bool{"string": true, "int": true, "int64": true, "uint": true, "float": true, "duration": true, "value": true}
	for _, c := range cases {
		out, errOut, err := runCLI(t, nil, c.args...)
		if err != nil || errOut != "" {
			t.Errorf("%v: %v, stderr %q; want exit 0 and nothing on stderr", c.args, err, errOut)
		}
		if !strings.HasPrefix(out, c.usage) {
			t.Errorf("%v does not begin with %q:\n%s", c.args, c.usage, out)
		}
		takes := map[string]string{}
		for _, m := range flagRE.FindAllStringSubmatch(out, -1) {
			takes[m[1]] = m[2]
			if goTypeNames[m[2]] {
				t.Errorf("%v: --%s takes %q, a Go type, not what to write", c.args, m[1], m[2])
			}
		}
		switch strings.Join(c.args[:len(c.args)-1], " ") {
		case "version":
			if len(takes) != 0 {
				t.Errorf("version -h lists flags %v, which version ignores:\n%s", takes, out)
			}
		case "serve":
			if takes["log-level"] != "debug|info|warn|error" || !regexp.MustCompile(`\n\s+log level[^\n]*\n\s+\(default info;`).MatchString(out) {
				t.Errorf("serve -h: --log-level takes %q; want debug|info|warn|error with (default info:\n%s", takes["log-level"], out)
			}
			if takes["env"] != strings.Join(environments, "|") {
				t.Errorf("serve -h: --env takes %q, want the environments %v", takes["env"], environments)
			}
		case "keys create":
			if takes["plan"] != plansList {
				t.Errorf("keys create -h: --plan takes %q, want the plans table %q", takes["plan"], plansList)
			}
			if scopes := strings.Split(takes["scope"], "|"); !slices.Equal(slices.Sorted(slices.Values(scopes)), []string{scopeRead, scopeWrite}) {
				t.Errorf("keys create -h: --scope takes %q, want the scopes %s and %s", takes["scope"], scopeRead, scopeWrite)
			}
			if takes["env"] != strings.Join(environments, "|") {
				t.Errorf("keys create -h: --env takes %q, want the environments %v", takes["env"], environments)
			}
		case "keys revoke 3", "keys rotate", "keys unban", "backup", "keys list", "migrate":
			if takes["db"] == "" {
				t.Errorf("%v lists no --db:\n%s", c.args, out)
			}
		case "":
			if !strings.Contains(out, "\n  petstore keys create --plan "+plansList+" [flags]\n") {
				t.Errorf("%v does not list keys create with the plans table %q:\n%s", c.args, plansList, out)
			}
		}
	}
}

func TestDefaultAddrIsLoopback(t *testing.T) {
	cfg, err := parseServe(nil, envFrom(nil), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != "127.0.0.1:8080" {
		t.Errorf("default --addr = %q, want 127.0.0.1:8080", cfg.addr)
	}
	cfg, err = parseServe(nil, envFrom(map[string]string{"PETSTORE_ADDR": ":8080"}), &strings.Builder{})
	if err != nil || cfg.addr != ":8080" {
		t.Errorf("PETSTORE_ADDR=:8080 gave %q, %v", cfg.addr, err)
	}
	var help strings.Builder
	if _, err := parseServe([]string{"-h"}, envFrom(nil), &help); err != errHelp || !strings.Contains(help.String(), `(default "127.0.0.1:8080";`) {
		t.Errorf("serve -h: %v, does not show the default address:\n%s", err, help.String())
	}
}

// TestFlagMessages: a mistake in a command line is one line that starts
// "petstore: COMMAND: ", writes a flag as the help and the docs do (two
// dashes), prints a duration as the docs do (1m30s, not 1m30s0ms or
// 24h0m0s), and for a bad value names the form it wants.
func TestFlagMessages(t *testing.T) {
	db := filepath.Join(t.TempDir(), "m.db")
	tests := []struct {
		args []string
		env  map[string]string
		want string // the whole line, without "petstore: "
	}{
		{[]string{"serve", "--bogus"}, nil, "serve: unknown flag --bogus"},
		{[]string{"serve", "-bogus"}, nil, "serve: unknown flag --bogus"},
		{[]string{"keys", "list", "--bogus=1"}, nil, "keys list: unknown flag --bogus"},
		{[]string{"serve", "--addr"}, nil, "serve: --addr needs a value"},
		{[]string{"serve", "--ban-duration", "15"}, nil, `serve: --ban-duration: "15" is not a duration (like 15m or 1h)`},
		{[]string{"serve"}, map[string]string{"PETSTORE_BAN_DURATION": "15"}, `serve: PETSTORE_BAN_DURATION: "15" is not a duration (like 15m or 1h)`},
		{[]string{"serve", "--anon-rpm", "lots"}, nil, `serve: --anon-rpm: "lots" is not an integer`},
		{[]string{"serve", "--trust-proxy=maybe"}, nil, `serve: --trust-proxy: "maybe" is not true or false`},
		{[]string{"serve", "--pets-sunset-at", "soon"}, nil, `serve: --pets-sunset-at: "soon" is not a date (like 2027-07-01) or an RFC 3339 time (like 2027-07-01T09:00:00Z)`},
		{[]string{"serve", "--log-level", "loud"}, nil, `serve: --log-level: "loud" is not a log level (debug, info, warn or error)`},
		{[]string{"serve", "--idempotency-ttl", "30s"}, nil, "serve: --idempotency-ttl must be at least 1m, got 30s"},
		{[]string{"serve", "--ban-hold", "90s"}, nil, "serve: --ban-hold must be 0s to 5s, got 1m30s"},
		{[]string{"serve"}, map[string]string{"PETSTORE_BAN_HOLD": "90s"}, "serve: PETSTORE_BAN_HOLD must be 0s to 5s, got 1m30s"},
		{[]string{"serve"}, map[string]string{"PETSTORE_LOG_LEVEL": "loud"}, `serve: PETSTORE_LOG_LEVEL: "loud" is not a log level (debug, info, warn or error)`},
		{[]string{"serve", "--shutdown-timeout", "-1s"}, nil, "serve: --shutdown-timeout must not be negative, got -1s"},
		{[]string{"serve", "--anon-rpm", "0"}, nil, "serve: --anon-rpm must be 1 to 100000000, got 0"},
		{[]string{"serve", "--tls-cert", "x.pem"}, nil, "serve: --tls-cert and --tls-key go together: give both or neither"},
		{[]string{"serve", "--env", "dev"}, nil, `serve: --env must be production or staging, got "dev"`},
		{[]string{"keys", "rotate", "1", "--overlap", "-1h"}, nil, "keys rotate: --overlap must not be negative, got -1h"},
		{[]string{"keys", "create", "--plan", "enterprise", "--rpm", "5", "--rpd", "0"}, nil, "keys create: --rpd must be at least 1, got 0"},
		{[]string{"keys", "frob"}, nil, `keys: unknown subcommand "frob": want create, list, rotate, revoke or unban`},
		{[]string{"backup", "--db", "postgres://u:hunter2@127.0.0.1/x", db + ".copy"}, nil,
			"backup: --db is a PostgreSQL URL and backup copies a SQLite file; back up PostgreSQL with pg_dump (pg_dump --format=custom --file=DEST DBNAME)"},
		{[]string{"copy", "--from", db}, nil, "copy: --from and --to are both required"},
		{[]string{"migrate", "--db", "file:x.db"}, nil, `migrate: database path "file:x.db": SQLite reads a path starting with file: as a URI; write ./file:x.db`},
		{[]string{"version", "now"}, nil, `version: unexpected argument "now"`},
	}
	singleDash := regexp.MustCompile(`(?:^|[\s("'])-[a-z]`)
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := runCLI(t, tt.env, tt.args...)
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 2 {
				t.Errorf("exit code = %d (%v), want 2", code, err)
			}
			if got := msg.String(); got != "petstore: "+tt.want+"\n" {
				t.Errorf("message\n %q\nwant\n %q", got, "petstore: "+tt.want+"\n")
			}
			if singleDash.MatchString(msg.String()) {
				t.Errorf("message %q writes a flag with one dash", msg.String())
			}
		})
	}
}

// TestFailuresNameTheCommand: a runtime failure, too, starts "petstore:
// COMMAND: ".
func TestFailuresNameTheCommand(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	tests := []struct {
		args   []string
		prefix string
	}{
		{[]string{"serve", "--db", filepath.Join(dir, "s.db"), "--addr", busy.Addr().String(), "--admin-addr", "off"}, "petstore: serve: "},
		{[]string{"keys", "list", "--db", filepath.Join(dir, "typo.db")}, "petstore: keys list: "},
		{[]string{"keys", "revoke", "7", "--db", filepath.Join(dir, "typo.db")}, "petstore: keys revoke: "},
		{[]string{"backup", "--db", filepath.Join(dir, "typo.db"), filepath.Join(dir, "b.db")}, "petstore: backup: "},
		{[]string{"copy", "--from", filepath.Join(dir, "typo.db"), "--to", filepath.Join(dir, "c.db")}, "petstore: copy: "},
	}
	for _, tt := range tests {
		_, _, err := runCLI(t, nil, tt.args...)
		var msg bytes.Buffer
		if code := exitCode(err, &msg); code != 1 || !strings.HasPrefix(msg.String(), tt.prefix) || strings.Count(msg.String(), tt.prefix) != 1 {
			t.Errorf("%v: exit %d, %q; want 1 and one line starting %q once", tt.args, code, msg.String(), tt.prefix)
		}
	}
}

// TestVersionFlag: petstore --version prints what petstore version does.
func TestVersionFlag(t *testing.T) {
	want := "petstore " + buildVersion() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		out, errOut, err := runCLI(t, nil, args...)
		if err != nil || out != want || errOut != "" {
			t.Errorf("%v: %v, stdout %q, stderr %q; want %q", args, err, out, errOut, want)
		}
	}
	if out, _, _ := runCLI(t, nil, "help"); !strings.Contains(out, "--version") {
		t.Errorf("petstore help does not mention --version:\n%s", out)
	}
}

// TestHelpShowsFlagsAsTyped: every command's -h lists its flags with two
// dashes, each with its PETSTORE_ variable, its default written as the
// docs write it (24h, not 24h0m0s) and its bounds where it has some; a
// flag without bounds has no bounds. backup -h offers no PostgreSQL URL,
// which backup refuses.
func TestHelpShowsFlagsAsTyped(t *testing.T) {
	for _, args := range [][]string{{"serve"}, {"keys", "create"}, {"keys", "list"}, {"keys", "rotate"}, {"keys", "revoke"},
		{"keys", "unban"}, {"backup"}, {"copy"}, {"migrate"}} {
		out, _, err := runCLI(t, nil, append(args, "-h")...)
		if err != nil {
			t.Fatalf("%v -h: %v", args, err)
		}
		blocks := helpFlags(out)
		if len(blocks) == 0 {
			t.Errorf("%v -h lists no flag:\n%s", args, out)
		}
		if m := regexp.MustCompile(`(?m)^\s+-[a-z][^\n]*`).FindString(out); m != "" {
			t.Errorf("%v -h writes a flag with one dash: %q", args, m)
		}
		if m := regexp.MustCompile(`\b\d+h0m\b|\b\d+m0s\b|\dh0m0s`).FindString(out); m != "" {
			t.Errorf("%v -h writes a duration as %q", args, m)
		}
		for name, text := range blocks {
			env := "PETSTORE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
			if !strings.Contains(text, env) {
				t.Errorf("%v -h: --%s does not name %s:\n%s", args, name, env, text)
			}
		}
	}
	out, _, _ := runCLI(t, nil, "serve", "-h")
	blocks := helpFlags(out)
	for name, want := range map[string][]string{
		"idempotency-ttl":  {"default 24h;", "at least 1m;"},
		"ban-hold":         {"default 100ms;", "0s to 5s;"},
		"anon-rpm":         {"default 60;", "1 to 100000000;"},
		"write-timeout":    {"default 1m;", "at least 1ms;"},
		"idle-timeout":     {"default 2m;"},
		"shutdown-timeout": {"not negative;"},
		"addr":             {`default "127.0.0.1:8080";`},
	} {
		for _, w := range want {
			if !strings.Contains(blocks[name], w) {
				t.Errorf("serve -h: --%s does not say %q:\n%s", name, w, blocks[name])
			}
		}
	}
	if !strings.HasSuffix(blocks["addr"], "\n      (default \"127.0.0.1:8080\"; PETSTORE_ADDR)\n") {
		t.Errorf("serve -h: --addr, which has no bounds, does not end with its default and variable alone:\n%s", blocks["addr"])
	}
	out, _, _ = runCLI(t, nil, "backup", "-h")
	if strings.Contains(out, "postgres") || !strings.Contains(out, "pg_dump") {
		t.Errorf("backup -h offers a PostgreSQL URL, or does not say pg_dump:\n%s", out)
	}
}

// helpFlags reads a command's -h: each flag's name and its lines.
func helpFlags(help string) map[string]string {
	blocks := map[string]string{}
	name := ""
	for line := range strings.SplitSeq(help, "\n") {
		if rest, ok := strings.CutPrefix(line, "  --"); ok {
			name, _, _ = strings.Cut(rest, " ")
		} else if !strings.HasPrefix(line, "   ") {
			name = ""
		}
		if name != "" {
			blocks[name] += line + "\n"
		}
	}
	return blocks
}

func TestFmtDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		24 * time.Hour: "24h", 15 * time.Minute: "15m", 2 * time.Minute: "2m", 90 * time.Second: "1m30s",
		90 * time.Minute: "1h30m", time.Hour + 30*time.Second: "1h0m30s", 100 * time.Millisecond: "100ms", 0: "0s", -time.Hour: "-1h",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
