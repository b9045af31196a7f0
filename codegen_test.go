// codegen_test.go lints the served OpenAPI document (the HEADs that
// openapi.go adds included) with Redocly, and proves that clients
// generated from it, with tools nobody here wrote, get a typed error for
// every status: a Go client from oapi-codegen (which also compiles and calls a
// running server) and TypeScript types from openapi-typescript (which a
// strict tsc checks). It needs the Go module proxy and npm, so it runs only
// with PETSTORE_TEST_CODEGEN set; a tool that then fails to run fails it.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const codegenEnv = "PETSTORE_TEST_CODEGEN"

// The generators and what their output needs, pinned: a new release is
// taken on purpose, by changing these.
const (
	oapiCodegenVersion = "v2.8.2" // github.com/oapi-codegen/oapi-codegen/v2
	oapiRuntimeVersion = "v1.8.0" // github.com/oapi-codegen/runtime, which its clients import
	openapiTSVersion   = "7.13.0" // npm openapi-typescript
	typescriptVersion  = "5.9.3"  // npm typescript (openapi-typescript 7 wants ^5)
	redoclyVersion     = "2.77.0" // npm @redocly/cli, as .ci/run lints openapi.json with
)

// TestCodegen generates the clients from the document the server serves
// and checks their error types; the Go client calls the server through the
// contract checker.
func TestCodegen(t *testing.T) {
	if os.Getenv(codegenEnv) == "" {
		t.Skip("set " + codegenEnv + "=1 to generate and check clients with oapi-codegen and openapi-typescript")
	}
	ts := startServer(t)
	r := ts.do(t, "GET", "/v1/openapi.json", "", "")
	if r.status != 200 {
		t.Fatalf("GET /v1/openapi.json: %d", r.status)
	}
	errs := documentErrors(t, r.body)
	dir := t.TempDir()
	spec := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(spec, r.body, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("Redocly", func(t *testing.T) { lintServed(t, spec) })
	t.Run("Go", func(t *testing.T) { codegenGo(t, ts, spec, errs) })
	t.Run("TypeScript", func(t *testing.T) { codegenTypeScript(t, spec, errs) })
}

// docError is one error response of the document: the body of status for
// operation, an Error narrowed to that status and codes.
type docError struct {
	operation string // operationId
	status    int
	codes     []string
}

// documentErrors lists the error responses with a body in doc, each with
// the status and codes its schema narrows the Error to.
func documentErrors(t *testing.T, doc []byte) []docError {
	t.Helper()
	type schema struct {
		Ref        string   `json:"$ref"`
		AllOf      []schema `json:"allOf"`
		Properties map[string]struct {
			Const any      `json:"const"`
			Enum  []string `json:"enum"`
		} `json:"properties"`
	}
	var d struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Responses   map[string]struct {
				Content map[string]struct {
					Schema schema `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	doc, err := inlineResponses(doc)
	if err == nil {
		err = json.Unmarshal(doc, &d)
	}
	if err != nil {
		t.Fatalf("served document: %v", err)
	}
	var out []docError
	for path, item := range d.Paths {
		for method, op := range item {
			for status, r := range op.Responses {
				code, _ := strconv.Atoi(status)
				body, ok := r.Content["application/json"]
				if code < 400 || !ok {
					continue
				}
				e := docError{operation: op.OperationID, status: code}
				s := body.Schema
				if name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/"); ok {
					s = d.Components.Schemas[name]
				}
				for _, part := range s.AllOf {
					if c, ok := part.Properties["status"].Const.(float64); ok && int(c) == code {
						e.codes = part.Properties["code"].Enum
					}
				}
				if len(e.codes) == 0 || op.OperationID == "" {
					t.Fatalf("%s %s %s: not an Error narrowed to its status and codes", method, path, status)
				}
				out = append(out, e)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return fmt.Sprint(out[i].operation, out[i].status) < fmt.Sprint(out[j].operation, out[j].status)
	})
	if len(out) == 0 {
		t.Fatal("the served document lists no error response")
	}
	return out
}

// lintServed lints the served document, the HEADs that openAPIDocument
// adds included, with .ci/run's Redocly and rules: no error and no warning.
// (.ci/run lints openapi.json, the source, itself.)
func lintServed(t *testing.T, spec string) {
	config, err := filepath.Abs("redocly.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := tool(t, filepath.Dir(spec), 3*time.Minute, nil, "npx", "--yes", "@redocly/cli@"+redoclyVersion, "lint", "--config", config, spec)
	if !strings.Contains(out, "Your API description is valid") || regexp.MustCompile(`\d+ warnings?\b`).MatchString(out) {
		t.Errorf("redocly lint of the served document: not clean:\n%s", out)
	}
}

// tool runs name with args in dir, within timeout, with env added to the
// environment, and returns its output;
// a tool that cannot run, fails or runs out of time fails the test. The
// tool runs in a process group of its own, so that the timeout ends what
// it started too (go run's program, npx's node).
func tool(t *testing.T, dir string, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	// The machine's module and build caches (GOMODCACHE, GOCACHE) and npm
	// cache serve every run after the first; no workspace or GOFLAGS of the
	// caller's reaches the throwaway module.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "npm_config_yes=true", "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s: %s", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no end within %s\n%s", name, strings.Join(args, " "), timeout, out)
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// codegenGo generates a Go client with oapi-codegen, checks that every
// error type of it is typed, and runs a program that uses it against ts.
func codegenGo(t *testing.T, ts *testServer, spec string, errs []docError) {
	mod := filepath.Join(t.TempDir(), "petclient")
	files := map[string]string{
		"go.mod":            "module petclient\n\ngo 1.25\n\nrequire github.com/oapi-codegen/runtime " + oapiRuntimeVersion + "\n",
		"oapi-codegen.yaml": "package: api\noutput: api/api.gen.go\ngenerate:\n  models: true\n  client: true\n",
		"main.go":           codegenClientProgram,
	}
	if err := os.MkdirAll(filepath.Join(mod, "api"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tool(t, mod, 5*time.Minute, nil, "go", "run", "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@"+oapiCodegenVersion,
		"-config", "oapi-codegen.yaml", spec)
	checkGoErrorTypes(t, filepath.Join(mod, "api", "api.gen.go"), errs)
	tool(t, mod, 2*time.Minute, nil, "go", "mod", "tidy")

	// The program talks to the server through the contract checker, so
	// that every answer the generated client reads is checked too.
	target, err := url.Parse(ts.base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: ts.client.Transport,
	})
	defer proxy.Close()
	out := tool(t, mod, 3*time.Minute, []string{"PETSTORE_KEY=" + ts.key}, "go", "run", ".", proxy.URL+"/v1")
	t.Logf("client program:\n%s", out)
	for _, want := range []string{
		`(?m)^created [1-9][0-9]* Dog$`,
		`(?m)^error 409 conflict: .`, // the 409 read as a typed Error
		`(?m)^listed 1: Dog$`,
		`(?m)^head 200 etag true$`,
		`(?m)^error 401 unauthorized: .`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("client program output does not match %s", want)
		}
	}
}

// codegenClientProgram uses the generated client as a client developer
// would. It compiles only if the errors it reads are typed: converting an
// interface{} code or status to string or int does not compile.
const codegenClientProgram = `package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"petclient/api"
)

func main() {
	if err := run(context.Background(), os.Args[1], os.Getenv("PETSTORE_KEY")); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}

// describe takes what every typed error has.
func describe(code string, status int, message string) string {
	return fmt.Sprintf("error %d %s: %s", status, code, message)
}

func run(ctx context.Context, server, key string) error {
	c, err := api.NewClientWithResponses(server, api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+key)
		return nil
	}))
	if err != nil {
		return err
	}
	created, err := c.CreateCategoryWithResponse(ctx, nil, api.CreateCategoryJSONRequestBody{Name: "Dog"})
	if err != nil {
		return err
	}
	if created.JSON201 == nil {
		return fmt.Errorf("create: %d %s", created.StatusCode(), created.Body)
	}
	fmt.Printf("created %d %s\n", created.JSON201.Id, created.JSON201.Name)

	again, err := c.CreateCategoryWithResponse(ctx, nil, api.NewCategory{Name: "dog"})
	if err != nil {
		return err
	}
	if e := again.JSON409; e == nil {
		return fmt.Errorf("create again: %d %s", again.StatusCode(), again.Body)
	} else {
		fmt.Println(describe(string(e.Code), int(e.Status), e.Message))
	}

	list, err := c.ListCategoriesWithResponse(ctx, nil)
	if err != nil {
		return err
	}
	if list.JSON200 == nil || len(*list.JSON200) == 0 {
		return fmt.Errorf("list: %d %s", list.StatusCode(), list.Body)
	}
	fmt.Printf("listed %d: %s\n", len(*list.JSON200), (*list.JSON200)[0].Name)

	head, err := c.HeadCategoriesWithResponse(ctx, nil)
	if err != nil {
		return err
	}
	fmt.Printf("head %d etag %t\n", head.StatusCode(), head.HTTPResponse.Header.Get("ETag") != "")

	anonymous, err := api.NewClientWithResponses(server)
	if err != nil {
		return err
	}
	denied, err := anonymous.ListPetsWithResponse(ctx, nil)
	if err != nil {
		return err
	}
	if e := denied.JSON401; e == nil {
		return fmt.Errorf("list pets without a key: %d %s", denied.StatusCode(), denied.Body)
	} else {
		fmt.Println(describe(string(e.Code), int(e.Status), e.Message))
	}
	return nil
}
`

// checkGoErrorTypes parses the generated Go and checks every error body of
// errs: <Operation>Response has its JSON<status> field, of a struct type
// whose code and message are strings and status an integer, with no
// interface{} or any in it.
func checkGoErrorTypes(t *testing.T, path string, errs []docError) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatalf("generated Go: %v", err)
	}
	types := map[string]ast.Expr{}
	for _, decl := range f.Decls {
		if gd, ok := decl.(*ast.GenDecl); ok && gd.Tok == token.TYPE {
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				types[ts.Name.Name] = ts.Type
			}
		}
	}
	show := func(e ast.Expr) string {
		var b bytes.Buffer
		printer.Fprint(&b, fset, e)
		return b.String()
	}
	// underlying follows named types to the type they are made of.
	underlying := func(e ast.Expr) ast.Expr {
		for range 10 {
			id, ok := e.(*ast.Ident)
			if !ok || types[id.Name] == nil {
				return e
			}
			e = types[id.Name]
		}
		return e
	}
	basic := func(e ast.Expr) string {
		if id, ok := underlying(e).(*ast.Ident); ok {
			return id.Name
		}
		return show(underlying(e))
	}
	// checkError reports what is untyped in the error type e.
	checkError := func(where string, e ast.Expr) {
		if star, ok := e.(*ast.StarExpr); ok {
			e = star.X
		}
		if id, ok := e.(*ast.Ident); ok {
			where += " (" + id.Name + ")"
		} else {
			where += " (an inline struct)"
		}
		st, ok := underlying(e).(*ast.StructType)
		if !ok {
			t.Errorf("%s: not a struct", where)
			return
		}
		want := map[string][]string{
			"code":    {"string"},
			"message": {"string"},
			"status":  {"int", "int32", "int64"},
		}
		for _, field := range st.Fields.List {
			name := show(field.Type)
			if field.Tag != nil {
				tag, _ := strconv.Unquote(field.Tag.Value)
				name, _, _ = strings.Cut(regexp.MustCompile(`json:"([^"]*)"`).FindStringSubmatch(tag + ` json:""`)[1], ",")
			}
			untyped := false
			ast.Inspect(underlying(field.Type), func(n ast.Node) bool {
				_, isInterface := n.(*ast.InterfaceType)
				id, isIdent := n.(*ast.Ident)
				untyped = untyped || isInterface || isIdent && id.Name == "any"
				return true
			})
			kinds, wanted := want[name]
			delete(want, name)
			if got := basic(field.Type); untyped || wanted && !slices.Contains(kinds, got) {
				t.Errorf("%s: %s is %s (%s)", where, name, show(field.Type), got)
			}
		}
		for name := range want {
			t.Errorf("%s: no %s field", where, name)
		}
	}
	checkError("type Error", ast.NewIdent("Error"))
	for _, e := range errs {
		resp := strings.ToUpper(e.operation[:1]) + e.operation[1:] + "Response"
		where := fmt.Sprintf("%s.JSON%d", resp, e.status)
		st, ok := types[resp].(*ast.StructType)
		if !ok {
			t.Errorf("%s: no such struct", resp)
			continue
		}
		var field *ast.Field
		for _, fl := range st.Fields.List {
			if len(fl.Names) == 1 && fl.Names[0].Name == fmt.Sprintf("JSON%d", e.status) {
				field = fl
			}
		}
		if field == nil {
			t.Errorf("%s: no such field", where)
			continue
		}
		checkError(where, field.Type)
	}
}

// codegenTypeScript generates TypeScript types with openapi-typescript and
// has a strict tsc check that every error body of errs is the Error
// narrowed to its status (a number literal) and codes (string literals),
// never any or unknown.
func codegenTypeScript(t *testing.T, spec string, errs []docError) {
	dir := t.TempDir()
	tool(t, dir, 3*time.Minute, nil, "npx", "--yes", "openapi-typescript@"+openapiTSVersion, spec, "-o", "api.d.ts")
	gen, err := os.ReadFile(filepath.Join(dir, "api.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^\s*(code|status)\??: (unknown|any)\b.*$|@enum \{unknown\}`).FindAll(gen, -1); len(m) > 0 {
		t.Errorf("api.d.ts: %d untyped codes or statuses, the first: %s", len(m), bytes.TrimSpace(m[0]))
	}

	var b strings.Builder
	b.WriteString(`import type { components, operations } from "./api";

type IsAny<T> = 0 extends 1 & T ? true : false;
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false;
type Typed<T, Want> = IsAny<T> extends true ? false : unknown extends T ? false : [T] extends [Want] ? true : false;
type Body<O extends keyof operations, S extends keyof operations[O]["responses"]> =
  operations[O]["responses"][S] extends { content: { "application/json": infer B } } ? B : never;

// Every error is an Error: one function takes them all.
export function describe(e: components["schemas"]["Error"]): string {
  return e.status + " " + e.code + ": " + e.message;
}
export const error: [Typed<components["schemas"]["Error"]["code"], string>, Typed<components["schemas"]["Error"]["status"], number>] = [true, true];
`)
	for i, e := range errs {
		codes := make([]string, len(e.codes))
		for j, c := range e.codes {
			codes[j] = strconv.Quote(c)
		}
		fmt.Fprintf(&b, `
type E%[1]d = Body<%[2]q, %[3]d>;
export const e%[1]d: [Equal<E%[1]d["status"], %[3]d>, Equal<E%[1]d["code"], %[4]s>, Typed<E%[1]d["message"], string>] = [true, true, true];
export const d%[1]d = (e: E%[1]d): string => describe(e);
`, i, e.operation, e.status, strings.Join(codes, " | "))
	}
	if err := os.WriteFile(filepath.Join(dir, "check.ts"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tool(t, dir, 3*time.Minute, nil, "npx", "--yes", "--package=typescript@"+typescriptVersion, "--",
		"tsc", "--strict", "--noEmit", "--target", "es2022", "--module", "esnext", "--moduleResolution", "bundler", "check.ts")
}
