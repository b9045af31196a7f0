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
		{"extra argument", []string{"migrate", "now"}, nil, "unexpected argument"},
		{"keys without subcommand", []string{"keys"}, nil, "subcommand"},
		{"no plan", []string{"keys", "create", "--db", db}, nil, "--plan"},
		{"unknown plan", []string{"keys", "create", "--db", db, "--plan", "gold"}, nil, "gold"},
		{"enterprise without limits", []string{"keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "5"}, nil, "--rpd"},
		{"limits on free", []string{"keys", "create", "--db", db, "--plan", "free", "--rpm", "5"}, nil, "enterprise"},
		{"zero limits", []string{"keys", "create", "--db", db, "--plan", "enterprise", "--rpm", "0", "--rpd", "5"}, nil, "positive"},
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
	if err != nil || !strings.Contains(out, "-public-url") {
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
	flagRE := regexp.MustCompile(`(?m)^  -([a-z-]+)(?: (\S+))?\n`)
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
				t.Errorf("%v: -%s takes %q, a Go type, not what to write", c.args, m[1], m[2])
			}
		}
		switch strings.Join(c.args[:len(c.args)-1], " ") {
		case "version":
			if len(takes) != 0 {
				t.Errorf("version -h lists flags %v, which version ignores:\n%s", takes, out)
			}
		case "serve":
			if takes["log-level"] != "debug|info|warn|error" || !regexp.MustCompile(`\n\s+log level[^\n]*\(default info\)\n`).MatchString(out) {
				t.Errorf("serve -h: -log-level takes %q; want debug|info|warn|error with (default info):\n%s", takes["log-level"], out)
			}
			if takes["env"] != strings.Join(environments, "|") {
				t.Errorf("serve -h: -env takes %q, want the environments %v", takes["env"], environments)
			}
		case "keys create":
			if takes["plan"] != plansList {
				t.Errorf("keys create -h: -plan takes %q, want the plans table %q", takes["plan"], plansList)
			}
			if scopes := strings.Split(takes["scope"], "|"); !slices.Equal(slices.Sorted(slices.Values(scopes)), []string{scopeRead, scopeWrite}) {
				t.Errorf("keys create -h: -scope takes %q, want the scopes %s and %s", takes["scope"], scopeRead, scopeWrite)
			}
			if takes["env"] != strings.Join(environments, "|") {
				t.Errorf("keys create -h: -env takes %q, want the environments %v", takes["env"], environments)
			}
		case "keys revoke 3", "keys rotate", "keys unban", "backup", "keys list", "migrate":
			if takes["db"] == "" {
				t.Errorf("%v lists no -db:\n%s", c.args, out)
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
	if _, err := parseServe([]string{"-h"}, envFrom(nil), &help); err != errHelp || !strings.Contains(help.String(), `(default "127.0.0.1:8080")`) {
		t.Errorf("serve -h: %v, does not show the default address:\n%s", err, help.String())
	}
}
