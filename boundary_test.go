package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// storePrefixes are the boundaries of the storage code: each store's files
// start with its prefix, and only they import its driver or name its types
// (docs/design.md, "File map").
var storePrefixes = []struct{ prefix, driver string }{
	{"sqlite", "modernc.org/sqlite"},
	{"postgres", "github.com/jackc/pgx"},
	{"limits_redis", "github.com/redis/rueidis"},
}

// boundaryExceptions are the functions outside a prefix that may name its
// types: choosing the store, and main's wiring of the Redis limiter. Each
// entry is file:function, and each must still be needed.
var boundaryExceptions = map[string]bool{
	"store.go:openStore": true,
	"main.go:serve":      true,
}

// TestBoundary fails when a product file outside a store's prefix imports
// that store's driver or names one of the types declared in its files, or
// a function there that returns one.
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
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed[name] = f
	}
	violations := boundaryViolations(fset, parsed)
	for _, v := range violations.found {
		t.Error(v)
	}
	for _, e := range violations.unused {
		t.Errorf("boundaryExceptions lists %s, which names no store's type: remove it", e)
	}
	for _, p := range storePrefixes {
		if violations.types[p.prefix] == 0 {
			t.Errorf("no type declared in %s*.go: the check would see nothing", p.prefix)
		}
	}
}

type boundaryReport struct {
	found  []string
	unused []string
	types  map[string]int // prefix: how many types its files declare
}

// boundaryViolations checks the parsed product files, by file name.
func boundaryViolations(fset *token.FileSet, files map[string]*ast.File) boundaryReport {
	rep := boundaryReport{types: map[string]int{}}
	owner := func(file string) string {
		for _, p := range storePrefixes {
			if strings.HasPrefix(file, p.prefix) {
				return p.prefix
			}
		}
		return ""
	}
	// The concrete types each prefix declares.
	typeOf := map[string]string{} // type name: prefix
	for name, f := range files {
		p := owner(name)
		if p == "" {
			continue
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					typeOf[s.(*ast.TypeSpec).Name.Name] = p
					rep.types[p]++
				}
			}
		}
	}
	// And the functions that hand one out (openSQLite, newRedisLimiter):
	// calling them is holding the concrete type.
	for name, f := range files {
		p := owner(name)
		if p == "" {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Type.Results == nil {
				continue
			}
			ast.Inspect(fd.Type.Results, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && typeOf[id.Name] == p {
					typeOf[fd.Name.Name] = p
				}
				return true
			})
		}
	}
	used := map[string]bool{}
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
		for _, d := range f.Decls {
			fn := ""
			if fd, ok := d.(*ast.FuncDecl); ok {
				fn = fd.Name.Name
			}
			ast.Inspect(d, func(n ast.Node) bool {
				id, ok := n.(*ast.Ident)
				if !ok {
					return true
				}
				p, ok := typeOf[id.Name]
				if !ok || p == mine {
					return true
				}
				if key := name + ":" + fn; boundaryExceptions[key] {
					used[key] = true
					return true
				}
				rep.found = append(rep.found, fmt.Sprintf("%s names %s, a type of %s*.go (or a function that returns one); only those files (and the exceptions %v) may", fset.Position(id.Pos()), id.Name, p, boundaryExceptionList()))
				return true
			})
		}
	}
	for _, e := range boundaryExceptionList() {
		if !used[e] {
			rep.unused = append(rep.unused, e)
		}
	}
	return rep
}

func boundaryExceptionList() []string {
	var l []string
	for e := range boundaryExceptions {
		l = append(l, e)
	}
	sort.Strings(l)
	return l
}

// TestBoundaryCatches feeds the check a file that breaks each rule, so that
// a check that sees nothing cannot pass.
func TestBoundaryCatches(t *testing.T) {
	fset := token.NewFileSet()
	parse := func(name, src string) *ast.File {
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	files := map[string]*ast.File{
		"sqlite.go":       parse("sqlite.go", "package main\nimport _ \"modernc.org/sqlite\"\ntype sqliteStore struct{}\n"),
		"postgres.go":     parse("postgres.go", "package main\ntype pgStore struct{}\n"),
		"limits_redis.go": parse("limits_redis.go", "package main\ntype redisLimiter struct{}\n"),
		"store.go":        parse("store.go", "package main\nfunc openStore() any { return &sqliteStore{} }\n"),
		"main.go":         parse("main.go", "package main\nfunc serve() { var _ *redisLimiter }\n"),
		"health.go":       parse("health.go", "package main\nimport \"github.com/jackc/pgx/v5\"\nfunc ready(x any) bool { _, ok := x.(*redisLimiter); return ok }\nvar _ = pgx.Identifier{}\n"),
	}
	rep := boundaryViolations(fset, files)
	if len(rep.found) != 2 || !strings.Contains(rep.found[0], "health.go:2:8 imports github.com/jackc/pgx/v5") ||
		!strings.Contains(rep.found[1], "health.go:3:39 names redisLimiter") {
		t.Errorf("violations = %q, want health.go's pgx import and its *redisLimiter", rep.found)
	}
	if len(rep.unused) != 0 {
		t.Errorf("unused exceptions = %q, want none", rep.unused)
	}
	delete(files, "main.go")
	if rep := boundaryViolations(fset, files); len(rep.unused) != 1 || rep.unused[0] != "main.go:serve" {
		t.Errorf("unused exceptions = %q, want main.go:serve", rep.unused)
	}
}
