package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestReadmeListsEveryServeFlag: each flag of serve has a row in the
// README's flags table, with its variable and, where the help text and the
// table write it alike, its default.
func TestReadmeListsEveryServeFlag(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for line := range strings.SplitSeq(string(readme), "\n") {
		if strings.HasPrefix(line, "| `--") {
			rows = append(rows, line)
		}
	}
	var help strings.Builder
	if _, err := parseServe([]string{"-h"}, envFrom(nil), &help); err != errHelp {
		t.Fatalf("serve -h: %v", err)
	}
	flagRE := regexp.MustCompile(`(?m)^  -([a-z-]+)[^\n]*\n\s+[^\n]*?(?:\(default ("[^"]*"|\d+)\))?$`)
	found := flagRE.FindAllStringSubmatch(help.String(), -1)
	if len(found) < 20 {
		t.Fatalf("read %d flags from serve -h, want them all:\n%s", len(found), help.String())
	}
	for _, m := range found {
		name, def := m[1], strings.Trim(m[2], `"`)
		env := "PETSTORE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		i := -1
		for j, row := range rows {
			if strings.Contains(row, "`--"+name+"`") && strings.Contains(row, "`"+env+"`") {
				i = j
			}
		}
		switch {
		case i < 0:
			t.Errorf("the README's flags table has no row for --%s (%s)", name, env)
		case def != "" && !strings.Contains(rows[i], "`"+def+"`"):
			t.Errorf("the README's row of --%s does not give its default `%s`: %s", name, def, rows[i])
		}
	}
}

// TestEnvFileModeAgrees: the README, the docs and deploy/ install the
// environment file (which may hold database and Redis passwords) with one
// mode.
func TestEnvFileModeAgrees(t *testing.T) {
	files, _ := filepath.Glob("docs/*.md")
	deploy, _ := filepath.Glob("deploy/*")
	files = append(append(files, "README.md"), deploy...)
	installRE := regexp.MustCompile(`install\s[^\n]*-m\s*(\d+)[^\n]*petstore\.env\b`)
	modes := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range installRE.FindAllStringSubmatch(string(b), -1) {
			modes[m[1]] = append(modes[m[1]], f)
		}
	}
	if len(modes) != 1 || len(modes["0600"]) < 2 {
		t.Errorf("the env file is installed with modes %v, want 0600 everywhere (in deploy/ and the docs)", modes)
	}
}

// TestReadmeHealthzExample: the README's example of a /healthz body has
// the keys the server sends, in the order it sends them, and its values
// but the version.
func TestReadmeHealthzExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?m)^\\| `GET /healthz` .*?`(\\{[^`]*\\})`").FindSubmatch(readme)
	if m == nil {
		t.Fatal("no example body in the README's row of GET /healthz")
	}
	ts := startServer(t)
	r := ts.do(t, "GET", "/healthz", "", "")
	if r.status != 200 {
		t.Fatalf("GET /healthz: %d %s", r.status, r.body)
	}
	sent := string(bytes.TrimSpace(r.body))
	version := decode[map[string]string](t, r)["version"]
	if want := strings.Replace(string(m[1]), `"version":"..."`, `"version":`+strconv.Quote(version), 1); sent != want {
		t.Errorf("the README shows /healthz as %s; the server sends %s", m[1], sent)
	}
}
