// routes.go owns the API's shape: the route table, each route one row of
// facts from which its wrappers derive, and the middleware chain written
// in the order a request meets it; and what the admin listener serves.

package main

import (
	"log/slog"
	"net/http"
	"time"
)

// route is one row of a route table: an operation and its facts. The
// facts are data, from which everything else derives, so that the router,
// the limiter, the area headers, the document and the tests agree by
// construction: wrap puts the handler behind the key check, read-your-writes
// and the sunset the facts ask for; areaHeaders marks its answers by its
// area, which the router's match names (router.match); openapi.go gives its
// operation the stability and standard headers; and the generic tests
// (routes_test.go) hold every row to the rules (a write needs a key that
// may write and carries read-your-writes, a list is bounded).
type route struct {
	pattern    string
	handler    http.Handler // the operation alone: wrap adds what the facts ask
	key        keyNeed      // the key it needs
	rw         rwUse        // what it is to read-your-writes (read_after.go)
	area       *apiArea     // its area (areas.go): its paths and stability; nil outside the API
	list       listBound    // a list's bound; notList for one row or none
	deprecated bool         // GET /v1/pets/{petId}'s deprecation applies: its headers, and 410 after the sunset
}

// keyNeed is the key a route needs.
type keyNeed uint8

const (
	noKey    keyNeed = iota // public
	anyKey                  // any usable key (requireKey)
	writeKey                // a key that may write (requireWrite): every route that writes
)

// rwUse is what a route is to read-your-writes.
type rwUse uint8

const (
	rwNone  rwUse = iota // reads no database (the document)
	rwRead               // a read, which a replica may answer (ra.reads)
	rwWrite              // a write, whose answer carries its commit's position (ra.writes)
)

// listBound is how a list keeps what it reads of the database bounded.
type listBound uint8

const (
	notList     listBound = iota
	listChunked           // read listChunk rows at a time (inChunks), streamed
	listPaged             // at most limit rows a request, with a Link to the next page
)

// wrap returns the route's handler behind what its facts ask: the sunset,
// the key check, and read-your-writes, in the order a request meets them.
func (rt route) wrap(ra *readAfter, dep deprecation) http.Handler {
	h := rt.handler
	switch rt.rw {
	case rwRead:
		h = ra.reads(h)
	case rwWrite:
		h = ra.writes(h)
	}
	switch rt.key {
	case anyKey:
		h = requireKey(h)
	case writeKey:
		h = requireWrite(h)
	}
	if rt.deprecated {
		h = sunset(dep, time.Now, h)
	}
	return h
}

// apiRoutes is the route table of the API under /v1: every entry is an
// operation of the OpenAPI document, and the other way round. Its
// handlers are the operations alone: newServer wraps them by their facts.
func apiRoutes(store catalogStore, idem *idempotency, cfg serveConfig) []route {
	routes := []route{
		{"GET /v1/categories", handleCategoryList(store, cfg.publicURL, cfg.busyTimeout), anyKey, rwRead, areaCategories, listChunked, false},
		{"POST /v1/categories", handleCategoryCreate(store, idem), writeKey, rwWrite, areaCategories, notList, false},
		{"GET /v1/pets", handlePetList(store, cfg.publicURL), anyKey, rwRead, areaPets, listPaged, false},
		{"POST /v1/pets", handlePetCreate(store, idem), writeKey, rwWrite, areaPets, notList, false},
		{"GET /v1/pets/{petId}", handlePetGet(store), anyKey, rwRead, areaPets, notList, true},
		{"PUT /v1/pets/{petId}", handlePetReplace(store), writeKey, rwWrite, areaPets, notList, false},
		{"DELETE /v1/pets/{petId}", handleDelete(store, "pet", "petId", catalogStore.DeletePet, refusePetDelete), writeKey, rwWrite, areaPets, notList, false},
		{"GET /v1/store/orders", handleOrderList(store, cfg.publicURL), anyKey, rwRead, areaStore, listPaged, false},
		{"POST /v1/store/orders", handleOrderCreate(store, idem), writeKey, rwWrite, areaStore, notList, false},
		{"GET /v1/store/orders/{orderId}", handleOrderGet(store), anyKey, rwRead, areaStore, notList, false},
		{"DELETE /v1/store/orders/{orderId}", handleDelete(store, "order", "orderId", catalogStore.DeleteOrder, func(err error) error { return err }), writeKey, rwWrite, areaStore, notList, false},
		{"GET /v1/store/inventory", handleInventory(store), anyKey, rwRead, areaStore, notList, false},
		{"GET /v1/openapi.json", nil, noKey, rwNone, areaDocument, notList, false},
	}
	// The document is made from the table's facts too (openapi.go).
	routes[len(routes)-1].handler = handleOpenAPI(cfg.publicURL, cfg.env, docOps(routes))
	return routes
}

// newServer returns the whole API: the routes behind the middleware.
// certs is nil without HTTPS.
func newServer(logger *slog.Logger, reqLog *requestLog, store catalogStore, ready *readiness, idem *idempotency, keys *keyring, lim rateLimiter, m *serverMetrics, flight *inFlight, cfg serveConfig, certs certSource, tr *tracer) http.Handler {
	api := apiRoutes(store, idem, cfg)
	ra := newReadAfter(isPostgresURL(cfg.db), maxLineages)
	for i := range api {
		api[i].handler = api[i].wrap(ra, cfg.petsDeprecation())
	}
	routes := append(api,
		route{pattern: "GET /healthz", handler: handleHealth(cfg.env)},
		route{pattern: "GET /readyz", handler: handleReady(ready, lim, certs, false)})
	routes = append(routes, docsRoutes(newDocsBudget(reqLog.now), cfg.proxies(), cfg.writeTimeout)...)
	rt := newRouter(routes)
	return chain(rt,
		withRequestID,                          // runs first: every answer has an id, and nosniff
		logRequests(reqLog, m),                 // one log line (unkeyed answers on a budget) and the metrics of each request
		traceRequests(tr),                      // its trace: the ids for the log, its span when tracing is on
		recoverPanics(reqLog, logger),          // a panic is a 500, or a cut connection
		flight.limit,                           // an address's share of the requests in flight, and the server's
		withCORS(cfg.cors, api),                // answers preflights of the API's methods: before the key and the limiter
		areaHeaders(cfg.petsDeprecation(), rt), // before the limiter: a 429 carries them too
		authenticate(keys),                     // resolves the key once; refuses nothing
		limitRequests(lim, cfg.proxies(), cfg.banHold, m, rt.routeOf), // before routing: a 429 comes even on an unknown path
	) // then the router (404, 405), then each route's wrap: sunset (410), requireKey (401, 403), read-your-writes
}

// newAdminServer returns what the admin listener serves: metrics and the
// health checks, never the API.
func newAdminServer(ready *readiness, lim rateLimiter, m *serverMetrics, cfg serveConfig, certs certSource) http.Handler {
	return chain(newRouter([]route{
		{pattern: "GET /metrics", handler: handleMetrics(m)},
		{pattern: "GET /healthz", handler: handleHealth(cfg.env)},
		{pattern: "GET /readyz", handler: handleReady(ready, lim, certs, true)},
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
