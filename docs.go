// docs.go owns the documentation page at /docs: Swagger UI on the served
// OpenAPI document, from files embedded in the binary (docsui/; fetch.sh
// there reproduces the vendored ones), loading nothing from another origin.

package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed docsui/index.html docsui/docs.js docsui/swagger-ui-bundle.js.gz docsui/swagger-ui.css.gz
//go:embed docsui/LICENSE docsui/NOTICE docsui/swagger-ui-bundle.js.LICENSE.txt
var docsFiles embed.FS

// docsCSP lets the page load from its own origin only: scripts, styles,
// the document and the calls of "Try it out" alike. Swagger UI's stylesheet
// draws its icons as data: images; no inline script or style is needed
// (TestBrowserDocsOffline reports any violation). frame-ancestors keeps
// the page, where a key is typed, out of other sites' frames.
const docsCSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// docsAssetTable is every file of the page, by the name it is served as
// under /docs/; the page itself is "", served at /docs (a {file} wildcard
// never matches an empty name).
var docsAssetTable = []struct{ name, file, contentType string }{
	{"", "docsui/index.html", "text/html; charset=utf-8"},
	{"docs.js", "docsui/docs.js", "text/javascript; charset=utf-8"},
	{"swagger-ui-bundle.js", "docsui/swagger-ui-bundle.js.gz", "text/javascript; charset=utf-8"},
	{"swagger-ui.css", "docsui/swagger-ui.css.gz", "text/css; charset=utf-8"},
	{"LICENSE", "docsui/LICENSE", "text/plain; charset=utf-8"},
	{"NOTICE", "docsui/NOTICE", "text/plain; charset=utf-8"},
	{"swagger-ui-bundle.js.LICENSE.txt", "docsui/swagger-ui-bundle.js.LICENSE.txt", "text/plain; charset=utf-8"},
}

// docsAsset is one file of the page as it is served.
type docsAsset struct {
	contentType string
	stored      []byte // gzip when gzipped, else the file itself
	gzipped     bool
	etag        string                 // a hash of the stored bytes; the gzip answer's adds -gzip
	plain       func() ([]byte, error) // the identity bytes, decompressed on first need
}

// docsRoutes returns the routes of the documentation page, and a redirect
// of /docs/, as people type it, to the page. None needs a key; the files
// are read and hashed on the first request, so start-up does not wait for
// them. Each file sent counts against its client's budget (a 304 does
// not), and its answer must be written within docsWriteTimeout (at most
// writeTimeout).
func docsRoutes(budget *docsBudget, proxies proxyTrust, writeTimeout time.Duration) []route {
	assets := sync.OnceValues(loadDocsAssets)
	sd := &docsServer{assets: assets, budget: budget, proxies: proxies, deadline: min(docsWriteTimeout, writeTimeout)}
	return []route{
		{pattern: "GET /docs", handler: sd.serve(func(*http.Request) string { return "" })},
		{pattern: "GET /docs/{$}", handler: http.HandlerFunc(redirectToDocs)},
		{pattern: "GET /docs/{file}", handler: sd.serve(func(r *http.Request) string { return r.PathValue("file") })},
	}
}

// docsWriteTimeout bounds the writing of one file of the page: the
// largest, the gzipped bundle, is about 400 KB, 3 s at 1 Mbit/s. An
// answer that the client does not read holds its handler and its stream
// that long, not --write-timeout's 60 s (DECISIONS.md section 21).
const docsWriteTimeout = 10 * time.Second

// docsServer serves the files of the page.
type docsServer struct {
	assets   func() (map[string]*docsAsset, error)
	budget   *docsBudget
	proxies  proxyTrust
	deadline time.Duration
}

// redirectToDocs answers /docs/ with a permanent redirect to /docs, the
// query kept, and no body (http.Redirect would write an HTML one).
func redirectToDocs(w http.ResponseWriter, r *http.Request) {
	loc := "/docs"
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusPermanentRedirect)
}

// loadDocsAssets reads the embedded files into what docsServer.serve needs.
func loadDocsAssets() (map[string]*docsAsset, error) {
	assets := make(map[string]*docsAsset, len(docsAssetTable))
	for _, e := range docsAssetTable {
		b, err := docsFiles.ReadFile(e.file)
		if err != nil {
			return nil, fmt.Errorf("embedded %s: %w", e.file, err)
		}
		sum := sha256.Sum256(b)
		a := &docsAsset{contentType: e.contentType, stored: b, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
		a.plain = func() ([]byte, error) { return a.stored, nil }
		if strings.HasSuffix(e.file, ".gz") {
			a.gzipped = true
			a.plain = sync.OnceValues(func() ([]byte, error) { return gunzip(b) })
		}
		assets[e.name] = a
	}
	return assets, nil
}

// gunzip returns the decompressed content of b.
func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	return out, nil
}

// serve answers with the asset that name picks: the stored gzip bytes to
// a client that accepts gzip, the decompressed ones to any other, each
// with its own ETag, revalidated on every use (no-cache) so that a new
// binary's page never meets an old cached bundle.
func (sd *docsServer) serve(name func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		all, err := sd.assets()
		if err != nil {
			writeError(w, r, err)
			return
		}
		a, ok := all[name(r)]
		if !ok {
			writeError(w, r, errorf("not_found", "no such path: %s", clipField(r.URL.Path)))
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", docsCSP)
		h.Set("Cache-Control", "no-cache")
		body, etag := a.stored, a.etag
		if a.gzipped {
			h.Add("Vary", "Accept-Encoding") // Add: CORS may have put Origin there
			if acceptsGzip(r.Header["Accept-Encoding"]) {
				h.Set("Content-Encoding", "gzip")
				etag = strings.TrimSuffix(etag, `"`) + `-gzip"`
			} else if body, err = a.plain(); err != nil {
				writeError(w, r, err)
				return
			}
		}
		h.Set("ETag", etag)
		if etagMatches(r.Header["If-None-Match"], etag) {
			h.Del("Content-Encoding")
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if retry, ok := sd.budget.take(connAddrKey(sd.proxies.clientAddr(r))); !ok {
			h.Del("Content-Encoding")
			h.Del("ETag")
			h.Set("Retry-After", strconv.Itoa(retry))
			writeError(w, r, errorf("rate_limited", "more than %d files of /docs a minute from your address; retry after %d s", docsPerMinute, retry))
			return
		}
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(sd.deadline))
		h.Set("Content-Type", a.contentType)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			w.Write(body)
		}
	})
}

// acceptsGzip reports whether Accept-Encoding lines allow gzip: named
// (or x-gzip) with a q above 0, or not named while "*" is.
func acceptsGzip(lines []string) bool {
	star := false
	for _, line := range lines {
		for item := range strings.SplitSeq(line, ",") {
			coding, params, _ := strings.Cut(item, ";")
			ok := qAbove0(params)
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				return ok
			case "*":
				star = ok
			}
		}
	}
	return star
}

// qAbove0 reports whether the parameters of an Accept-Encoding item give
// it a weight above 0 (none means 1; one that does not parse, 0).
func qAbove0(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.EqualFold(k, "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return err == nil && q > 0
		}
	}
	return true
}

// docsPerMinute is the files of /docs that one client address (an IPv6
// /64) may fetch in a minute, 304s not counted: a page load is four of
// them (the page, its script, its stylesheet and the bundle; the fifth
// request, the document, is under /v1 and --anon-rpm), so twenty-five
// loads a minute. It is not --anon-rpm: a page load would take a
// twelfth of it (DECISIONS.md section 21).
const docsPerMinute = 100

// docsBudgetAddrs bounds the addresses counted in one minute: past it, a
// new address waits for the next minute, so a flood from many addresses
// costs at most this many entries.
const docsBudgetAddrs = 1 << 16

// docsBudget counts the files of /docs sent to each address in the
// current minute of its clock (fixed windows: simple, and a client can
// at most double the rate across a minute's turn).
type docsBudget struct {
	now    func() time.Time
	mu     sync.Mutex
	minute int64
	sent   map[netip.Addr]int
}

func newDocsBudget(now func() time.Time) *docsBudget {
	return &docsBudget{now: now, sent: map[netip.Addr]int{}}
}

// take counts one file for addr, or says in how many seconds the next
// minute starts when its budget is spent.
func (b *docsBudget) take(addr netip.Addr) (retryAfter int, ok bool) {
	t := b.now().Unix()
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := t / 60; m != b.minute {
		b.minute = m
		clear(b.sent)
	}
	n, seen := b.sent[addr]
	if n >= docsPerMinute || !seen && len(b.sent) >= docsBudgetAddrs {
		return int(60 - t%60), false
	}
	b.sent[addr] = n + 1
	return 0, true
}
