// postgres_catalog.go owns PostgreSQL's queries of the catalog: categories,
// pets and orders, and the group commit's batches, which keep ids visible
// in ascending order however many instances create at once.

package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// insertID queues a create's statement (pgKeyedForm's unkeyed form), which
// returns the new row's id, or NULL and what holds the name. A NULL id (ON
// CONFLICT DO NOTHING, or a WHERE EXISTS that found no referenced row)
// fails this write alone, with noRow: PostgreSQL would undo the whole
// transaction for a statement that failed on a constraint, so the
// statements are written not to fail on them.
func (b *pgBatch) insertID(noRow error, id *int64, st *pgStmt, args ...any) {
	i := b.job
	b.queue(st, func(row pgx.Row) error {
		var made *int64
		var holder *string
		if err := row.Scan(&made, &holder); err != nil {
			return err
		}
		if made == nil {
			b.errs[i] = pgRefusedBy(noRow, holder)
		} else {
			*id = *made
		}
		return nil
	}, args...)
}

// changeRow queues the write's UPDATE or DELETE, which returns the row it
// changed (RETURNING) for scan, or none: then errNotFound, the write's own
// outcome (isOwnOutcome), which fails it alone (sqliteChangeRow's twin).
func (b *pgBatch) changeRow(scan func(pgx.Row) error, query string, args ...any) {
	b.queue(pgStmtOf(query), b.own(func(row pgx.Row) error {
		err := scan(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotFound
		}
		return err
	}), args...)
}

// own wraps the answer fn of a statement of the write queuing now: an own
// outcome that fn returns (isOwnOutcome) fails that write alone, where
// any error would fail the whole batch.
func (b *pgBatch) own(fn func(pgx.Row) error) func(pgx.Row) error {
	i := b.job
	return func(row pgx.Row) error {
		err := fn(row)
		if isOwnOutcome(err) {
			b.errs[i] = err
			return nil
		}
		return err
	}
}

// pgRefusedBy is the refusal noRow, naming the category that holds the name
// for a conflict. A category's statement that made no row and found no
// holder (which its snapshot would show) was stopped by a category without
// a comparison key: errPgNamesUnfilled.
func pgRefusedBy(noRow error, holder *string) error {
	if errors.Is(noRow, errConflict) {
		if holder == nil {
			return errPgNamesUnfilled
		}
		return conflictNamed(holder)
	}
	return noRow
}

// pgLockCatalog makes the creates of all instances take turns, a batch at a
// time, from before their ids are drawn until their commit is visible: it
// is how PostgreSQL keeps catalogStore's rule that ids ascend (store.go). A
// sequence hands out ids in the order it is asked, but transactions commit
// in any order: without the lock, id 11 could become visible before id 10,
// and a client paging by after_id past 11 would never see 10. It is an
// advisory lock, held to the end of the transaction, named by this
// database's schema (so that petstores on other schemas of one database do
// not wait for each other): a table lock strong enough to order inserters
// would also block VACUUM and ANALYZE (SHARE UPDATE EXCLUSIVE), and
// autovacuum would stall creates and never finish on a busy table. The lock
// costs a statement per batch, not per create, sent with BEGIN.
const pgLockCatalog = "SELECT pg_advisory_xact_lock(1885697139, " + pgSchemaKey + ")"

// pgSchemaKey is the second half of petstore's advisory lock keys: the OID of
// the schema the tables are in.
const pgSchemaKey = "coalesce(to_regnamespace(current_schema())::oid::int4, 0)"

// commitBatch is the group commit's commit on PostgreSQL: the batch flies
// now (flyBatch) if the gate has room, else its writes wait for the next
// flight, with those that come meanwhile (pgFlightGate).
func (s *pgStore) commitBatch(batch []*writeJob[*pgBatch]) {
	jobs := slices.Clone(batch) // the loop reuses batch's array for the next
	now, wait := s.flights.enter(jobs)
	switch {
	case now == nil:
	case wait:
		s.flyBatches(now)
	default:
		go s.flyBatches(now)
	}
}

// flyBatches flies jobs, then the writes that waited meanwhile, as long as
// there are some and the gate lets it.
func (s *pgStore) flyBatches(jobs []*writeJob[*pgBatch]) {
	for jobs != nil {
		jobs = s.flights.leave(s.flyBatch(jobs))
	}
}

// flyBatch is one transaction of creates: BEGIN, the lock, every write and
// COMMIT in one flight (sendBatch, postgres_pipeline.go); each write is
// answered after the commit, and within the busy timeout of its arrival:
// the batch must commit by its oldest write's deadline. A failure of the
// transaction fails every write in it as errUnavailable. When the
// connection breaks before COMMIT's answer, the writes may or may not have
// been made: they are answered 503 too, as PostgreSQL cannot say.
//
// It returns the round trip that the flight measured (0: none).
func (s *pgStore) flyBatch(batch []*writeJob[*pgBatch]) (rtt time.Duration) {
	b := &pgBatch{errs: make([]error, len(batch))}
	queued := make([]bool, len(batch))
	answered := make([]bool, len(batch))
	var deadline time.Time // the busy timeout of the batch's oldest write
	for i, j := range batch {
		if err := j.ctx.Err(); err != nil {
			j.done <- err // the client is gone: do not write for it
			answered[i] = true
			continue
		}
		end := j.start.Add(s.busy)
		if !time.Now().Before(end) {
			// It waited out its busy timeout behind batches that could not
			// commit: answer now, as SQLite's busy timeout would.
			j.done <- fmt.Errorf("%w: no commit within the busy timeout (%v)", errDBAway, s.busy)
			answered[i] = true
			continue
		}
		b.job = i
		if err := j.run(b); err != nil {
			b.errs[i] = err
			continue
		}
		queued[i] = true
		if deadline.IsZero() || end.Before(deadline) {
			deadline = end
		}
	}
	var err error
	if !deadline.IsZero() {
		err = s.sendBatch(b, deadline)
	}
	for i, j := range batch {
		if answered[i] {
			continue
		}
		if err != nil && queued[i] {
			b.errs[i] = fmt.Errorf("%w: the batch's transaction failed: %w", errUnavailable, err)
		}
		j.done <- b.errs[i]
	}
	return b.rtt
}

// The creates' statements, without an Idempotency-Key and with one
// (pgKeyedForm). Each INSERT returns no row rather than fail on a constraint:
// PostgreSQL would abort the batch's whole transaction. A category's
// statement also reads the name that the one sent collides with: the
// statement's snapshot holds every row that can (the batches of all
// instances take turns under pgLockCatalog, and an earlier statement of
// this batch is seen too), but not the row this statement inserts.
var (
	pgInsertCategory, pgInsertCategoryKeyed = pgKeyedForm("petstore_create_category", `INSERT INTO categories (name, fold, name_cmp, description)
		SELECT $1::text, $2::text, $3::text, $4::text
		WHERE NOT EXISTS (SELECT 1 FROM categories WHERE name_cmp IS NULL AND id > $5::bigint)%s
		ON CONFLICT DO NOTHING RETURNING id`, 5,
		`CASE WHEN NOT EXISTS (SELECT 1 FROM made) THEN (SELECT name FROM categories WHERE fold = $2 OR name_cmp = $3 ORDER BY id LIMIT 1) END`)
	pgInsertPet, pgInsertPetKeyed = pgKeyedForm("petstore_create_pet", `INSERT INTO pets (name, category_id, status)
		SELECT $1::text, $2::bigint, $3::text WHERE EXISTS (SELECT 1 FROM categories WHERE id = $2)%s RETURNING id`, 3, "")
	pgInsertOrder, pgInsertOrderKeyed = pgKeyedForm("petstore_create_order", `INSERT INTO orders (pet_id, quantity, status, created_at)
		SELECT $1::bigint, $2::integer, $3::text, $4::timestamptz WHERE EXISTS (SELECT 1 FROM pets WHERE id = $1)%s RETURNING id`, 4, "")
)

// CreateCategory inserts c unless its name is taken under fold or under
// its comparison key (compareName), or a category without a key was stored
// after this instance last filled them (pgNameFill): then it fills them and
// tries again.
func (s *pgStore) CreateCategory(ctx context.Context, c Category, fold string, idem *idemWrite[Category]) (Category, error) {
	cmp := compareName(c.Name)
	for try := 1; ; try++ {
		filled := s.names.filled.Load()
		err := s.writeAt(ctx, func(b *pgBatch) error {
			pgCreate(b, idem, errConflict, &c.ID, func() Category { return c }, c.Name, pgInsertCategory, pgInsertCategoryKeyed, c.Name, fold, cmp, c.Description, filled)
			return nil
		})
		if errors.Is(err, errPgNamesUnfilled) && try < 3 {
			if err := s.fillNameCmp(ctx); err != nil {
				return Category{}, err
			}
			continue
		}
		if errors.Is(err, errPgNamesUnfilled) { // older instances writing faster than this one fills
			err = fmt.Errorf("%w: %w", errUnavailable, err)
		}
		err = pgKeepLate(ctx, s, idem, c, err)
		if err != nil {
			return Category{}, wrapCreate("insert category", err, describePostgres)
		}
		s.written.created(pgCategories, c.ID, c.Name, c.Description) // postgres_lostwrites.go
		return c, nil
	}
}

// CategoriesGen is the highest id of a visible category, which names the
// set of them by catalogStore's rules (store.go). Asking the database every time is what lets
// every instance serve a cached list that is never missing a category that
// another one has acknowledged; the requests that ask at once share one
// query (pgSharedRead).
func (s *pgStore) CategoriesGen(ctx context.Context) (uint64, error) {
	if st := readStateOf(ctx); st != nil && s.replica != nil {
		if gen, ok, err := s.replicaGen(ctx, st); ok { // postgres_replica.go
			return gen, err
		}
	}
	ctx, cancel := s.op(ctx) // the wait for a round in flight counts too
	defer cancel()
	gen, err := s.categoriesGen.read(ctx, func() (uint64, error) {
		ctx, cancel := s.op(context.Background())
		defer cancel()
		var id int64
		if err := s.pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM categories").Scan(&id); err != nil {
			return 0, fmt.Errorf("read categories generation: %w", describePostgres(err))
		}
		return uint64(id), nil
	})
	if err != nil {
		return 0, describePostgres(err)
	}
	return gen, nil
}

// pgSharedRead lets the callers that want a fresh value at once share one
// read of it, as the group commit lets writes share a commit. A caller
// never gets a value read before it called: it joins the read that starts
// next, which starts when the one in flight ends. Under load, one query
// answers all the GETs that arrived while the previous one ran, instead of
// one query each.
type pgSharedRead struct {
	mu      sync.Mutex
	running bool
	next    *pgReadRound // the round the callers arriving now wait for
}

// pgReadRound is one read and the callers waiting for it.
type pgReadRound struct {
	done    chan struct{}
	v       uint64
	err     error
	waiters int // callers that joined it: for the tests
}

// read returns a value that query read after read was called.
func (sr *pgSharedRead) read(ctx context.Context, query func() (uint64, error)) (uint64, error) {
	sr.mu.Lock()
	r := sr.next
	if r == nil {
		r = &pgReadRound{done: make(chan struct{})}
		sr.next = r
	}
	r.waiters++
	lead := !sr.running
	if lead {
		sr.running, sr.next = true, nil
	}
	sr.mu.Unlock()
	if lead {
		sr.run(r, query)
	}
	select {
	case <-r.done:
		return r.v, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run reads for round r, then starts the round that gathered meanwhile,
// if any, in a goroutine of its own: r's caller need not wait for it.
func (sr *pgSharedRead) run(r *pgReadRound, query func() (uint64, error)) {
	r.v, r.err = query()
	close(r.done)
	sr.mu.Lock()
	next := sr.next
	sr.next = nil
	sr.running = next != nil
	sr.mu.Unlock()
	if next != nil {
		go sr.run(next, query)
	}
}

const pgCategoriesAfter = "SELECT id, name, description FROM categories WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3"

func (s *pgStore) EachCategory(ctx context.Context, fn func(Category) error) error {
	s.categoryListReads.Add(1)
	return pgChunks(ctx, s, "list categories", "categories", pgScanCategory, func(c Category) int64 { return c.ID }, fn, pgCategoriesAfter)
}

func (s *pgStore) EachCategoryAfter(ctx context.Context, afterID int64, limit int, fn func(Category) error) error {
	return pgEach(ctx, s, "list categories", pgScanCategory, fn, pgCategoriesAfter, afterID, int64(math.MaxInt64), limit)
}

func pgScanCategory(row pgx.CollectableRow) (Category, error) {
	var c Category
	err := row.Scan(&c.ID, &c.Name, &c.Description)
	return c, err
}

func (s *pgStore) CreatePet(ctx context.Context, p Pet, idem *idemWrite[Pet]) (Pet, error) {
	err := s.writeAt(ctx, func(b *pgBatch) error {
		pgCreate(b, idem, errNoReference, &p.ID, func() Pet { return p }, "", pgInsertPet, pgInsertPetKeyed, p.Name, p.CategoryID, p.Status)
		return nil
	})
	if err != nil {
		return Pet{}, wrapCreate("insert pet", err, describePostgres)
	}
	s.written.created(pgPets, p.ID, p.Name, p.CategoryID, p.Status)
	return p, nil
}

func (s *pgStore) EachPetAfter(ctx context.Context, f petFilter, afterID int64, limit int, fn func(Pet) error) error {
	return pgEach(ctx, s, "list pets", pgScanPet, fn, `SELECT id, name, category_id, status FROM pets
		WHERE ($1::bigint = 0 OR category_id = $1) AND ($2::text = '' OR strpos($2, ',' || status || ',') > 0) AND id > $3 ORDER BY id LIMIT $4`,
		f.CategoryID, f.statusSet(), afterID, limit)
}

func (s *pgStore) Pet(ctx context.Context, id int64) (Pet, error) {
	pets, err := pgRead(ctx, s, fmt.Sprintf("read pet %d", id), func(row pgx.CollectableRow) (p Pet, err error) {
		return p, row.Scan(&p.ID, &p.Name, &p.CategoryID, &p.Status, &p.Version)
	}, "SELECT id, name, category_id, status, version FROM pets WHERE id = $1", id)
	if err != nil {
		return Pet{}, err
	}
	if len(pets) == 0 {
		return Pet{}, errNotFound
	}
	return pets[0], nil
}

func pgScanPet(row pgx.CollectableRow) (Pet, error) {
	var p Pet
	err := row.Scan(&p.ID, &p.Name, &p.CategoryID, &p.Status)
	return p, err
}

func (s *pgStore) CreateOrder(ctx context.Context, o Order, idem *idemWrite[Order]) (Order, error) {
	created := s.now().UTC().Truncate(time.Second)
	o.CreatedAt = created.Format(time.RFC3339)
	err := s.writeAt(ctx, func(b *pgBatch) error {
		pgCreate(b, idem, errNoReference, &o.ID, func() Order { return o }, "", pgInsertOrder, pgInsertOrderKeyed, o.PetID, o.Quantity, o.Status, created)
		return nil
	})
	if err != nil {
		return Order{}, wrapCreate("insert order", err, describePostgres)
	}
	s.written.created(pgOrders, o.ID, o.PetID, o.Quantity, o.Status, o.CreatedAt)
	return o, nil
}

func (s *pgStore) PetInventory(ctx context.Context) (map[string]int64, error) {
	type statusCount struct {
		status string
		n      int64
	}
	rows, err := pgRead(ctx, s, "count pets", func(row pgx.CollectableRow) (c statusCount, err error) {
		return c, row.Scan(&c.status, &c.n)
	}, "SELECT status, count(*) FROM pets GROUP BY status")
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int64, len(rows))
	for _, c := range rows {
		counts[c.status] = c.n
	}
	return counts, nil
}

func (s *pgStore) EachOrderAfter(ctx context.Context, afterID int64, limit int, fn func(Order) error) error {
	return pgEach(ctx, s, "list orders", func(row pgx.CollectableRow) (Order, error) {
		var o Order
		var created time.Time
		err := row.Scan(&o.ID, &o.PetID, &o.Quantity, &o.Status, &created)
		o.CreatedAt = created.UTC().Format(time.RFC3339)
		return o, err
	}, fn, "SELECT id, pet_id, quantity, status, created_at FROM orders WHERE id > $1 ORDER BY id LIMIT $2", afterID, limit)
}
