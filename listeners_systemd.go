// listeners_systemd.go owns socket activation (sd_listen_fds(3)): the
// listening sockets that systemd, or anything speaking its protocol, passes
// to serve as fds 3, 4, ... with LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES.
// The sockets outlive the process, so a restart refuses no connection
// (DECISIONS.md section 14).
//
// The protocol is a few lines, written here rather than taken from
// go-systemd's activation package: that package ignores a malformed
// LISTEN_FDS and names it does not know without a word, and checks nothing
// about the sockets, so the checks below would be needed beside it anyway.

package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// listenFDsStart is SD_LISTEN_FDS_START: the first passed fd.
const listenFDsStart = 3

// socketRoles are the names a passed socket may have (FileDescriptorName=
// in its socket unit), in the order serve's listeners are listed.
var socketRoles = []string{"api", "http", "admin"}

// socketRolesOf returns the listener each of n passed sockets is for, from
// LISTEN_FDNAMES (names, colon-separated; empty when unset). A lone socket
// named http or admin is that listener's, and one with any other name or
// none is the API's (systemd names an fd after its socket unit unless told
// otherwise); with more, each must be named api, http or admin, each name
// once.
func socketRolesOf(n int, names string) ([]string, error) {
	if n > len(socketRoles) {
		return nil, fmt.Errorf("systemd passed %d sockets (LISTEN_FDS=%d); serve takes at most %d, named %s", n, n, len(socketRoles), strings.Join(socketRoles, ", "))
	}
	var list []string
	if names != "" {
		list = strings.Split(names, ":")
		if len(list) != n {
			return nil, fmt.Errorf("systemd passed %d sockets but %d names (LISTEN_FDNAMES=%q)", n, len(list), names)
		}
	}
	if n == 1 {
		if list != nil && (list[0] == "http" || list[0] == "admin") {
			return []string{list[0]}, nil
		}
		return []string{"api"}, nil
	}
	roles := make([]string, n)
	for i := range n {
		name := ""
		if list != nil {
			name = list[i]
		}
		known := false
		for _, r := range socketRoles {
			known = known || name == r
		}
		if !known {
			return nil, fmt.Errorf("systemd passed %d sockets, and socket %d is named %q (LISTEN_FDNAMES=%q): with more than one, name each api, http or admin with FileDescriptorName= in its socket unit", n, i+1, name, names)
		}
		for _, prev := range roles[:i] {
			if prev == name {
				return nil, fmt.Errorf("systemd passed two sockets named %q (LISTEN_FDNAMES=%q): each of api, http and admin at most once", name, names)
			}
		}
		roles[i] = name
	}
	return roles, nil
}

// systemdListeners returns the listeners systemd passed to this process, or
// none when LISTEN_PID is not its pid (the variables were meant for another
// process: a parent that did not unset them). Either way it unsets the
// variables, so that no child takes them for its own, and marks the passed
// fds close-on-exec. cfg says whether a socket named http has a use.
//
// net.FileListener serves each socket from a duplicate fd that it sets to
// non-blocking mode: O_NONBLOCK belongs to the open file description that
// the duplicate shares with systemd's fd (and with a previous process's,
// during a restart), so the socket becomes non-blocking for every holder.
// That is what Go's own listeners need: accept waits in the poller, and
// closing the listener at shutdown ends it at once. Nothing here sets it
// back to blocking (os.NewFile of a non-blocking fd and net.FileListener's
// Fd call leave the mode alone), so a previous process still accepting
// during the restart is never left blocked in accept(2).
func systemdListeners(cfg serveConfig) (serveListeners, error) {
	pidVar, fdsVar, namesVar := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_FDNAMES")
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
	if pidVar == "" && fdsVar == "" {
		return serveListeners{}, nil
	}
	pid, err := strconv.Atoi(pidVar)
	if err != nil {
		return serveListeners{}, fmt.Errorf("LISTEN_PID=%q is not a process id (socket activation, sd_listen_fds(3))", pidVar)
	}
	if pid != os.Getpid() {
		return serveListeners{}, nil
	}
	n, err := strconv.Atoi(fdsVar)
	if err != nil || n < 0 {
		return serveListeners{}, fmt.Errorf("LISTEN_FDS=%q is not a number of sockets (socket activation, sd_listen_fds(3))", fdsVar)
	}
	if n == 0 {
		return serveListeners{}, nil
	}
	roles, err := socketRolesOf(n, namesVar)
	if err != nil {
		return serveListeners{}, err
	}
	var l serveListeners
	for i, role := range roles {
		fd := listenFDsStart + i
		unix.CloseOnExec(fd)
		ln, err := passedListener(fd, role)
		if err != nil {
			l.close()
			return serveListeners{}, err
		}
		switch role {
		case "api":
			l.api = ln
		case "http":
			l.http = ln
		case "admin":
			l.admin = ln
		}
		l.fromSystemd = append(l.fromSystemd, role)
	}
	if l.http != nil && cfg.tlsCert == "" && cfg.acmeDomainsList == "" {
		l.close()
		return serveListeners{}, fmt.Errorf("systemd passed a socket named http, the plain listener, which needs --tls-cert or --acme-domains: it redirects to HTTPS")
	}
	return l, nil
}

// passedListener checks that fd is a listening TCP socket and returns a
// listener on it. It refuses the mistakes a socket unit can make: Accept=yes
// (a connection is passed, not a listener), ListenDatagram=, or a Unix
// socket (client addresses are what the limits count by).
func passedListener(fd int, role string) (net.Listener, error) {
	what := fmt.Sprintf("fd %d (%s) from systemd", fd, role)
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return nil, fmt.Errorf("%s is not a socket: %w", what, err)
	}
	if domain != unix.AF_INET && domain != unix.AF_INET6 {
		return nil, fmt.Errorf("%s is not a TCP socket (ListenStream= takes an address or a port here, not a path)", what)
	}
	if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
		return nil, fmt.Errorf("%s is not a stream socket (use ListenStream=)", what)
	}
	if on, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || on != 1 {
		return nil, fmt.Errorf("%s is not listening (the socket unit needs Accept=no, its default)", what)
	}
	f := os.NewFile(uintptr(fd), "LISTEN_FD_"+strconv.Itoa(fd))
	defer f.Close() // the listener has a duplicate of its own
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return ln, nil
}
