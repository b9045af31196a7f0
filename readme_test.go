package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeListsEveryServeFlag: each flag of serve has a row in the
// README's flags table, with its variable and the default serve -h gives
// (a duration may be written another way: 60s for 1m0s).
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
	help, _, err := runCLI(t, nil, "serve", "-h")
	if err != nil {
		t.Fatalf("serve -h: %v", err)
	}
	flagRE := regexp.MustCompile(`(?m)^  -([a-z-]+)[^\n]*\n\s+[^\n]*?(?:\(default ("[^"]*"|[^)]+)\))?$`)
	found := flagRE.FindAllStringSubmatch(help, -1)
	if len(found) < 20 {
		t.Fatalf("read %d flags from serve -h, want them all:\n%s", len(found), help)
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
		case def != "" && !strings.Contains(rows[i], "`"+def+"`") && !sameDuration(def, rows[i]):
			t.Errorf("the README's row of --%s does not give its default `%s`: %s", name, def, rows[i])
		}
	}
}

// sameDuration reports whether def is a duration that row writes, in
// backquotes, in some way of its own.
func sameDuration(def, row string) bool {
	d, err := time.ParseDuration(def)
	if err != nil {
		return false
	}
	for _, m := range regexp.MustCompile("`([0-9a-z.]+)`").FindAllStringSubmatch(row, -1) {
		if e, err := time.ParseDuration(m[1]); err == nil && e == d {
			return true
		}
	}
	return false
}

// TestReadmeQuotesTheCommandLines: the command lines the README gives
// under "Keys and the command line" are those 'petstore help' prints.
func TestReadmeQuotesTheCommandLines(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## Keys and the command line\n\n```\n")
	block, _, _ := strings.Cut(section, "```\n")
	help, _, err := runCLI(t, nil, "help")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for line := range strings.SplitSeq(help, "\n") {
		if strings.HasPrefix(line, "  petstore ") {
			lines = append(lines, strings.TrimPrefix(line, "  ")+"\n")
		}
	}
	if want := strings.Join(lines, ""); len(lines) < 10 || block != want {
		t.Errorf("the README's command lines are\n%s\npetstore help's are\n%s", block, want)
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
