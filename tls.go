// tls.go owns HTTPS (DECISIONS.md section 13): the command line's TLS
// rules, where serve's certificates come from (a pair of files,
// tls_files.go, or an ACME CA, acme.go), and the API listener's TLS
// configuration.

package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/idna"
)

// defaultACMEDirectory is Let's Encrypt's production directory.
const defaultACMEDirectory = "https://acme-v02.api.letsencrypt.org/directory"

// certSource is where the API listener's certificates come from.
type certSource interface {
	// getCertificate is the tls.Config's GetCertificate.
	getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// run does the source's background work until ctx ends: watching the
	// files, or obtaining and renewing certificates.
	run(ctx context.Context)
	// reload reads the source again, on SIGHUP.
	reload()
	// waiting says why no certificate can be served yet, or "" once one can
	// (/readyz is 503 until then).
	waiting() string
	// expiries returns each served certificate's NotAfter by name, for the
	// metrics.
	expiries() map[string]time.Time
	// challenges answers ACME's HTTP-01 requests on the plain listener and
	// passes the rest to next; a source without ACME returns next.
	challenges(next http.Handler) http.Handler
	// nextProtos are ALPN protocols the source answers itself (ACME's
	// TLS-ALPN-01), besides h2 and http/1.1.
	nextProtos() []string
}

// newCertSource returns the source that cfg names, or nil for plain HTTP.
// A pair of files that does not load is an error (exit 1).
func newCertSource(ctx context.Context, cfg serveConfig, store acmeStore, logger *slog.Logger) (certSource, error) {
	switch {
	case cfg.tlsCert != "":
		return newFileCerts(cfg.tlsCert, cfg.tlsKey, logger)
	case len(cfg.acmeDomains) > 0:
		return newACMECerts(ctx, cfg, store, logger)
	}
	return nil, nil
}

// writeByteTimeout closes an HTTP/2 connection to which nothing could be
// written for that long (a client that reads nothing, its TCP window
// full): Go's server then holds every stream of it, and their handlers,
// blocked, and a stream's write deadline cannot reset a stream whose
// RST_STREAM cannot be written either.
const writeByteTimeout = 10 * time.Second

// maxStreams bounds the concurrent HTTP/2 streams of a connection
// (DECISIONS.md section 21 lowered it from 100): with --max-conns, it
// bounds the streams that the server may hold at once, which
// docs/operations.md's memory bound counts.
const maxStreams = 32

// tls12Suites are the suites TLS 1.2 offers (DECISIONS.md section 17):
// ECDHE with an AEAD cipher, for ECDSA and RSA certificates, as Mozilla's
// "intermediate" profile (which adds DHE suites Go does not implement).
// No CBC suite: they are where TLS 1.2's padding-oracle attacks live, and
// HTTP/2 forbids them. TLS 1.3's suites are Go's, not configurable.
var tls12Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// useTLS makes srv serve HTTPS with certs: HTTP/2 (at most maxStreams
// streams a connection) and HTTP/1.1, TLS 1.2 at least, with tls12Suites.
func useTLS(srv *http.Server, certs certSource) {
	srv.TLSConfig = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   tls12Suites,
		GetCertificate: certs.getCertificate,
		NextProtos:     append([]string{"h2", "http/1.1"}, certs.nextProtos()...),
	}
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxStreams, WriteByteTimeout: writeByteTimeout}
}

// validateTLS checks the TLS and ACME flags against each other, makes the
// domain list, and gives --public-url its https default.
func (cfg *serveConfig) validateTLS() error {
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together: give both or neither")
	}
	if cfg.acmeDomainsList != "" {
		for _, d := range strings.Split(cfg.acmeDomainsList, ",") {
			name, err := checkDomain(strings.TrimSpace(d))
			if err != nil {
				return usagef("--acme-domains: %v", err)
			}
			cfg.acmeDomains = append(cfg.acmeDomains, name)
		}
	}
	acme := len(cfg.acmeDomains) > 0
	switch {
	case cfg.tlsCert != "" && acme:
		return usagef("--tls-cert and --acme-domains exclude each other: give a certificate or ask a CA for one")
	case !acme && (cfg.acmeEmail != "" || cfg.acmeCAFile != "" || cfg.acmeDirectory != defaultACMEDirectory):
		return usagef("--acme-directory, --acme-email and --acme-ca-file need --acme-domains")
	case cfg.httpAddr != "" && cfg.tlsCert == "" && !acme:
		return usagef("--http-addr needs --tls-cert or --acme-domains: the plain listener redirects to HTTPS")
	}
	if cfg.httpAddr != "" {
		if err := checkHostPort(cfg.httpAddr); err != nil {
			return usagef("--http-addr must be host:port or empty, got %q: %v", cfg.httpAddr, err)
		}
	}
	if acme && !strings.HasPrefix(cfg.acmeDirectory, "https://") {
		return usagef("--acme-directory must be an https:// URL, got %q", cfg.acmeDirectory)
	}
	if cfg.acmeEmail != "" && (strings.Count(cfg.acmeEmail, "@") != 1 || strings.ContainsAny(cfg.acmeEmail, " ,<>") ||
		strings.HasPrefix(cfg.acmeEmail, "@") || strings.HasSuffix(cfg.acmeEmail, "@")) {
		return usagef("--acme-email must be one address (name@host), got %q", cfg.acmeEmail)
	}
	if !cfg.publicURLSet {
		switch {
		case acme:
			cfg.publicURL = "https://" + cfg.acmeDomains[0] + "/v1"
		case cfg.tlsCert != "":
			host := "localhost"
			if _, port, err := net.SplitHostPort(cfg.addr); err == nil && port != "443" {
				host = net.JoinHostPort(host, port)
			}
			cfg.publicURL = "https://" + host + "/v1"
		}
	}
	return nil
}

// checkDomain returns name as an ACME CA takes it (lower case, IDNA's
// ASCII form), or says why it is not a host name a certificate can be
// asked for: an IP address, a wildcard, a port or a single label.
func checkDomain(name string) (string, error) {
	if name == "" {
		return "", usagef("an empty name")
	}
	if net.ParseIP(name) != nil || strings.ContainsAny(name, "*:/ ") {
		return "", usagef("%q is not a host name (no IP address, wildcard or port)", name)
	}
	ascii, err := idna.Lookup.ToASCII(strings.TrimSuffix(name, "."))
	if err != nil || !strings.Contains(ascii, ".") {
		return "", usagef("%q is not a host name with at least two labels", name)
	}
	return ascii, nil
}
