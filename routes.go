// routes.go owns the API's shape: the route table, and the middleware
// chain written in the order a request meets it; and what the admin
// listener serves.

package main

import (
	"log/slog"
	"net/http"
	"time"
)

// route is one entry of a route table.
type route struct {
	pattern string
	handler http.Handler
}

// apiRoutes is the route table of the API under /v1: every entry is an
// operation of the OpenAPI document, and the other way round. requireKey
// marks the routes that need a key, requireWrite those that need a key
// that may write.
func apiRoutes(store catalogStore, idem *idempotency, cfg serveConfig) []route {
	// ra.reads marks a read operation, which a replica may answer, and
	// ra.writes a create: both carry Petstore-Read-After (read_after.go).
	ra := newReadAfter(isPostgresURL(cfg.db), maxLineages)
	return []route{
		{"GET /v1/categories", requireKey(ra.reads(handleCategoryList(store, cfg.publicURL, cfg.busyTimeout)))},
		{"POST /v1/categories", requireWrite(ra.writes(handleCategoryCreate(store, idem)))},
		{"GET /v1/pets", requireKey(ra.reads(handlePetList(store)))},
		{"POST /v1/pets", requireWrite(ra.writes(handlePetCreate(store, idem)))},
		{"GET /v1/pets/{petId}", sunset(cfg.petsDeprecation(), time.Now, requireKey(ra.reads(handlePetGet(store))))},
		{"GET /v1/store/orders", requireKey(ra.reads(handleOrderList(store)))},
		{"POST /v1/store/orders", requireWrite(ra.writes(handleOrderCreate(store, idem)))},
		{"GET /v1/store/inventory", requireKey(ra.reads(handleInventory(store)))},
		{"GET /v1/openapi.json", handleOpenAPI(cfg.publicURL, cfg.env)},
	}
}

// newServer returns the whole API: the routes behind the middleware.
// certs is nil without HTTPS.
func newServer(logger *slog.Logger, reqLog *requestLog, store catalogStore, ready *readiness, idem *idempotency, keys *keyring, lim rateLimiter, m *serverMetrics, flight *inFlight, cfg serveConfig, certs certSource) http.Handler {
	api := apiRoutes(store, idem, cfg)
	routes := append(api,
		route{"GET /healthz", handleHealth(cfg.env)},
		route{"GET /readyz", handleReady(ready, lim, certs)})
	routes = append(routes, docsRoutes(newDocsBudget(reqLog.now), cfg.proxies(), cfg.writeTimeout)...)
	rt := newRouter(routes)
	return chain(rt,
		withRequestID,                      // runs first: every answer has an id, and nosniff
		logRequests(reqLog, m),             // one log line (unkeyed answers on a budget) and the metrics of each request
		recoverPanics(reqLog, logger),      // a panic is a 500, or a cut connection
		flight.limit,                       // an address's share of the requests in flight, and the server's
		withCORS(cfg.cors, api),            // answers preflights of the API's methods: before the key and the limiter
		areaHeaders(cfg.petsDeprecation()), // before the limiter: a 429 carries them too
		authenticate(keys),                 // resolves the key once; refuses nothing
		limitRequests(lim, cfg.proxies(), cfg.banHold, m, rt.routeOf), // before routing: a 429 comes even on an unknown path
	) // then the router (404, 405), then requireKey on each route that needs it (401)
}

// newAdminServer returns what the admin listener serves: metrics and the
// health checks, never the API.
func newAdminServer(ready *readiness, lim rateLimiter, m *serverMetrics, cfg serveConfig, certs certSource) http.Handler {
	return chain(newRouter([]route{
		{"GET /metrics", handleMetrics(m)},
		{"GET /healthz", handleHealth(cfg.env)},
		{"GET /readyz", handleReady(ready, lim, certs)},
	}), withRequestID) // every answer has an id, and nosniff
}

// chain returns h behind the middleware mws, the first of them running
// first.
func chain(h http.Handler, mws ...func(http.Handler) http.Handler) http.Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}
