// postgres_url.go owns the reading of a postgres:// URL before the driver
// gets it: that net/url (which redactDB masks the password by) and the
// driver read it alike, libpq's host lists included.

package main

import "strings"

// checkPostgresURL refuses, as bad usage, a postgres:// URL that does not
// parse, or that Go's URL parser (which redactDB masks by) and the driver
// read differently (pgURLReadsAlike). A host list in libpq's form is taken
// (parseDBURL), IPv6 addresses and all. Its messages quote no part of the
// URL: the part one parser takes for a host or a database may be what the
// user meant as the password.
func checkPostgresURL(db string) error {
	if _, _, err := parseDBURL(db); err != nil {
		// Not url.Parse's words: they quote a part of the URL, which may
		// be a part of the password ("invalid port \":s3cr\"").
		return usagef("--db: the PostgreSQL URL does not parse; %s", percentEncodeHint)
	}
	if !pgURLReadsAlike(db) {
		return usagef("--db: the PostgreSQL URL reads two ways (an @, /, ?, # or space in the password, user name or database name); %s", percentEncodeHint)
	}
	return nil
}

// pgURLReadsAlike reports whether Go's net/url and the driver split the
// postgres:// URL db into the same user information, hosts and database,
// and no '@' or space is left in the database. The driver (pgconn's
// parse_url.go) reads a URL as libpq does: the user information ends at the
// first '@' before any '/', the host list at the first '/' or '?' outside
// an IPv6 address's brackets, and '#' is an ordinary character. net/url
// cuts a fragment at the first '#', then a query at the first '?'; the
// authority ends at the first '/', and the user information at its last
// '@'. So 'postgres://u:p@ss@h/db' is user u at host ss@h to the driver,
// and 'postgres://u:12/34@h/db' is database 34@h/db to both.
func pgURLReadsAlike(db string) bool {
	_, rest, _ := strings.Cut(db, "://")
	if strings.Contains(rest, "#") {
		return false
	}
	auth := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		auth = rest[:i]
	}
	goUser, goHosts := "", auth
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		goUser, goHosts = auth[:i+1], auth[i+1:]
	}
	drvUser, p := "", rest
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		drvUser, p = p[:i+1], p[i+1:]
	}
	drvHosts, p := pgLibpqHostList(p)
	if goUser != drvUser || goHosts != drvHosts {
		return false
	}
	path, _, _ := strings.Cut(p, "?")
	return !strings.ContainsAny(path, "@ ")
}

// pgLibpqHostList splits p, a URL after its user information, into its
// comma-separated host[:port] list and the rest, as libpq does.
func pgLibpqHostList(p string) (hosts, rest string) {
	i := 0
	for {
		if i < len(p) && p[i] == '[' {
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return p, ""
			}
			i += end + 1
		} else if j := strings.IndexAny(p[i:], ":/?,"); j >= 0 {
			i += j
		} else {
			i = len(p)
		}
		if i < len(p) && p[i] == ':' {
			if j := strings.IndexAny(p[i:], "/?,"); j >= 0 {
				i += j
			} else {
				i = len(p)
			}
		}
		if i < len(p) && p[i] == ',' {
			i++
			continue
		}
		return p[:i], p[i:]
	}
}
