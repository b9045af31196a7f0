// tls_files.go owns HTTPS from a certificate pair's files (--tls-cert,
// --tls-key): loading it, and loading it again when the files change or
// on SIGHUP.

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"
)

// fileCerts serves the pair that its files last held in a form that
// loaded.
type fileCerts struct {
	certFile, keyFile string
	log               *slog.Logger
	cur               atomic.Pointer[tls.Certificate]
}

func newFileCerts(certFile, keyFile string, logger *slog.Logger) (certSource, error) {
	c := &fileCerts{certFile: certFile, keyFile: keyFile, log: logger}
	cert, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(cert)
	return c, nil
}

// load reads the pair; it says which files failed, never what they hold.
func (c *fileCerts) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s and --tls-key %s: %w", c.certFile, c.keyFile, err)
	}
	return &cert, nil
}

func (c *fileCerts) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

func (c *fileCerts) run(ctx context.Context) {}

func (c *fileCerts) reload() {
	cert, err := c.load()
	if err != nil {
		c.log.Warn("certificate files did not load; the old pair is kept", "err", err)
		return
	}
	c.cur.Store(cert)
	c.log.Info("certificate files loaded", "cert", c.certFile, "not_after", cert.Leaf.NotAfter)
}

func (c *fileCerts) waiting() string { return "" }

func (c *fileCerts) expiries() map[string]time.Time {
	leaf := c.cur.Load().Leaf
	name := leaf.Subject.CommonName
	if len(leaf.DNSNames) > 0 {
		name = leaf.DNSNames[0]
	}
	return map[string]time.Time{name: leaf.NotAfter}
}

func (c *fileCerts) challenges(next http.Handler) http.Handler { return next }

func (c *fileCerts) nextProtos() []string { return nil }
