// redact.go owns how a database or Redis URL may be shown: its password
// masked, in the URL and in any message that quotes it. Both stores and the
// Redis limiter use it, so it lives with none of them.

package main

import (
	"net/url"
	"strings"
)

// redactDB returns db as it may be shown: a URL (PostgreSQL's, or the
// --redis one) with its password, in the user part or the query, replaced
// by xxxxx; a SQLite path as it is.
func redactDB(db string) string {
	if !strings.Contains(db, "://") {
		return db
	}
	u, hosts, err := parseDBURL(db)
	if err != nil {
		return "(a database URL that does not parse)"
	}
	if q := u.Query(); len(q) > 0 {
		changed := false
		for k := range q {
			if strings.Contains(strings.ToLower(k), "password") {
				q.Set(k, "xxxxx")
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if hosts != "" {
		return strings.Replace(u.Redacted(), hostListStandIn, hosts, 1)
	}
	return u.Redacted()
}

// hostListStandIn stands for a host list in what parseDBURL gives net/url:
// an address in brackets, which net/url never writes in a URL's user
// information (it takes no '[' there).
const hostListStandIn = "[::]"

// parseDBURL parses db as net/url does, except for a host list in libpq's
// form (h1:5432,h2:5433 or [::1]:5432,[::1]:5433), which net/url refuses
// or reads as one host with a bad port: a host part that holds a comma is
// hostListStandIn in u, and hosts is that part as written ("" for one
// host). The host part is where net/url finds it: after the last '@' of
// the authority, which ends at the first '/', '?' or '#'.
func parseDBURL(db string) (u *url.URL, hosts string, err error) {
	if scheme, rest, ok := strings.Cut(db, "://"); ok {
		auth := rest
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			auth = rest[:i]
		}
		at := strings.LastIndexByte(auth, '@') + 1
		if h := auth[at:]; strings.Contains(h, ",") {
			hosts = h
			db = scheme + "://" + auth[:at] + hostListStandIn + rest[len(auth):]
		}
	}
	u, err = url.Parse(db)
	return u, hosts, err
}

// withoutPassword is msg with u's password replaced by xxxxx.
func withoutPassword(msg string, u *url.URL) string {
	if pw, ok := u.User.Password(); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}

// percentEncodeHint ends the messages that refuse a URL for a character
// that should have been percent-encoded.
const percentEncodeHint = "percent-encode the user name and password (@ as %40, / as %2F, ? as %3F, # as %23, : as %3A, % as %25, a space as %20)"
