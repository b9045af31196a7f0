// browser_test.go drives real headless Chromium through chromedp: the
// documentation page at /docs (every operation listed, "Try it out" with a
// key typed into the page, nothing loaded from another origin) and CORS
// from a page on a second origin. They run when PETSTORE_TEST_BROWSER names
// the browser (for instance /usr/bin/chromium), and are skipped otherwise.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// browserEnv names the browser the tests in this file drive.
const browserEnv = "PETSTORE_TEST_BROWSER"

// browserStep bounds each wait on the page: a step takes well under a
// second, so a wait this long means the page will never get there.
const browserStep = 15 * time.Second

// newBrowser starts a fresh headless Chromium for t, with a profile of its
// own and nothing that calls home, and returns the context of its one tab.
// Without PETSTORE_TEST_BROWSER the test is skipped; a browser that does
// not start fails it.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv(browserEnv)
	if path == "" {
		t.Skipf("set %s to a Chromium binary (such as /usr/bin/chromium) to run the browser tests", browserEnv)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), // small /dev/shm in containers
		// No UserDataDir: chromedp gives each browser a fresh temporary
		// profile and removes it when the browser ends, retrying while
		// Chromium's crash handler still writes there (t.TempDir would not).
	)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser and ties it to ctx, so it gets no
	// deadline of its own; a timer cancels it instead.
	timer := time.AfterFunc(30*time.Second, cancel)
	err := chromedp.Do(ctx)
	timer.Stop()
	if err != nil {
		t.Fatalf("start the browser %s=%s: %v", browserEnv, path, err)
	}
	return ctx
}

// browserDo runs steps on the tab of ctx within browserStep.
func browserDo(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, browserStep)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// browserEval evaluates expr in the page (awaiting it when it is a
// promise) and decodes its value into T.
func browserEval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, browserStep)
	defer cancel()
	v, err := chromedp.Run(sctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// browserWait evaluates expr every 25 ms until it is true, failing t
// after browserStep. (chromedp.Poll would build the predicate with new
// Function, which the page's Content-Security-Policy rightly refuses.)
func browserWait(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(browserStep)
	for {
		sctx, cancel := context.WithTimeout(ctx, browserStep)
		ok, err := chromedp.Run(sctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last error: %v)", what, browserStep, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// jsString returns s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pageWatch is what a tab did: every request it made, the ones to another
// origin (which were failed, not sent), and what it wrote to the console.
type pageWatch struct {
	mu       sync.Mutex
	requests []string
	blocked  []string
	console  []chromedp.ConsoleMessage
	expected []string // console errors that the test asked for, as substrings
}

// watchPage intercepts every request of the tab of ctx and lets through
// only those to origin, failing the others as a blocked network would;
// it records those and the console too. Call it before navigating.
func watchPage(t *testing.T, ctx context.Context, origin string) *pageWatch {
	t.Helper()
	w := &pageWatch{}
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	messages := chromedp.Console(ctx)
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{
		Patterns: []*fetch.RequestPattern{{URLPattern: "*"}},
	}); err != nil {
		t.Fatalf("Fetch.enable: %v", err)
	}
	go func() {
		for ev, err := range paused {
			if err != nil {
				return // the tab's context ended
			}
			u := ev.Request.URL
			w.mu.Lock()
			w.requests = append(w.requests, ev.Request.Method+" "+u)
			if p, perr := url.Parse(u); perr != nil || p.Scheme+"://"+p.Host != origin {
				w.blocked = append(w.blocked, u)
				w.mu.Unlock()
				chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
				continue
			}
			w.mu.Unlock()
			chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			w.mu.Lock()
			w.console = append(w.console, m)
			w.mu.Unlock()
		}
	}()
	// Violations also reach the console, but an event listener in the page
	// sees each one whatever the browser logs.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.cspViolations.push(e.violatedDirective + " refused " + (e.blockedURI || "inline") + " at " + e.sourceFile + ":" + e.lineNumber);
});`,
	}); err != nil {
		t.Fatalf("Page.addScriptToEvaluateOnNewDocument: %v", err)
	}
	return w
}

// check fails t for each request to another origin, each console error or
// uncaught exception, and each violation of the Content-Security-Policy.
func (w *pageWatch) check(t *testing.T, ctx context.Context) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, u := range w.blocked {
		t.Errorf("the page asked another origin for %s", u)
	}
	for _, m := range w.console {
		expected := slices.ContainsFunc(w.expected, func(e string) bool { return strings.Contains(m.String(), e) })
		if (m.Type == chromedp.ConsoleError || m.IsException()) && !expected {
			t.Errorf("console %s (%s:%d)", m, m.URL, m.Line+1)
		} else {
			t.Logf("console %s", m)
		}
	}
	for _, v := range browserEval[[]string](t, ctx, "window.cspViolations") {
		t.Errorf("Content-Security-Policy violation: %s", v)
	}
}

// documentOps returns the title of the OpenAPI document ts serves, and
// "METHOD /path" of each of its operations, sorted, as Swagger UI shows
// them.
func documentOps(t *testing.T, ts *testServer) (title string, ops []string) {
	t.Helper()
	r := ts.do(t, "GET", "/v1/openapi.json", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/openapi.json: status = %d, want 200", r.status)
	}
	doc := decode[struct {
		Info  struct{ Title string }                `json:"info"`
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}](t, r)
	for p, item := range doc.Paths {
		for m := range item {
			if slices.Contains([]string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}, m) {
				ops = append(ops, strings.ToUpper(m)+" "+p)
			}
		}
	}
	slices.Sort(ops)
	if len(ops) == 0 {
		t.Fatal("the served document lists no operation")
	}
	return doc.Info.Title, ops
}

// pageOps is the JavaScript that lists the operations Swagger UI shows, as
// documentOps does (a deprecated operation's path has a class of its own).
const pageOps = `[...document.querySelectorAll(".opblock")].map((b) =>
  b.querySelector(".opblock-summary-method").textContent.trim().toUpperCase() + " " +
  b.querySelector(".opblock-summary [data-path]").dataset.path).sort()`

// TestBrowserDocsTryItOut opens /docs as a user would: every operation of
// the served document is listed, a key typed into "Authorize" is sent, and
// "Try it out" on GET /v1/categories gets a 200 from the origin the page
// came from, although the document's servers name another host. Then
// "create a category" with the example body, executed twice, is a 201 and
// a 409 conflict: the page's Idempotency-Key field starts empty, so the
// second is not a replay of the first.
func TestBrowserDocsTryItOut(t *testing.T) {
	ctx := newBrowser(t)
	ts := startServer(t, "--public-url", "https://api.petstore.invalid/v1")
	if r := ts.do(t, "POST", "/v1/categories", ts.key, `{"name":"Cat"}`); r.status != http.StatusCreated {
		t.Fatalf("seed: status = %d, want 201", r.status)
	}
	for i := range 100 { // more than a page of 100, which the page once asked for unasked
		if r := ts.do(t, "POST", "/v1/categories", ts.key, fmt.Sprintf(`{"name":"Cat %d"}`, i+1)); r.status != http.StatusCreated {
			t.Fatalf("seed: status = %d, want 201", r.status)
		}
	}
	_, want := documentOps(t, ts)
	w := watchPage(t, ctx, ts.base)
	start := time.Now()

	browserDo(t, ctx, "open /docs", chromedp.Navigate(ts.base+"/docs"))
	browserWait(t, ctx, "every operation listed", fmt.Sprintf("document.querySelectorAll('.opblock').length >= %d", len(want)))
	if got := browserEval[[]string](t, ctx, pageOps); !slices.Equal(got, want) {
		t.Errorf("the page lists %q,\nthe document %q", got, want)
	}

	browserDo(t, ctx, "authorize",
		chromedp.Click(chromedp.CSS(".scheme-container .btn.authorize")),
		chromedp.SendKeys(chromedp.CSS("#auth-bearer-value"), ts.key),
		chromedp.Click(chromedp.CSS(".modal-ux .auth-btn-wrapper .btn.authorize")),
		chromedp.Click(chromedp.CSS(".modal-ux .btn-done")),
		chromedp.WaitNotPresent(chromedp.CSS(".modal-ux")),
	)
	op := "#operations-categories-listCategories"
	browserDo(t, ctx, "try out GET /v1/categories",
		chromedp.Click(chromedp.CSS(op+" .opblock-summary-control")),
		chromedp.Click(chromedp.CSS(op+" .try-out__btn")),
		chromedp.Click(chromedp.CSS(op+" .execute")),
		chromedp.WaitVisible(chromedp.CSS(op+" .live-responses-table tbody .response-col_status")),
	)
	status := browserEval[string](t, ctx, `document.querySelector("`+op+` .live-responses-table tbody .response-col_status").textContent.trim()`)
	if status != "200" {
		t.Errorf("the page shows status %q, want 200", status)
	}
	reqURL := browserEval[string](t, ctx, `document.querySelector("`+op+` .request-url pre").textContent.trim()`)
	// Nothing typed, nothing sent: no parameter is filled in by the page
	// (DECISIONS.md section 18), so the whole list comes back.
	if u, err := url.Parse(reqURL); err != nil || u.Scheme+"://"+u.Host+u.Path != ts.base+"/v1/categories" || u.RawQuery != "" {
		t.Errorf("the page called %q, want %s/v1/categories with no query (the page's own origin, not --public-url)", reqURL, ts.base)
	}
	body := browserEval[string](t, ctx, `document.querySelector("`+op+` .live-responses-table tbody .response-col_description pre").textContent`)
	if !strings.Contains(body, `"Cat"`) || !strings.Contains(body, `"Cat 100"`) {
		t.Errorf("the page shows the body %.200q, want the whole list, Cat to Cat 100", body)
	}

	op = "#operations-categories-createCategory"
	idemField := op + ` tr[data-param-name="Idempotency-Key"] input`
	browserDo(t, ctx, "try out POST /v1/categories",
		chromedp.Click(chromedp.CSS(op+" .opblock-summary-control")),
		chromedp.Click(chromedp.CSS(op+" .try-out__btn")),
		chromedp.WaitVisible(chromedp.CSS(idemField)),
	)
	if v := browserEval[string](t, ctx, `document.querySelector(`+jsString(idemField)+`).value`); v != "" {
		t.Errorf("the Idempotency-Key field starts as %q, want empty", v)
	}
	statusCell := op + " .live-responses-table tbody .response-col_status"
	for i, want := range []string{"201", "409"} {
		browserDo(t, ctx, "execute POST /v1/categories",
			chromedp.Click(chromedp.CSS(op+" .execute")),
			chromedp.WaitVisible(chromedp.CSS(statusCell)),
		)
		// The last response stays shown until the next one replaces it.
		shown := ""
		for deadline := time.Now().Add(browserStep); shown != want && time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
			shown = browserEval[string](t, ctx, `document.querySelector(`+jsString(statusCell)+`).textContent.trim()`)
		}
		if shown != want {
			headers := browserEval[string](t, ctx, `document.querySelector(`+jsString(op+" .live-responses-table tbody .response-col_description")+`).textContent`)
			t.Fatalf("Execute %d of POST /v1/categories: the page shows %s, want %s; the response: %s", i+1, shown, want, headers)
		}
	}
	w.mu.Lock()
	w.expected = append(w.expected, "status of 409 (Conflict)") // the browser reports the second Execute's answer
	w.mu.Unlock()
	created := ts.do(t, "GET", "/v1/categories", ts.key, "")
	if n := strings.Count(string(created.body), `"name":"Dog"`); n != 1 {
		t.Errorf("after two Executes the list has %d Dogs, want 1: %s", n, created.body)
	}
	t.Logf("page open, authorized and tried in %v", time.Since(start).Round(time.Millisecond))
	w.check(t, ctx)
}

// TestBrowserDocsOffline opens /docs in a browser that can reach nothing
// but the server: the page renders from the server alone, asks nothing of
// any other origin, and meets no CSP violation and no console error, in a
// handful of requests.
func TestBrowserDocsOffline(t *testing.T) {
	ctx := newBrowser(t)
	ts := startServer(t)
	title, want := documentOps(t, ts)
	w := watchPage(t, ctx, ts.base)

	browserDo(t, ctx, "open /docs", chromedp.Navigate(ts.base+"/docs"))
	browserWait(t, ctx, "every operation listed", fmt.Sprintf("document.querySelectorAll('.opblock').length >= %d", len(want)))
	browserWait(t, ctx, "the title shown", `document.querySelector(".info .title")?.textContent.includes(`+jsString(title)+`)`)
	// The stylesheet applied: Swagger UI's own rules, not the browser's.
	if font := browserEval[string](t, ctx, `getComputedStyle(document.querySelector(".swagger-ui .info .title")).fontFamily`); !strings.Contains(font, "sans-serif") {
		t.Errorf("title font = %q: swagger-ui.css not applied", font)
	}
	w.check(t, ctx)

	w.mu.Lock()
	defer w.mu.Unlock()
	var got []string
	for _, r := range w.requests {
		got = append(got, strings.Replace(r, ts.base, "", 1))
	}
	slices.Sort(got)
	wantReqs := []string{"GET /docs", "GET /docs/docs.js", "GET /docs/swagger-ui-bundle.js", "GET /docs/swagger-ui.css", "GET /v1/openapi.json"}
	if !slices.Equal(got, wantReqs) {
		t.Errorf("the page made the requests %q, want %q", got, wantReqs)
	}
}

// TestBrowserCORS calls the API with fetch and a key from a page on a
// second origin, which --cors-origins allows: the preflight passes, and the
// page reads the rate-limit headers. A page on a third origin is refused.
func TestBrowserCORS(t *testing.T) {
	ctx := newBrowser(t)
	blank := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!doctype html><title>another origin</title>")
	})
	app := httptest.NewServer(blank)
	t.Cleanup(app.Close)
	other := httptest.NewServer(blank)
	t.Cleanup(other.Close)
	ts := startServer(t, "--cors-origins", app.URL)

	type result struct {
		Status    int    `json:"status"`
		Limit     string `json:"limit"`
		Remaining string `json:"remaining"`
		RequestID string `json:"requestId"`
		Body      string `json:"body"`
		Error     string `json:"error"`
	}
	call := func(origin, method, body string) result {
		t.Helper()
		browserDo(t, ctx, "open "+origin, chromedp.Navigate(origin+"/"))
		init := `{method: ` + jsString(method) + `, headers: {Authorization: "Bearer " + ` + jsString(ts.key) + `}}`
		if body != "" {
			init = `{method: ` + jsString(method) + `, body: ` + jsString(body) + `, headers: {Authorization: "Bearer " + ` + jsString(ts.key) + `, "Content-Type": "application/json"}}`
		}
		return browserEval[result](t, ctx, `(async () => {
  try {
    const r = await fetch(`+jsString(ts.base+"/v1/categories")+`, `+init+`);
    return {status: r.status, limit: r.headers.get("X-RateLimit-Limit") ?? "", remaining: r.headers.get("X-RateLimit-Remaining") ?? "", requestId: r.headers.get("X-Request-Id") ?? "", body: await r.text(), error: ""};
  } catch (e) {
    return {status: 0, limit: "", remaining: "", requestId: "", body: "", error: String(e)};
  }
})()`)
	}

	created := call(app.URL, "POST", `{"name":"Cat"}`)
	if created.Status != http.StatusCreated || created.Error != "" {
		t.Fatalf("POST from %s: %+v, want 201", app.URL, created)
	}
	listed := call(app.URL, "GET", "")
	if listed.Status != http.StatusOK || !strings.Contains(listed.Body, `"Cat"`) {
		t.Fatalf("GET from %s: %+v, want 200 with Cat", app.URL, listed)
	}
	for _, r := range []result{created, listed} {
		// A business key's bucket refills a token every 60 ms, so the count
		// need not go down between two calls; it is below the limit after one.
		limit, err1 := strconv.Atoi(r.Limit)
		remaining, err2 := strconv.Atoi(r.Remaining)
		if err1 != nil || err2 != nil || remaining < 0 || remaining >= limit {
			t.Errorf("X-RateLimit-Limit %q, X-RateLimit-Remaining %q read by the page: want counts, remaining below the limit", r.Limit, r.Remaining)
		}
		if r.RequestID == "" {
			t.Errorf("X-Request-Id not readable by the page")
		}
	}

	refused := call(other.URL, "GET", "")
	if refused.Error == "" {
		t.Errorf("GET from %s, an origin not in --cors-origins: %+v, want fetch refused", other.URL, refused)
	}
}

// TestBrowserPatternsAsECMAScript reads the patterns of the served
// document in the browser's own JavaScript, as JSON Schema 2020-12 reads
// them (ECMA-262, u flag), and holds each answer to the server's: every
// code point of the name rules' tables alone, inside a name and at its
// edges, names at the length bound in white space, and Idempotency-Keys
// of both forms at and past theirs. Go's regexp reads them alike
// (TestNamePatternMatchesValidName, TestIdemKeyPatternMatchesServer).
func TestBrowserPatternsAsECMAScript(t *testing.T) {
	ctx := newBrowser(t)
	ts := startServer(t)
	type sample struct {
		Pattern string `json:"pattern"` // "name" or "key"
		Value   string `json:"value"`
		want    bool
	}
	var samples []sample
	addName := func(v string) {
		_, err := validName("name", &v)
		samples = append(samples, sample{"name", v, err == nil})
	}
	addKey := func(v string) {
		_, _, err := idempotencyKey(http.Header{"Idempotency-Key": {v}})
		samples = append(samples, sample{"key", v, err == nil})
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.In(r, nameRuleTables...) {
			s := string(r)
			addName(s)
			addName("a" + s + "b")
			addName(" " + s + "b\u3000")
		}
	}
	x := strings.Repeat
	for _, v := range []string{"Dog", "\u2764\ufe0f", "\U0001F600", "a\U000E0100", x("x", 100), x("x", 101), " " + x("x", 100) + "\u2029", "\t" + x("x", 101), x("\U0001F600", 100)} {
		addName(v)
	}
	for _, v := range []string{"abc", `"abc"`, `"a\"b"`, `"a\\b"`, `a"b`, `"a"b`, `"a\b"`, `""`, x("x", 255), x("x", 256), `"` + x(`\"`, 255) + `"`, `"` + x("x", 256) + `"`, "é"} {
		addKey(v)
	}
	in, err := json.Marshal(samples)
	if err != nil {
		t.Fatal(err)
	}
	browserDo(t, ctx, "open /docs", chromedp.Navigate(ts.base+"/docs"))
	got := browserEval[[]bool](t, ctx, `(async () => {
  const doc = await (await fetch("/v1/openapi.json")).json();
  const re = {
    name: new RegExp(doc.components.schemas.NewCategory.properties.name.pattern, "u"),
    key: new RegExp(doc.components.parameters["Idempotency-Key"].schema.pattern, "u"),
  };
  return `+string(in)+`.map((s) => re[s.pattern].test(s.value));
})()`)
	if len(got) != len(samples) {
		t.Fatalf("%d answers for %d samples", len(got), len(samples))
	}
	wrong := 0
	for i, s := range samples {
		if got[i] != s.want {
			if wrong++; wrong <= 20 {
				t.Errorf("%s %+q: JavaScript's RegExp says %v, the server %v", s.Pattern, s.Value, got[i], s.want)
			}
		}
	}
	t.Logf("%d samples", len(samples))
}
