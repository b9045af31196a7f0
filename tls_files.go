// tls_files.go owns HTTPS from a certificate pair's files (--tls-cert,
// --tls-key): loading it, and loading it again when the files change or
// on SIGHUP.

package main

import (
	"errors"
	"log/slog"
)

func newFileCerts(certFile, keyFile string, logger *slog.Logger) (certSource, error) {
	return nil, errors.New("--tls-cert: not built yet")
}
