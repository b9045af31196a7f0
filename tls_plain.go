// tls_plain.go owns the plain HTTP listener beside HTTPS (--http-addr,
// DECISIONS.md section 13): ACME's HTTP-01 challenges, a 308 to https for
// every path outside the API, and a JSON 403 for the API's paths.

package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// plainRoute is the route of every answer of the plain listener, in its
// log line and in the metrics' route label.
const plainRoute = "plain"

// plainHandler is what the plain listener serves. Its answers are logged
// as the API's are, on the budget of lines that anyone can cause
// (logRequests: none of them is an operation's answer to a valid key), and
// carry an X-Request-Id and nosniff; they have no rate-limit headers, as
// nothing here is limited.
func plainHandler(cfg serveConfig, certs certSource, reqLog *requestLog, m *serverMetrics, logger *slog.Logger) http.Handler {
	target := newHTTPSTarget(cfg)
	inner := certs.challenges(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dest := target.url(r)
		if isAPIPath(r.URL.Path) || isAPIPath(path.Clean("/"+r.URL.Path)) { // as a client may resolve ".." too
			// No redirect: a client that follows it would not notice that
			// it sent its key in clear text, and would go on doing so.
			writeError(w, r, errorf("forbidden", "the API is served over HTTPS only, at %s; this request came over plain HTTP, unencrypted, with any key it carried",
				clipField(dest)))
			return
		}
		w.Header().Set("Location", dest)
		w.WriteHeader(http.StatusPermanentRedirect) // 308 keeps the method and the body, as 301 does not
	}))
	return chain(inner,
		withRequestID,                 // every answer has an id, and nosniff
		logRequests(reqLog, m),        // one log line, on the budget, and the metrics
		recoverPanics(reqLog, logger), // a panic is a 500, never net/http's unbudgeted stack trace
		notePlainRoute,                // the route of the log line and the metrics
	) // then ACME's challenges, then the 403 or the redirect
}

// notePlainRoute names the plain listener's route for the log and the
// metrics.
func notePlainRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st := stateOf(r); st != nil {
			st.pattern = plainRoute
		}
		next.ServeHTTP(w, r)
	})
}

// httpsTarget is where the plain listener points: the hosts a redirect may
// name and the https port.
type httpsTarget struct {
	hosts []string // --public-url's host first, then the ACME domains
	port  string   // --public-url's port; "" for 443
}

func newHTTPSTarget(cfg serveConfig) httpsTarget {
	var t httpsTarget
	if u, err := url.Parse(cfg.publicURL); err == nil { // validate checked it
		t.hosts = append(t.hosts, u.Hostname())
		if t.port = u.Port(); t.port == "443" {
			t.port = ""
		}
	}
	t.hosts = append(t.hosts, cfg.acmeDomains...)
	return t
}

// url returns the https URL of r's path and query. Its host is r's Host
// (port left out) when that is one of ours, in our spelling, else
// --public-url's: a request naming any other host is never sent there (no
// open redirect), and nothing of the Host header reaches the answer.
func (t httpsTarget) url(r *http.Request) string {
	host := t.hosts[0]
	asked := r.Host
	if h, _, err := net.SplitHostPort(asked); err == nil {
		asked = h
	}
	asked = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(asked, "["), "]"), ".")
	for _, h := range t.hosts {
		if strings.EqualFold(asked, h) {
			host = h
			break
		}
	}
	if t.port != "" {
		host = net.JoinHostPort(host, t.port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]" // an IPv6 address
	}
	// The path as the client sent it; "*" (OPTIONS *) and a CONNECT's
	// authority are no path: they go to the root. The host always comes
	// first, so a path such as //evil.example stays a path.
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, "/") {
		p = "/"
	}
	u := "https://" + host + p
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		u += "?" + r.URL.RawQuery
	}
	return u
}
