package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// storePrefixes are the boundaries of the storage code: each store's files
// start with its prefix, and only they import its driver or name what they
// declare (docs/design.md, "File map"). Every name they declare says its
// store by one of its words: at the start in lower case (sqliteDescribe,
// pgStore), or after a verb capitalized (openSQLite, newRedisLimiter).
var storePrefixes = []struct {
	prefix, driver string
	words          []string
}{
	{"sqlite", "modernc.org/sqlite", []string{"sqlite", "SQLite"}},
	{"postgres", "github.com/jackc/pgx", []string{"pg", "postgres", "Pg", "Postgres"}},
	{"limits_redis", "github.com/redis/rueidis", []string{"redis", "Redis"}},
}

// saysStore reports whether name, declared in the files of prefix, says
// that store by one of its words.
func saysStore(name, prefix string) bool {
	for _, p := range storePrefixes {
		if p.prefix != prefix {
			continue
		}
		for _, w := range p.words {
			if w[0] >= 'a' && w[0] <= 'z' && strings.HasPrefix(name, w) ||
				w[0] >= 'A' && w[0] <= 'Z' && strings.Contains(name, w) {
				return true
			}
		}
	}
	return false
}

// boundaryExceptions are the names declared in a store's files that a
// function outside them may use, by file:function, each with why. Each
// name listed must still be used there.
var boundaryExceptions = map[string][]string{
	// Choosing the store that --db names, and telling a database's error
	// from the rest, for either store.
	"store.go:openStore": {"openPostgres", "openSQLite"},
	"store.go:isDBError": {"isPostgresError", "isSQLiteError"},
	// Checking --db before any command opens it: a PostgreSQL URL's form;
	// that a SQLite file exists, for the keys commands that must not
	// create one.
	"cli.go:checkDBPath":    {"checkPostgresURL"},
	"cli_keys.go:withStore": {"sqliteCheckDatabaseFile"},
	// The flags of serve: their defaults, and a Redis URL checked at start.
	"cli_serve.go:parseServe": {"pgDefaultMaxConns", "defaultRedisTimeout"},
	"cli_serve.go:validate":   {"parseRedisURL"},
	// serve's wiring: one serve per SQLite file, the Redis limiter, and
	// the warning of a PostgreSQL database without a synchronous standby.
	"main.go:serve": {"errSQLiteStoppedWaiting", "sqliteHoldServeLock", "newRedisLimiter", "redisLimiter", "redisOptions", "redisPrefixOf", "pgWarnReplication"},
	// copy holds each SQLite file's serve lock while it copies.
	"copy.go:runCopy": {"sqliteHoldDatabase"},
	// backup copies a SQLite file alone (VACUUM INTO); a URL is refused
	// before.
	"cli.go:runBackup": {"sqliteBackup"},
}

// TestBoundary fails when a product file outside a store's prefix imports
// that store's driver or names anything declared at the top level of that
// store's files (a type, function, variable or constant), but for
// boundaryExceptions.
func TestBoundary(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	parsed := map[string]*ast.File{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed[name] = f
	}
	rep := boundaryViolations(fset, parsed, boundaryExceptions)
	for _, v := range rep.found {
		t.Error(v)
	}
	for _, e := range rep.unused {
		t.Errorf("boundaryExceptions lists %s, which is not used there: remove it", e)
	}
	for _, n := range rep.unnamed {
		t.Errorf("%s does not say its store: give it the prefix", n)
	}
	for _, p := range storePrefixes {
		if rep.names[p.prefix] < 10 {
			t.Errorf("%d names declared in %s*.go: the check would see almost nothing", rep.names[p.prefix], p.prefix)
		}
	}
}

type boundaryReport struct {
	found   []string
	unused  []string       // file:function: name, listed and not used
	unnamed []string       // file: name, declared in a store's file without its word
	names   map[string]int // prefix: how many names its files declare
}

// boundaryViolations checks the parsed product files, by file name. The
// files must be parsed with object resolution: a name counts where the
// file does not declare it itself (f.Unresolved), so a local variable, a
// field or a method that happens to share a store's name is not a use.
func boundaryViolations(fset *token.FileSet, files map[string]*ast.File, exceptions map[string][]string) boundaryReport {
	rep := boundaryReport{names: map[string]int{}}
	owner := func(file string) string {
		for _, p := range storePrefixes {
			if strings.HasPrefix(file, p.prefix) {
				return p.prefix
			}
		}
		return ""
	}
	// What each prefix declares at the top level; a method is reached
	// through its type (or an interface), so only its type counts.
	declared := map[string]string{} // name: prefix
	for name, f := range files {
		p := owner(name)
		if p == "" {
			continue
		}
		var ids []*ast.Ident
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					ids = append(ids, d.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						ids = append(ids, s.Name)
					case *ast.ValueSpec:
						ids = append(ids, s.Names...)
					}
				}
			}
		}
		for _, id := range ids {
			if id.Name != "_" && id.Name != "init" {
				declared[id.Name] = p
				rep.names[p]++
				if !saysStore(id.Name, p) {
					rep.unnamed = append(rep.unnamed, name+": "+id.Name)
				}
			}
		}
	}
	used := map[string]bool{} // file:function: name
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f, mine := files[name], owner(name)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, p := range storePrefixes {
				if p.prefix != mine && (path == p.driver || strings.HasPrefix(path, p.driver+"/")) {
					rep.found = append(rep.found, fmt.Sprintf("%s imports %s, which only %s*.go may", fset.Position(imp.Pos()), path, p.prefix))
				}
			}
		}
		unresolved := map[*ast.Ident]bool{}
		for _, id := range f.Unresolved {
			unresolved[id] = true
		}
		for _, d := range f.Decls {
			fn := ""
			if fd, ok := d.(*ast.FuncDecl); ok {
				fn = fd.Name.Name
			}
			ast.Inspect(d, func(n ast.Node) bool {
				id, ok := n.(*ast.Ident)
				if !ok || !unresolved[id] {
					return true
				}
				p, ok := declared[id.Name]
				if !ok || p == mine {
					return true
				}
				key := name + ":" + fn
				if slices.Contains(exceptions[key], id.Name) {
					used[key+": "+id.Name] = true
					return true
				}
				rep.found = append(rep.found, fmt.Sprintf("%s names %s, which %s*.go declares; only those files may (or an entry of boundaryExceptions, saying why)", fset.Position(id.Pos()), id.Name, p))
				return true
			})
		}
	}
	for key, ids := range exceptions {
		for _, id := range ids {
			if !used[key+": "+id] {
				rep.unused = append(rep.unused, key+": "+id)
			}
		}
	}
	sort.Strings(rep.unused)
	sort.Strings(rep.unnamed)
	return rep
}

// TestBoundaryCatches feeds the check files that break each rule, and some
// that only look as if they did, so that a check that sees nothing, or
// too much, cannot pass.
func TestBoundaryCatches(t *testing.T) {
	fset := token.NewFileSet()
	parse := func(name, src string) *ast.File {
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	files := map[string]*ast.File{
		"sqlite.go": parse("sqlite.go", "package main\nimport _ \"modernc.org/sqlite\"\ntype sqliteStore struct{}\n"+
			"func sqliteDescribe(err error) error { return err }\nconst busyCode = 5\nvar errBusy error\nfunc (s *sqliteStore) Close() error { return nil }\n"),
		"sqlite_lock.go":  parse("sqlite_lock.go", "package main\nfunc holdDatabase() { _ = errBusy }\n"),
		"postgres.go":     parse("postgres.go", "package main\ntype pgStore struct{}\nfunc isUniqueViolation(error) bool { return false }\n"),
		"limits_redis.go": parse("limits_redis.go", "package main\ntype redisLimiter struct{}\n"),
		"store.go":        parse("store.go", "package main\nfunc openStore() any { return &sqliteStore{} }\n"),
		"main.go":         parse("main.go", "package main\nfunc serve() { var _ *redisLimiter }\n"),
		"health.go": parse("health.go", "package main\nimport \"github.com/jackc/pgx/v5\"\nfunc ready(x any) bool { _, ok := x.(*redisLimiter); return ok }\nvar _ = pgx.Identifier{}\n"+
			"func describe(err error) error { return sqliteDescribe(err) }\n"),
		"orders.go": parse("orders.go", "package main\nfunc code() int { return busyCode }\nvar b = errBusy\nfunc taken(err error) bool { return isUniqueViolation(err) }\n"),
		// Names shared by accident: a local, a parameter, a field, a
		// method, a composite literal's key; and a method of the store
		// called through an interface.
		"pets.go": parse("pets.go", "package main\ntype T struct{ busyCode int }\nfunc (T) sqliteDescribe() {}\n"+
			"func f(errBusy error, s interface{ Close() error }) int { sqliteStore := 1; t := T{busyCode: 2}; t.sqliteDescribe(); s.Close(); return sqliteStore + t.busyCode }\n"),
	}
	except := map[string][]string{"store.go:openStore": {"sqliteStore"}, "main.go:serve": {"redisLimiter"}}
	rep := boundaryViolations(fset, files, except)
	want := []string{
		"health.go:2:8 imports github.com/jackc/pgx/v5",
		"health.go:3:39 names redisLimiter",
		"health.go:5:41 names sqliteDescribe",
		"orders.go:2:26 names busyCode",
		"orders.go:3:9 names errBusy",
		"orders.go:4:37 names isUniqueViolation",
	}
	if len(rep.found) != len(want) {
		t.Errorf("violations = %q, want %q", rep.found, want)
	} else {
		for i, w := range want {
			if !strings.Contains(rep.found[i], w) {
				t.Errorf("violation %d = %q, want %q", i, rep.found[i], w)
			}
		}
	}
	if len(rep.unused) != 0 {
		t.Errorf("unused exceptions = %q, want none", rep.unused)
	}
	wantUnnamed := []string{"postgres.go: isUniqueViolation", "sqlite.go: busyCode", "sqlite.go: errBusy", "sqlite_lock.go: holdDatabase"}
	if !slices.Equal(rep.unnamed, wantUnnamed) {
		t.Errorf("names without their store = %q, want %q", rep.unnamed, wantUnnamed)
	}
	for _, tt := range []struct {
		name, prefix string
		want         bool
	}{
		{"sqliteDescribe", "sqlite", true}, {"openSQLite", "sqlite", true}, {"errSQLiteStoppedWaiting", "sqlite", true},
		{"pgStore", "postgres", true}, {"postgresConfig", "postgres", true}, {"newPgIdemLocks", "postgres", true},
		{"redisLimiter", "limits_redis", true}, {"newRedisLimiter", "limits_redis", true},
		{"holdDatabase", "sqlite", false}, {"upgrade", "postgres", false}, {"libpqHosts", "postgres", false},
		{"sqliteX", "postgres", false}, {"pgStore", "sqlite", false}, {"predis", "limits_redis", false},
	} {
		if got := saysStore(tt.name, tt.prefix); got != tt.want {
			t.Errorf("saysStore(%q, %q) = %v, want %v", tt.name, tt.prefix, got, tt.want)
		}
	}
	if rep.names["sqlite"] != 5 || rep.names["postgres"] != 2 || rep.names["limits_redis"] != 1 {
		t.Errorf("names declared = %v, want sqlite 5 (no method), postgres 2, limits_redis 1", rep.names)
	}
	except["main.go:serve"] = append(except["main.go:serve"], "newRedisLimiter")
	delete(files, "store.go")
	if rep := boundaryViolations(fset, files, except); !slices.Equal(rep.unused, []string{"main.go:serve: newRedisLimiter", "store.go:openStore: sqliteStore"}) {
		t.Errorf("unused exceptions = %q, want main.go:serve's newRedisLimiter and store.go:openStore's sqliteStore", rep.unused)
	}
}
