// listeners.go owns serve's listening sockets: the API's (--addr), the
// plain listener's (--http-addr) and the admin listener's (--admin-addr),
// bound here unless systemd passed them (listeners_systemd.go).

package main

import (
	"fmt"
	"net"
)

// serveListeners are the sockets serve accepts on; http and admin are nil
// when off.
type serveListeners struct {
	api, http, admin net.Listener
	fromSystemd      []string // the roles (api, http, admin) of those systemd passed
}

// close closes every listener that is open.
func (l serveListeners) close() {
	for _, ln := range []net.Listener{l.api, l.http, l.admin} {
		if ln != nil {
			ln.Close()
		}
	}
}

// openListeners binds the addresses cfg names for the listeners that
// systemd did not pass (in passed): its addresses are ignored for those.
func openListeners(cfg serveConfig, passed serveListeners) (serveListeners, error) {
	l := passed
	for _, b := range []struct {
		ln   *net.Listener
		addr string
		flag string
	}{{&l.api, cfg.addr, ""}, {&l.http, cfg.httpAddr, " (--http-addr)"}, {&l.admin, cfg.adminAddr, " (--admin-addr)"}} {
		if b.addr == "" || *b.ln != nil {
			continue
		}
		ln, err := net.Listen("tcp", b.addr)
		if err != nil {
			l.close()
			return serveListeners{}, fmt.Errorf("listen on %s%s: %w", b.addr, b.flag, unwrapOpError(err))
		}
		*b.ln = ln
	}
	return l, nil
}
