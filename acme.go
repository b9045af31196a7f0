// acme.go owns HTTPS from an ACME CA (--acme-domains): autocert, with
// certificates kept in the database.

package main

import (
	"context"
	"errors"
	"log/slog"
)

func newACMECerts(ctx context.Context, cfg serveConfig, store Store, logger *slog.Logger) (certSource, error) {
	return nil, errors.New("--acme-domains: not built yet")
}
