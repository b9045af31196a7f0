package main

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// TestReadmeListsEveryServeFlag: each flag of serve has a row in the
// flags table of docs/cli.md (moved there from the README), with its
// variable and the default serve -h gives (a duration may be written
// another way: 60s for 1m).
func TestReadmeListsEveryServeFlag(t *testing.T) {
	readme, err := os.ReadFile("docs/cli.md")
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
	flagRE := regexp.MustCompile(`(?m)^  --([a-z-]+)[^\n]*\n(?:      [^\n]*\n)*?      \((?:default ("[^"]*"|[^;]+); )?[^\n]*PETSTORE_[A-Z_]+\)$`)
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
			t.Errorf("the flags table of docs/cli.md has no row for --%s (%s)", name, env)
		case def != "" && !strings.Contains(rows[i], "`"+def+"`") && !sameDuration(def, rows[i]):
			t.Errorf("docs/cli.md's row of --%s does not give its default `%s`: %s", name, def, rows[i])
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

// TestReadmeTestCommands: the README's two test commands are the ones
// .ci/run runs; the README names every variable that the test binary's
// first line reports unset, and says the first run needs the module proxy.
func TestReadmeTestCommands(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	cmdRE := regexp.MustCompile(`(?m)^\s*(go test -race[^#\n]*?)\s*(?:#.*)?$`)
	var inReadme, inCI []string
	for _, m := range cmdRE.FindAllStringSubmatch(string(readme), -1) {
		inReadme = append(inReadme, m[1])
	}
	for _, m := range cmdRE.FindAllStringSubmatch(string(ci), -1) {
		inCI = append(inCI, m[1])
	}
	if len(inReadme) != 2 || !slices.Equal(inReadme, inCI) {
		t.Errorf("the README's test commands %q are not .ci/run's %q", inReadme, inCI)
	}
	for _, v := range testVariables {
		if !strings.Contains(string(readme), "| `"+v.name+"` |") {
			t.Errorf("the README's table of test variables has no row for %s", v.name)
		}
	}
	if strings.Contains(string(readme), "nothing but Go") {
		t.Error(`the README says the tests need "nothing but Go"; a first run needs the Go module proxy too`)
	}
}

// TestTestBinaryNamesUnsetVariables: the test binary says first, in one
// line on stderr, which PETSTORE_TEST_* variables are unset and so which
// tests skip: the README's test command shows that line.
func TestTestBinaryNamesUnsetVariables(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PETSTORE_TEST_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, postgresEnv+"=postgres://u:secret@127.0.0.1:1/none")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	first, _, _ := strings.Cut(stderr.String(), "\n")
	for _, v := range []string{redisEnv, browserEnv, promtoolEnv, codegenEnv} {
		if !strings.Contains(first, v) {
			t.Errorf("the first line does not name %s, which is unset: %q", v, first)
		}
	}
	if strings.Contains(first, postgresEnv) || strings.Contains(first, "secret") {
		t.Errorf("the first line names %s, which is set (or shows its value): %q", postgresEnv, first)
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

// TestDocsLinksResolve: every relative link of README.md and docs/*.md
// names a file that exists and, when it names a heading of a Markdown
// file (file.md#anchor or #anchor), a heading that file has, by
// GitHub's rule for anchors. Moving a section breaks no link silently.
func TestDocsLinksResolve(t *testing.T) {
	files, _ := filepath.Glob("docs/*.md")
	files = append(files, "README.md")
	anchors := map[string]map[string]bool{}
	headingsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		headings, _ := markdownHeadingsAndLinks(string(b))
		anchors[path] = headings
		return headings, nil
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, links := markdownHeadingsAndLinks(string(b))
		for _, link := range links {
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := f
			if path != "" {
				target = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s links to %s, which does not exist", f, link)
					continue
				}
			}
			checked++
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			headings, err := headingsOf(target)
			if err != nil {
				t.Errorf("%s links to %s: %v", f, link, err)
			} else if !headings[anchor] {
				t.Errorf("%s links to %s, but %s has no heading with the anchor #%s", f, link, target, anchor)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d relative links in %v, want the docs' many", checked, files)
	}
}

// markdownHeadingsAndLinks returns the anchors of md's headings as GitHub
// makes them (lower case; letters, digits, - and _ kept, spaces as -,
// the rest dropped; a repeated one gets -1, -2, ...) and the targets of
// its inline links, leaving out fenced code blocks and code spans.
func markdownHeadingsAndLinks(md string) (map[string]bool, []string) {
	headings := map[string]bool{}
	seen := map[string]int{}
	var links []string
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeRE := regexp.MustCompile("`[^`]*`")
	fenced := false
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if h := strings.TrimLeft(line, "#"); len(h) < len(line) && len(line)-len(h) <= 6 && strings.HasPrefix(h, " ") {
			var slug strings.Builder
			for _, r := range strings.ToLower(strings.TrimSpace(h)) {
				switch {
				case r == ' ':
					slug.WriteRune('-')
				case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
					slug.WriteRune(r)
				}
			}
			s := slug.String()
			if n := seen[s]; n > 0 {
				headings[s+"-"+strconv.Itoa(n)] = true
			} else {
				headings[s] = true
			}
			seen[s]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			links = append(links, m[1])
		}
	}
	return headings, links
}

// TestReadmeAPITableMatchesRoutes: the README's API table has a row for
// every route of the route table and none for a route the server does not
// serve (its rows outside /v1 must answer on the real server). Each /v1
// row's stability and key columns say what the served document does:
// its x-stability (and "deprecated"), and "yes" when it needs a key.
func TestReadmeAPITableMatchesRoutes(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "\n## The API\n")
	section, _, _ = strings.Cut(section, "\n## ")
	type row struct{ stability, key string }
	rows := map[string]row{}
	rowRE := regexp.MustCompile("^\\| `([A-Z]+ /[^`]*)` \\|([^|]*)\\|([^|]*)\\|")
	for line := range strings.SplitSeq(section, "\n") {
		if m := rowRE.FindStringSubmatch(line); m != nil {
			if _, ok := rows[m[1]]; ok {
				t.Errorf("the README's API table has two rows for %s", m[1])
			}
			rows[m[1]] = row{strings.TrimSpace(m[2]), strings.TrimSpace(m[3])}
		}
	}
	ts := startServer(t)
	ops := servedDocOps(t, ts)
	routed := map[string]bool{}
	for _, rt := range apiRoutes(nil, nil, serveConfig{}) {
		routed[rt.pattern] = true
		if _, ok := rows[rt.pattern]; !ok {
			t.Errorf("the README's API table has no row for %s", rt.pattern)
		}
	}
	for _, pattern := range slices.Sorted(maps.Keys(rows)) {
		r := rows[pattern]
		method, path, _ := strings.Cut(pattern, " ")
		op, ok := ops[pattern]
		switch {
		case routed[pattern] && ok:
			want := row{key: "no"}
			if op.Stability != nil {
				want.stability = *op.Stability
			}
			if op.Deprecated {
				want.stability += ", **deprecated**"
			}
			if op.needsKey {
				want.key = "yes"
			}
			if r != want {
				t.Errorf("the README's row of %s says stability %q, key %q; the document says %q, %q", pattern, r.stability, r.key, want.stability, want.key)
			}
		case routed[pattern]:
			t.Errorf("%s is routed but not in the served document", pattern)
		case strings.HasPrefix(path, "/v1/"):
			t.Errorf("the README's API table lists %s, which the route table does not have", pattern)
		default:
			// Outside the API (the health checks): the server must answer
			// it, without a key when the row says so.
			key := ts.key
			if r.key == "no" {
				key = ""
			}
			if got := ts.do(t, method, path, key, ""); got.status == 404 || got.status == 405 || got.status == 401 {
				t.Errorf("the README's API table lists %s (key %q), which the server answers %d", pattern, r.key, got.status)
			}
		}
	}
}

// TestNoConflictMarkers: no text file of the tree (but .git) holds a line
// that opens or closes a merge's conflict: seven "<" or seven ">", alone
// or before a space. A file with a NUL byte is binary and skipped; the
// seven "=" between them are also a Markdown heading's underline, so they
// do not count.
func TestNoConflictMarkers(t *testing.T) {
	open, end := strings.Repeat("<", 7), strings.Repeat(">", 7)
	checked := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil || bytes.IndexByte(b, 0) >= 0 {
			return err
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if line == open || line == end || strings.HasPrefix(line, open+" ") || strings.HasPrefix(line, end+" ") {
				t.Errorf("%s:%d: a merge's conflict marker: %q", path, i+1, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Errorf("%d text files checked, want the whole tree", checked)
	}
}
