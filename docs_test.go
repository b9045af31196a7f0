package main

import (
	"bytes"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDocsPage checks the page at /docs through the real server: no key
// needed, HTML under a Content-Security-Policy of its own origin, no
// inline script, and every file it names served by the server itself.
func TestDocsPage(t *testing.T) {
	ts := startServer(t)
	r := ts.do(t, "GET", "/docs", "", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /docs without a key: status = %d, want 200; %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type = %q, want text/html; charset=utf-8", ct)
	}
	csp := r.header.Get("Content-Security-Policy")
	if csp != docsCSP || !strings.HasPrefix(csp, "default-src 'self';") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy = %q, want %q", csp, docsCSP)
	}
	for _, name := range []string{"X-Content-Type-Options", "ETag", "Cache-Control"} {
		if r.header.Get(name) == "" {
			t.Errorf("%s missing", name)
		}
	}
	if got := r.header.Get("Content-Length"); got != strconv.Itoa(len(r.body)) {
		t.Errorf("Content-Length = %q, body %d bytes", got, len(r.body))
	}

	// Every script has a src (CSP has no 'unsafe-inline'), and every src
	// and href is this server's or data:.
	html := string(r.body)
	if n, m := strings.Count(html, "<script"), strings.Count(html, "<script src="); n == 0 || n != m {
		t.Errorf("%d scripts, %d with a src: want every script from a file", n, m)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(html, -1)
	if len(refs) < 3 {
		t.Fatalf("the page names %d files, want the stylesheet and two scripts", len(refs))
	}
	for _, ref := range refs {
		switch u := ref[1]; {
		case strings.HasPrefix(u, "data:"):
		case strings.HasPrefix(u, "/docs/") && !strings.HasPrefix(u, "//"):
			if a := ts.do(t, "GET", u, "", "", "Accept-Encoding", "gzip"); a.status != http.StatusOK {
				t.Errorf("GET %s (named by the page): status = %d, want 200", u, a.status)
			}
		default:
			t.Errorf("the page names %q, not a file of /docs/", u)
		}
	}

	head := ts.do(t, "HEAD", "/docs", "", "")
	if head.status != http.StatusOK || len(head.body) != 0 || head.header.Get("Content-Length") != r.header.Get("Content-Length") ||
		head.header.Get("Content-Security-Policy") != docsCSP {
		t.Errorf("HEAD /docs: status %d, %d bytes, Content-Length %q, CSP %q; want GET's headers and no body",
			head.status, len(head.body), head.header.Get("Content-Length"), head.header.Get("Content-Security-Policy"))
	}

	// Revalidation: the same tag gets 304 and no body.
	nm := ts.do(t, "GET", "/docs", "", "", "If-None-Match", r.header.Get("ETag"))
	if nm.status != http.StatusNotModified || len(nm.body) != 0 {
		t.Errorf("If-None-Match with the ETag: status = %d, body %d bytes; want 304 and none", nm.status, len(nm.body))
	}
}

// TestDocsAssets checks each file under /docs/: the gzip bytes to a
// client that accepts gzip, the same content decompressed to one that
// does not, each with its own ETag; HEAD as GET without the body.
func TestDocsAssets(t *testing.T) {
	ts := startServer(t)
	for _, a := range docsAssetTable {
		if a.name == "" {
			continue // the page, TestDocsPage
		}
		t.Run(a.name, func(t *testing.T) {
			path := "/docs/" + a.name
			gz := ts.do(t, "GET", path, "", "", "Accept-Encoding", "gzip, deflate, br")
			plain := ts.do(t, "GET", path, "", "", "Accept-Encoding", "identity")
			for _, r := range []response{gz, plain} {
				if r.status != http.StatusOK {
					t.Fatalf("status = %d, want 200; %s", r.status, r.body)
				}
				if ct := r.header.Get("Content-Type"); ct != a.contentType {
					t.Errorf("Content-Type = %q, want %q", ct, a.contentType)
				}
				if r.header.Get("Content-Security-Policy") != docsCSP {
					t.Errorf("Content-Security-Policy = %q", r.header.Get("Content-Security-Policy"))
				}
				if got := r.header.Get("Content-Length"); got != strconv.Itoa(len(r.body)) {
					t.Errorf("Content-Length = %q, body %d bytes", got, len(r.body))
				}
			}
			if ce := plain.header.Get("Content-Encoding"); ce != "" {
				t.Errorf("without gzip: Content-Encoding = %q, want none", ce)
			}
			if len(plain.body) == 0 {
				t.Fatal("empty body")
			}
			stored, err := docsFiles.ReadFile(a.file)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(a.file, ".gz") {
				if ce := gz.header.Get("Content-Encoding"); ce != "" || !bytes.Equal(gz.body, stored) || !bytes.Equal(plain.body, stored) {
					t.Errorf("a file stored as it is: Content-Encoding %q, bodies of %d and %d bytes, want none and the file's %d", ce, len(gz.body), len(plain.body), len(stored))
				}
				return
			}
			if ce := gz.header.Get("Content-Encoding"); ce != "gzip" {
				t.Errorf("with gzip: Content-Encoding = %q, want gzip", ce)
			}
			if !bytes.Equal(gz.body, stored) {
				t.Errorf("with gzip: %d bytes, want the stored %d", len(gz.body), len(stored))
			}
			unzipped, err := gunzip(gz.body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(unzipped, plain.body) {
				t.Errorf("gzip decompressed to %d bytes, identity sent %d: want the same", len(unzipped), len(plain.body))
			}
			for _, r := range []response{gz, plain} {
				if v := r.header.Get("Vary"); v != "Accept-Encoding" {
					t.Errorf("Vary = %q, want Accept-Encoding", v)
				}
			}
			if gz.header.Get("ETag") == plain.header.Get("ETag") {
				t.Errorf("both encodings have the ETag %s: want one each", gz.header.Get("ETag"))
			}
			if r := ts.do(t, "GET", path, "", "", "Accept-Encoding", "gzip;q=0, *"); r.header.Get("Content-Encoding") != "" {
				t.Errorf("gzip;q=0: Content-Encoding = %q, want none", r.header.Get("Content-Encoding"))
			}

			// Each encoding revalidates with its own tag.
			for _, c := range []struct{ enc, etag string }{{"gzip", gz.header.Get("ETag")}, {"identity", plain.header.Get("ETag")}} {
				r := ts.do(t, "GET", path, "", "", "Accept-Encoding", c.enc, "If-None-Match", `"other", `+c.etag)
				if r.status != http.StatusNotModified || len(r.body) != 0 {
					t.Errorf("%s, If-None-Match %s: status = %d, body %d bytes; want 304 and none", c.enc, c.etag, r.status, len(r.body))
				}
			}

			head := ts.do(t, "HEAD", path, "", "", "Accept-Encoding", "gzip")
			if head.status != http.StatusOK || len(head.body) != 0 {
				t.Errorf("HEAD: status = %d, body %d bytes; want 200 and none", head.status, len(head.body))
			}
			for _, name := range []string{"Content-Type", "Content-Length", "Content-Encoding", "ETag"} {
				if got, want := head.header.Get(name), gz.header.Get(name); got != want {
					t.Errorf("HEAD: %s = %q, GET has %q", name, got, want)
				}
			}
		})
	}
}

// TestDocsErrors checks that what is not a file of the page gets the
// JSON errors every other path gets.
func TestDocsErrors(t *testing.T) {
	ts := startServer(t)
	for _, path := range []string{"/docs/nope.js", "/docs/index.html", "/docs/swagger-ui-bundle.js.gz", "/docs/swagger-ui.css.map", "/docs/fetch.sh", "/docs/a/b"} {
		t.Run(path, func(t *testing.T) {
			wantError(t, ts.do(t, "GET", path, "", ""), http.StatusNotFound, "not_found")
		})
	}
	r := ts.do(t, "POST", "/docs", "", "")
	wantError(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
	if allow := r.header.Get("Allow"); allow != "GET, HEAD" {
		t.Errorf("Allow = %q, want GET, HEAD", allow)
	}
}

// TestDocsTrailingSlash: /docs/, as people type it, is a permanent
// redirect to /docs, the query kept, with no body; a method the page does
// not take is still a 405.
func TestDocsTrailingSlash(t *testing.T) {
	ts := startServer(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ method, path, location string }{
		{"GET", "/docs/", "/docs"},
		{"HEAD", "/docs/", "/docs"},
		{"GET", "/docs/?x=1", "/docs?x=1"},
	} {
		r, err := ts.sendVia(noRedirect, c.method, c.path, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusPermanentRedirect || r.header.Get("Location") != c.location || len(r.body) != 0 {
			t.Errorf("%s %s: %d, Location %q, %d bytes; want 308 to %s and no body", c.method, c.path, r.status, r.header.Get("Location"), len(r.body), c.location)
		}
	}
	if r := ts.do(t, "GET", "/docs/", "", ""); r.status != http.StatusOK || r.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("GET /docs/ followed: %d %q, want the page", r.status, r.header.Get("Content-Type"))
	}
	wantError(t, ts.do(t, "POST", "/docs/", "", ""), http.StatusMethodNotAllowed, "method_not_allowed")
}

func TestAcceptsGzip(t *testing.T) {
	tests := []struct {
		header []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip"}, true},
		{[]string{"GZIP"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"gzip, deflate, br, zstd"}, true},
		{[]string{"br", "gzip;q=0.5"}, true},
		{[]string{"identity"}, false},
		{[]string{"br, deflate"}, false},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip; q=0.000"}, false},
		{[]string{"gzip;q=bad"}, false},
		{[]string{"*"}, true},
		{[]string{"*;q=0"}, false},
		{[]string{"gzip;q=0, *"}, false},
		{[]string{"*, gzip;q=0"}, false},
		{[]string{"gzip;level=1"}, true},
	}
	for _, tt := range tests {
		if got := acceptsGzip(tt.header); got != tt.want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", tt.header, got, tt.want)
		}
	}
}

// TestDocsBudget: the files of /docs are on a budget of their own per
// address, docsPerMinute a minute (issue 41), not --anon-rpm: the 101st
// file of a minute is 429 with Retry-After, a 304 costs nothing and is
// still answered, another address is served, and the next minute brings
// the budget back.
func TestDocsBudget(t *testing.T) {
	var c testClock
	c.set(time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC))
	db := testDB(t)
	ts := startServerIn(t, c.context(), db, createKey(t, db, "--plan", "free"), "--anon-rpm", "3")
	first := ts.do(t, "GET", "/docs/docs.js", "", "")
	etag := first.header.Get("ETag")
	for i := 1; i < docsPerMinute; i++ {
		if r := ts.do(t, "GET", "/docs/docs.js", "", ""); r.status != 200 {
			t.Fatalf("file %d of the minute: %d", i+1, r.status)
		}
	}
	r := ts.do(t, "GET", "/docs/docs.js", "", "")
	wantError(t, r, 429, "rate_limited")
	if got := r.header.Get("Retry-After"); got != "50" {
		t.Errorf("Retry-After %q, want 50 (the minute's end)", got)
	}
	if r := ts.do(t, "GET", "/docs/docs.js", "", "", "If-None-Match", etag); r.status != 304 {
		t.Errorf("a revalidation over the budget: %d, want 304", r.status)
	}
	other := clientFrom(t, "127.0.0.2", nil)
	if r, err := ts.sendVia(other, "GET", "/docs", "", ""); err != nil || r.status != 200 {
		t.Errorf("another address: %v %v, want 200", r.status, err)
	}
	c.add(time.Minute)
	if r := ts.do(t, "GET", "/docs/docs.js", "", ""); r.status != 200 {
		t.Errorf("the next minute: %d, want 200", r.status)
	}
}
