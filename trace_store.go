// trace_store.go owns the database's spans: stores that start a client
// span under the request's for each catalog and idempotency operation
// (db.system.name, the operation, the table, primary or replica), and the
// notes that the stores add to it from inside (which server a read went
// to, a create's wait for its group commit).

package main

import (
	"context"
	"time"
)

// tracedCatalog is a catalogStore whose operations make spans, under the
// request's; tracedIdem is an idemStore's likewise. Both take pointer
// receivers, and embed only the role they wrap: each method of an embedded
// interface costs the binary a wrapper.
type tracedCatalog struct {
	catalogStore
	system string // db.system.name: postgresql or sqlite
}

type tracedIdem struct {
	idemStore
	t tracedCatalog // its start, and system
}

// tracedLocalCatalog is a tracedCatalog of a store whose category
// generation is in memory (localGen), which it keeps showing.
type tracedLocalCatalog struct {
	*tracedCatalog
	local localGen
}

func (s tracedLocalCatalog) localCategoriesGen() uint64 { return s.local.localCategoriesGen() }

// traceCatalog returns store with spans, or store itself with tracing off.
func traceCatalog(store catalogStore, tr *tracer, postgres bool) catalogStore {
	if tr == nil {
		return store
	}
	ts := &tracedCatalog{catalogStore: store, system: dbSystem(postgres)}
	if l, ok := store.(localGen); ok {
		return tracedLocalCatalog{ts, l}
	}
	return ts
}

// traceIdem returns store with spans, or store itself with tracing off or
// on SQLite, whose idempotency marks are in memory.
func traceIdem(store idemStore, tr *tracer, postgres bool) idemStore {
	if tr == nil || !postgres {
		return store
	}
	return &tracedIdem{store, tracedCatalog{system: dbSystem(postgres)}}
}

func dbSystem(postgres bool) string {
	if postgres {
		return "postgresql"
	}
	return "sqlite"
}

// start starts the span of operation op (SELECT, INSERT) on table.
func (s *tracedCatalog) start(ctx context.Context, op, table string) (context.Context, *span) {
	ctx, sp := startChild(ctx, op+" "+table, spanClient)
	if sp != nil {
		sp.setString("db.system.name", s.system)
		sp.setString("db.operation.name", op)
		sp.setString("db.collection.name", table)
		sp.setString("petstore.db.server", "primary")
	}
	return ctx, sp
}

// done ends sp, failed when err is one of the database's (a refusal, such
// as a name taken, is an answer), unless ctx ended first: a query cut by
// the client's departure is not the database's failure (middleware.go's
// clientGone).
func done(ctx context.Context, sp *span, err error) {
	if err != nil && isDBError(err) && ctx.Err() == nil {
		sp.fail()
	}
	sp.finish()
}

func (s *tracedCatalog) CreateCategory(ctx context.Context, c Category, fold string, idem *idemWrite[Category]) (Category, error) {
	ctx, sp := s.start(ctx, "INSERT", "categories")
	c, err := s.catalogStore.CreateCategory(ctx, c, fold, idem)
	done(ctx, sp, err)
	return c, err
}

func (s *tracedCatalog) EachCategory(ctx context.Context, fn func(Category) error) error {
	ctx, sp := s.start(ctx, "SELECT", "categories")
	err := s.catalogStore.EachCategory(ctx, fn)
	done(ctx, sp, err)
	return err
}

func (s *tracedCatalog) EachCategoryAfter(ctx context.Context, afterID int64, limit int, fn func(Category) error) error {
	ctx, sp := s.start(ctx, "SELECT", "categories")
	err := s.catalogStore.EachCategoryAfter(ctx, afterID, limit, fn)
	done(ctx, sp, err)
	return err
}

func (s *tracedCatalog) CategoriesGen(ctx context.Context) (uint64, error) {
	ctx, sp := s.start(ctx, "SELECT", "categories_gen")
	g, err := s.catalogStore.CategoriesGen(ctx)
	done(ctx, sp, err)
	return g, err
}

func (s *tracedCatalog) CreatePet(ctx context.Context, p Pet, idem *idemWrite[Pet]) (Pet, error) {
	ctx, sp := s.start(ctx, "INSERT", "pets")
	p, err := s.catalogStore.CreatePet(ctx, p, idem)
	done(ctx, sp, err)
	return p, err
}

func (s *tracedCatalog) EachPetAfter(ctx context.Context, f petFilter, afterID int64, limit int, fn func(Pet) error) error {
	ctx, sp := s.start(ctx, "SELECT", "pets")
	err := s.catalogStore.EachPetAfter(ctx, f, afterID, limit, fn)
	done(ctx, sp, err)
	return err
}

func (s *tracedCatalog) ReplacePet(ctx context.Context, p Pet, match string) (Pet, error) {
	ctx, sp := s.start(ctx, "UPDATE", "pets")
	p, err := s.catalogStore.ReplacePet(ctx, p, match)
	done(ctx, sp, err)
	return p, err
}

func (s *tracedCatalog) DeletePet(ctx context.Context, id int64, match string) error {
	ctx, sp := s.start(ctx, "DELETE", "pets")
	err := s.catalogStore.DeletePet(ctx, id, match)
	done(ctx, sp, err)
	return err
}

func (s *tracedCatalog) Pet(ctx context.Context, id int64) (Pet, error) {
	ctx, sp := s.start(ctx, "SELECT", "pets")
	p, err := s.catalogStore.Pet(ctx, id)
	done(ctx, sp, err)
	return p, err
}

func (s *tracedCatalog) CreateOrder(ctx context.Context, o Order, idem *idemWrite[Order]) (Order, error) {
	ctx, sp := s.start(ctx, "INSERT", "orders")
	o, err := s.catalogStore.CreateOrder(ctx, o, idem)
	done(ctx, sp, err)
	return o, err
}

func (s *tracedCatalog) EachOrderAfter(ctx context.Context, afterID int64, limit int, fn func(Order) error) error {
	ctx, sp := s.start(ctx, "SELECT", "orders")
	err := s.catalogStore.EachOrderAfter(ctx, afterID, limit, fn)
	done(ctx, sp, err)
	return err
}

func (s *tracedCatalog) Order(ctx context.Context, id int64) (Order, error) {
	ctx, sp := s.start(ctx, "SELECT", "orders")
	o, err := s.catalogStore.Order(ctx, id)
	done(ctx, sp, err)
	return o, err
}

func (s *tracedCatalog) DeleteOrder(ctx context.Context, id int64, match string) error {
	ctx, sp := s.start(ctx, "DELETE", "orders")
	err := s.catalogStore.DeleteOrder(ctx, id, match)
	done(ctx, sp, err)
	return err
}

func (s *tracedCatalog) PetInventory(ctx context.Context) (map[string]int64, error) {
	ctx, sp := s.start(ctx, "SELECT", "pets")
	m, err := s.catalogStore.PetInventory(ctx)
	done(ctx, sp, err)
	return m, err
}

func (s *tracedIdem) BeginIdempotent(ctx context.Context, r idemRequest) (*idemAnswer, error) {
	ctx, sp := s.t.start(ctx, "SELECT", "idempotency")
	a, err := s.idemStore.BeginIdempotent(ctx, r)
	done(ctx, sp, err)
	return a, err
}

func (s *tracedIdem) IdempotentAnswer(ctx context.Context, r idemRequest) (*idemAnswer, error) {
	ctx, sp := s.t.start(ctx, "SELECT", "idempotency")
	a, err := s.idemStore.IdempotentAnswer(ctx, r)
	done(ctx, sp, err)
	return a, err
}

func (s *tracedIdem) EndIdempotent(ctx context.Context, r idemRequest) error {
	ctx, sp := s.t.start(ctx, "DELETE", "idempotency")
	err := s.idemStore.EndIdempotent(ctx, r)
	done(ctx, sp, err)
	return err
}

// traceReadServer notes on the database span ctx is in which server its
// read went to: "primary" or "replica" (--db-replica).
func traceReadServer(ctx context.Context, server string) {
	if sp, ok := ctx.Value(spanKey{}).(*span); ok {
		sp.replace("petstore.db.server", server)
	}
}

// traceGroupCommit notes on the span ctx is in how long a create waited
// for its group commit, from its queueing at start to its commit: the
// time it shared a transaction with others.
func traceGroupCommit(ctx context.Context, start time.Time) {
	if sp, ok := ctx.Value(spanKey{}).(*span); ok && sp.recording() {
		sp.setDouble("petstore.db.group_commit.wait_ms", float64(time.Since(start))/1e6)
	}
}
