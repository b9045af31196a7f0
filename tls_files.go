// tls_files.go owns HTTPS from a certificate pair's files (--tls-cert,
// --tls-key): loading it at start, and loading it again when the files
// change (a poll) or on SIGHUP, keeping the old pair while a new one does
// not load.

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// certPollInterval is how often the files are looked at: DECISIONS.md
// section 13 wants a change served within a minute at the latest.
const certPollInterval = 10 * time.Second

// certPollKey carries a test's poll interval into serve, through run's
// context, as clockKey carries its clock. main never sets one.
type certPollKey struct{}

// certPollOf is the poll interval ctx carries, or certPollInterval.
func certPollOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(certPollKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return certPollInterval
}

// fileCerts serves the pair that its files last held in a form that
// loaded.
type fileCerts struct {
	certFile, keyFile string
	log               *slog.Logger
	cur               atomic.Pointer[tls.Certificate]

	mu     sync.Mutex // one load at a time: the poll's and SIGHUP's
	tried  pairStamp  // the files as they were when last read, loaded or not
	failed bool       // that read did not load: the poll tries again
}

// fileCerts must stay a certSource: serve takes the API's certificates
// from it (--tls-cert) or from ACME.
var _ certSource = (*fileCerts)(nil)

// fileStamp is what a stat tells of a file's content without reading it:
// a rewrite changes the time or size, a replacement (certbot's symlink
// swap to a new file in its archive) the inode.
type fileStamp struct {
	mtime    time.Time
	size     int64
	dev, ino uint64
}

type pairStamp struct{ cert, key fileStamp }

func newFileCerts(certFile, keyFile string, logger *slog.Logger) (certSource, error) {
	c := &fileCerts{certFile: certFile, keyFile: keyFile, log: logger}
	c.tried, _ = c.stamp()
	cert, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(cert)
	c.logLoaded(cert, "start")
	return c, nil
}

// stamp stats both files, following symlinks: certbot's live/ names are
// links into archive/, and a renewal moves the link.
func (c *fileCerts) stamp() (pairStamp, error) {
	var p pairStamp
	for _, f := range []struct {
		name string
		to   *fileStamp
	}{{c.certFile, &p.cert}, {c.keyFile, &p.key}} {
		fi, err := os.Stat(f.name)
		if err != nil {
			return pairStamp{}, err
		}
		*f.to = fileStamp{mtime: fi.ModTime(), size: fi.Size()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			f.to.dev, f.to.ino = uint64(st.Dev), st.Ino
		}
	}
	return p, nil
}

// load reads the pair; tls.X509KeyPair also checks that the key is the
// certificate's. Its errors name the files, never what they hold.
func (c *fileCerts) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s and --tls-key %s: %w", c.certFile, c.keyFile, err)
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0 leaves it out
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("--tls-cert %s: %w", c.certFile, err)
		}
	}
	return &cert, nil
}

func (c *fileCerts) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load(), nil
}

// run polls the files until ctx ends, and loads them again when they
// changed, or while the last pair read did not load: a poll may catch a
// renewal halfway (the new certificate beside the old key), and the next
// one finds it whole.
func (c *fileCerts) run(ctx context.Context) {
	t := time.NewTicker(certPollOf(ctx))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.poll()
		}
	}
}

func (c *fileCerts) poll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now, err := c.stamp()
	if err != nil {
		// Gone or unreadable: the pair in memory is served on, and the
		// files are read once they are back (their zero stamp differs).
		if c.tried != (pairStamp{}) || !c.failed {
			c.log.Warn("certificate files cannot be read; the old pair is kept", "err", err)
		}
		c.tried, c.failed = pairStamp{}, true
		return
	}
	if now == c.tried && !c.failed {
		return
	}
	c.loadLocked(now, "files changed", now != c.tried)
}

// reload reads the files again, on SIGHUP, changed or not.
func (c *fileCerts) reload() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now, _ := c.stamp()
	c.loadLocked(now, "SIGHUP", true)
}

// loadLocked loads the files, stamped now before reading: a write after
// the stat changes the stamp, so the next poll reads again. A pair that
// does not load is logged once per state of the files (loud) and the old
// one is kept.
func (c *fileCerts) loadLocked(now pairStamp, why string, loud bool) {
	cert, err := c.load()
	c.tried = now
	if err != nil {
		if loud || !c.failed {
			c.log.Warn("certificate files did not load; the old pair is kept", "reason", why, "err", err)
		}
		c.failed = true
		return
	}
	c.failed = false
	c.cur.Store(cert)
	c.logLoaded(cert, why)
}

// logLoaded says which pair is served now: its names and end, never its
// key.
func (c *fileCerts) logLoaded(cert *tls.Certificate, why string) {
	level := slog.LevelInfo
	if time.Now().After(cert.Leaf.NotAfter) {
		level = slog.LevelWarn // served all the same: it is the operator's pair
	}
	c.log.Log(context.Background(), level, "certificate files loaded", "reason", why,
		"cert", c.certFile, "names", strings.Join(certNames(cert), ","),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339), "serial", cert.Leaf.SerialNumber.Text(16))
}

// certNames are the names a certificate is for: its DNS names and IP
// addresses, or its common name when it has neither.
func certNames(cert *tls.Certificate) []string {
	leaf := cert.Leaf
	names := append([]string(nil), leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 && leaf.Subject.CommonName != "" {
		names = append(names, leaf.Subject.CommonName)
	}
	return names
}

func (c *fileCerts) waiting() string { return "" }

func (c *fileCerts) expiries() map[string]time.Time {
	cert := c.cur.Load()
	name := ""
	if names := certNames(cert); len(names) > 0 {
		name = names[0]
	}
	return map[string]time.Time{name: cert.Leaf.NotAfter}
}

func (c *fileCerts) challenges(next http.Handler) http.Handler { return next }

func (c *fileCerts) nextProtos() []string { return nil }
