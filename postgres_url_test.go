package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestPostgresURLReadTwoWays gives every command a PostgreSQL URL whose
// password holds a raw @, /, ? or #, which Go's URL parser (which masks the
// password) and the driver read differently: each is bad usage, before any
// connection, with one line that asks for percent-encoding and shows no
// part of the password. The same passwords percent-encoded are taken (and
// fail to connect: nothing listens on port 1), masked. No server needed.
func TestPostgresURLReadTwoWays(t *testing.T) {
	dir := t.TempDir()
	sqliteDB := filepath.Join(dir, "from.db")
	if _, errOut, err := runCLI(t, nil, "migrate", "--db", sqliteDB); err != nil {
		t.Fatalf("migrate: %v\n%s", err, errOut)
	}
	commands := []struct {
		name string
		args func(db string) []string
	}{
		{"keys list", func(db string) []string { return []string{"keys", "list", "--db", db} }},
		{"keys create", func(db string) []string { return []string{"keys", "create", "--plan", "free", "--db", db} }},
		{"migrate", func(db string) []string { return []string{"migrate", "--db", db} }},
		{"serve", func(db string) []string {
			return []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--busy-timeout", "2s", "--db", db}
		}},
		{"copy --from", func(db string) []string {
			return []string{"copy", "--from", db, "--to", filepath.Join(t.TempDir(), "to.db")}
		}},
		{"copy --to", func(db string) []string { return []string{"copy", "--from", sqliteDB, "--to", db} }},
	}
	refused := []struct{ url, password string }{
		{"postgres://postgres:p@S3kr1tPW@127.0.0.1:1/x", "p@S3kr1tPW"},
		{"postgres://u:12/34@h/db", "12/34"},
		{"postgres://u:12/34@127.0.0.1:1/db", "12/34"},
		{"postgres://postgres:pa@ss/wd@127.0.0.1:1/x", "pa@ss/wd"},
		{"postgres://postgres:Pw/Zq9x@127.0.0.1:1/x", "Pw/Zq9x"},
		{"postgres://postgres:41?Zq9x@127.0.0.1:1/x", "41?Zq9x"},
		{"postgres://postgres:41#Zq9x@127.0.0.1:1/x", "41#Zq9x"},
		{"postgresql://postgres:Zq:9x@Kw7@127.0.0.1:1/x", "Zq:9x@Kw7"},
		{"postgres://postgres@127.0.0.1:1/x?password=Zq#9xKw", "Zq#9xKw"},
	}
	for _, tt := range refused {
		for _, c := range commands {
			t.Run(c.name+" "+strings.ReplaceAll(tt.url, tt.password, "PW"), func(t *testing.T) {
				out, errOut, err := runCLI(t, nil, c.args(tt.url)...)
				var msg bytes.Buffer
				code := exitCode(err, &msg)
				seen := out + errOut + msg.String()
				if part := passwordPart(seen, tt.password); part != "" {
					t.Fatalf("the output shows %q of the password:\n%s", part, seen)
				}
				if code != 2 {
					t.Fatalf("exit code = %d (%s), want 2", code, msg.String())
				}
				if line := msg.String(); strings.Count(line, "\n") != 1 || !strings.Contains(line, "percent-encode") || !strings.Contains(line, "%40") {
					t.Errorf("message = %q, want one line asking to percent-encode", line)
				}
			})
		}
	}
	accepted := []struct{ url, password, raw string }{
		{"postgres://postgres:p%40S3kr1tPW@127.0.0.1:1/x", "p@S3kr1tPW", "p%40S3kr1tPW"},
		{"postgres://u:12%2F34@127.0.0.1:1/db", "12/34", "12%2F34"},
		{"postgres://postgres:41%3FZq9x%23Kw@127.0.0.1:1/x", "41?Zq9x#Kw", "41%3FZq9x%23Kw"},
		{"postgres://postgres:Zq:9x@127.0.0.1:1/x", "Zq:9x", "Zq:9x"},
		{"postgres://postgres@127.0.0.1:1/x?password=Zq%239xKw", "Zq#9xKw", "Zq%239xKw"},
	}
	for _, tt := range accepted {
		for _, c := range commands {
			t.Run("accepted "+c.name+" "+strings.ReplaceAll(tt.url, tt.raw, "PW"), func(t *testing.T) {
				out, errOut, err := runCLI(t, nil, c.args(tt.url)...)
				var msg bytes.Buffer
				code := exitCode(err, &msg)
				seen := out + errOut + msg.String()
				for _, pw := range []string{tt.password, tt.raw} {
					if part := passwordPart(seen, pw); part != "" {
						t.Fatalf("the output shows %q of the password:\n%s", part, seen)
					}
				}
				if code != 1 || !strings.Contains(msg.String(), "127.0.0.1:1") {
					t.Fatalf("exit code = %d (%s), want 1: a database that does not answer", code, msg.String())
				}
			})
		}
	}
}

// passwordPart returns the first part of pw, three bytes or longer, that s
// contains, or "".
func passwordPart(s, pw string) string {
	for n := len(pw); n >= 3; n-- {
		for i := 0; i+n <= len(pw); i++ {
			if strings.Contains(s, pw[i:i+n]) {
				return pw[i : i+n]
			}
		}
	}
	return ""
}

func TestPGURLReadsAlike(t *testing.T) {
	tests := []struct {
		url  string
		want bool
	}{
		{"postgres://u:p@h:5432/db", true},
		{"postgres://u@h/db", true},
		{"postgres://h", true},
		{"postgres://", true},
		{"postgres:///db?host=/run/postgresql", true},
		{"postgres://u:p%40ss@h/db?sslmode=disable&password=x%23y", true},
		{"postgres://u:pa:ss@h/db", true},
		{"postgres://u:p@[::1]:5432/db", true},
		{"postgres://u:p@h1:5432,h2:5433/db", true},
		{"postgres://h/db?application_name=a@b", true},
		{"postgres://u:p@S3kr1tPW@127.0.0.1:1/x", false}, // user info to the first @ or the last
		{"postgres://u:12/34@h/db", false},               // both: database 34@h/db
		{"postgres://u:12?34@h/db", false},               // Go: a query; the driver: a password
		{"postgres://u:12#34@h/db", false},               // Go: a fragment
		{"postgres://h/db#x", false},
		{"postgres://h/db?password=a#b", false},
		{"postgres://h?x=@y/db", false},
		{"postgres://h/d@b", false},
		{"postgres://h/my db", false},
		{"postgres://[::1/x]@h/db", false},
		{"postgres://u:p@[::1]:5432,[::1]:5433/db", true},
		{"postgres://u:p@h1:5432,h2/db?target_session_attrs=any", true},
		{"postgres://u:p@[::1],h2:1,[fe80::1%25lo]:3/db", true},
		{"postgres://u:p@ss@[::1]:5432,[::1]:5433/db", false},
	}
	setSentinelPGEnv(t)
	for _, tt := range tests {
		if got := pgURLReadsAlike(tt.url); got != tt.want {
			t.Errorf("pgURLReadsAlike(%q) = %v, want %v", tt.url, got, tt.want)
		}
		if err := driverReadsAsGo(tt.url); tt.want && err != nil {
			t.Errorf("%s: %v", tt.url, err)
		}
	}
}

// FuzzPGURLReadsAlike checks pgURLReadsAlike against the driver itself:
// whatever it takes, pgconn reads as net/url does.
func FuzzPGURLReadsAlike(f *testing.F) {
	for _, s := range []string{"u:p@h:5432/db", "u:p@S3cr@h/db", "u:12/34@h/db", "u:1?2@h/db?sslmode=disable",
		"[::1]:1,h:2/db", "u@h/d%40b", "h?x=@y/db", ":@/", "u:@h:/?", "[a]b:1/c"} {
		f.Add(s)
	}
	setSentinelPGEnv(f)
	f.Fuzz(func(t *testing.T, s string) {
		db := "postgres://" + s
		if _, _, err := parseDBURL(db); err != nil || !pgURLReadsAlike(db) {
			return
		}
		if err := driverReadsAsGo(db); err != nil {
			t.Fatalf("%q: %v", db, err)
		}
	})
}

// setSentinelPGEnv sets the PG* variables that fill in what a URL leaves
// out to values no URL in these tests names.
func setSentinelPGEnv(tb interface{ Setenv(k, v string) }) {
	for k, v := range map[string]string{"PGUSER": "envuser", "PGPASSWORD": "envpw", "PGHOST": "envhost", "PGPORT": "5999",
		"PGDATABASE": "envdb", "PGPASSFILE": "/nonexistent", "PGSERVICE": "", "PGSERVICEFILE": "/nonexistent", "PGHOSTADDR": ""} {
		tb.Setenv(k, v)
	}
}

// driverReadsAsGo compares the user, password, host, port and database that
// pgconn reads in db with net/url's reading (or, where that has none, the
// sentinel variables). A URL the driver refuses, or whose query names any
// of them, is not compared.
func driverReadsAsGo(db string) error {
	u, hosts, err := parseDBURL(db)
	if err != nil {
		return err
	}
	for k := range u.Query() {
		switch k {
		case "host", "hostaddr", "port", "user", "password", "dbname", "database", "service", "passfile":
			return nil
		}
	}
	cfg, err := pgconn.ParseConfig(db)
	if err != nil {
		return nil
	}
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	pw, _ := u.User.Password()
	type reading struct{ user, password, host, port, database string }
	goRead := reading{or(u.User.Username(), "envuser"), or(pw, "envpw"), or(u.Hostname(), "envhost"), or(u.Port(), "5999"), or(strings.TrimPrefix(u.Path, "/"), "envdb")}
	drv := reading{cfg.User, cfg.Password, cfg.Host, strconv.Itoa(int(cfg.Port)), cfg.Database}
	if n, err := strconv.Atoi(goRead.port); err == nil { // :001 is port 1
		goRead.port = strconv.Itoa(n)
	}
	if hosts != "" { // a list: net/url has no reading of its own
		goRead.host, goRead.port = drv.host, drv.port
		// A host left out of a list is libpq's default (a socket
		// directory), and a bracket left open or unmatched splits as the
		// driver pleases: neither is compared.
		if want, got := hostListOf(hosts), driverHosts(cfg); want != nil && !slices.Equal(want, got) {
			return fmt.Errorf("the host list %q reads %q, the driver %q", hosts, want, got)
		}
	}
	if goRead != drv {
		return fmt.Errorf("net/url reads %+v, the driver %+v", goRead, drv)
	}
	return nil
}

// hostListOf splits a host list as written in a URL into host:port
// entries, as libpq reads it: percent-decoded, hosts and ports trimmed of spaces, an IPv6 address in
// brackets, 5432 where a port is left out (in a list, the driver takes no
// PGPORT), each entry once in a row (as driverHosts); nil, not to be
// compared, when a host is left out (libpq's default, a socket directory)
// or a bracket is left unmatched (split as the driver pleases). An entry
// that does not decode is kept as written.
func hostListOf(hosts string) []string {
	var list []string
	for h := range strings.SplitSeq(hosts, ",") {
		host, port := h, ""
		if strings.HasPrefix(h, "[") {
			if end := strings.IndexByte(h, ']'); end >= 0 {
				host, port = h[1:end], strings.TrimPrefix(h[end+1:], ":")
			}
		} else if i := strings.IndexByte(h, ':'); i >= 0 {
			host, port = h[:i], h[i+1:]
		}
		if d, err := url.PathUnescape(host); err == nil {
			host = d
		}
		host = strings.Trim(host, " ") // as the driver's uriDecode
		if host == "" || strings.ContainsAny(host, "[]") {
			return nil
		}
		if port = strings.Trim(port, " "); port == "" {
			port = "5432"
		}
		if n, err := strconv.Atoi(port); err == nil {
			port = strconv.Itoa(n)
		}
		if e := net.JoinHostPort(host, port); len(list) == 0 || list[len(list)-1] != e {
			list = append(list, e)
		}
	}
	return list
}

// driverHosts is the driver's list of hosts, each once (it tries each
// twice, with TLS and without, under sslmode=prefer).
func driverHosts(cfg *pgconn.Config) []string {
	list := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, fb := range cfg.Fallbacks {
		if h := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))); h != list[len(list)-1] {
			list = append(list, h)
		}
	}
	return list
}

// TestPostgresConnectErrorOnce: a database that refuses the connection is
// named in one line that gives each of the driver's reasons once (it tries
// each address with TLS and without, and would print both), with the
// password masked. No server needed: nothing listens on ports 1 and 2.
func TestPostgresConnectErrorOnce(t *testing.T) {
	const secret = "Zq9xKw7"
	tests := []struct {
		name  string
		args  []string
		addrs []string
	}{
		{"keys list", []string{"keys", "list", "--db", "postgres://postgres:" + secret + "@127.0.0.1:1/x"}, []string{"127.0.0.1:1 ("}},
		{"serve", []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--db", "postgres://postgres:" + secret + "@127.0.0.1:1/x"}, []string{"127.0.0.1:1 ("}},
		{"two hosts", []string{"migrate", "--db", "postgres://postgres:" + secret + "@127.0.0.1:1,127.0.0.1:2/x"}, []string{"127.0.0.1:1 (", "127.0.0.1:2 ("}},
		{"two IPv6 hosts", []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "off", "--db", "postgres://postgres:" + secret + "@[::1]:1,[::1]:2/x"}, []string{"[::1]:1 (", "[::1]:2 ("}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := runCLI(t, nil, tt.args...)
			var msg bytes.Buffer
			if code := exitCode(err, &msg); code != 1 {
				t.Fatalf("exit code = %d (%s), want 1", code, msg.String())
			}
			line := msg.String()
			if strings.Contains(out+errOut+line, secret) || !strings.Contains(line, "xxxxx") {
				t.Errorf("message = %q, want the password masked", line)
			}
			if strings.Count(line, "\n") != 1 || strings.Count(line, "failed to connect") != 1 {
				t.Errorf("message = %q, want one line", line)
			}
			for _, addr := range tt.addrs {
				if n := strings.Count(line, addr); n != 1 {
					t.Errorf("message names %q %d times, want once: %q", addr, n, line)
				}
			}
			if n := strings.Count(line, "connection refused"); n != len(tt.addrs) {
				t.Errorf("message says \"connection refused\" %d times, want %d: %q", n, len(tt.addrs), line)
			}
		})
	}
}

func TestEachOnce(t *testing.T) {
	a, b := errors.New("a: refused"), errors.New("b: refused")
	tests := []struct {
		err  error
		want string
	}{
		{a, "a: refused"},
		{errors.Join(a, a), "a: refused"},
		{errors.Join(a, b, a, b), "a: refused; b: refused"},
		{fmt.Errorf("resolving: %w", errors.Join(a, a)), "resolving: a: refused"},
		{fmt.Errorf("%w (again)", errors.Join(a, a)), "a: refused\na: refused (again)"},
	}
	for _, tt := range tests {
		if got := pgEachOnce(tt.err); got != tt.want {
			t.Errorf("pgEachOnce(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestRedactDBHostLists: libpq's host lists, which Go's URL parser refuses
// ([::1]:5432,[::1]:5433, h1:5432,h2), are shown as written with the
// password masked, and taken by checkPostgresURL.
func TestRedactDBHostLists(t *testing.T) {
	tests := []struct{ db, want string }{
		{"postgres://u:Zq9xKw7@[::1]:5432,[::1]:5433/petstore", "postgres://u:xxxxx@[::1]:5432,[::1]:5433/petstore"},
		{"postgres://u:Zq9xKw7@h1:5432,h2/petstore?sslmode=disable", "postgres://u:xxxxx@h1:5432,h2/petstore?sslmode=disable"},
		{"postgresql://[::1]:1,127.0.0.1:2/x?password=Zq9xKw7", "postgresql://[::1]:1,127.0.0.1:2/x?password=xxxxx"},
		{"postgres://u:Zq9xKw7@h1,h2", "postgres://u:xxxxx@h1,h2"},
		{"postgres://u:Zq9xKw7@[::1]:5432/petstore", "postgres://u:xxxxx@[::1]:5432/petstore"},
	}
	for _, tt := range tests {
		if got := redactDB(tt.db); got != tt.want {
			t.Errorf("redactDB(%q) = %q, want %q", tt.db, got, tt.want)
		}
		if err := checkPostgresURL(tt.db); err != nil {
			t.Errorf("checkPostgresURL(%q): %v", tt.db, err)
		}
	}
}
