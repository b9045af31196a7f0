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
	u, err := url.Parse(db)
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
	return u.Redacted()
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
