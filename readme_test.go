package main

import (
	"os"
	"path/filepath"
	"regexp"
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
