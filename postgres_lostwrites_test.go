package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLostWritesMemory: the memory keeps the last acknowledged create of
// each table (the highest id), offers the rows remembered before a
// reconnection to the next check, and judges its readings: a row there
// with what was written is kept, one missing or holding another row is a
// loss, counted once per table and id; a row changed or deleted by an
// acknowledged change is not, nor one whose change is under way, nor a
// reading taken before a change.
func TestLostWritesMemory(t *testing.T) {
	var m pgWriteMemory
	desc := "friendly"
	m.created(pgCategories, 7, "Dogs", &desc)
	m.created(pgCategories, 5, "Cats", nil) // acknowledged later with a lower id: not the last
	m.created(pgPets, 3, "Rex", int64(7), "available")
	m.created(pgOrders, 2, int64(3), int64(1), "placed", "2026-11-29T05:00:00Z")
	if rows := m.due(false); len(rows) != 0 {
		t.Fatalf("due before any reconnection: %+v, want none", rows)
	}
	if rows := m.due(true); len(rows) != 3 || rows[0].id != 7 || rows[1].id != 3 || rows[2].id != 2 {
		t.Fatalf("the minute's rows: %+v, want categories 7, pets 3, orders 2", rows)
	}

	m.reconnected()
	m.created(pgPets, 4, "Fido", int64(7), "sold") // on the new server, after the reconnection
	rows := m.due(false)
	if len(rows) != 3 || rows[1].id != 3 {
		t.Fatalf("due after the reconnection: %+v, want the three remembered before it", rows)
	}
	// What the database gives back, in its own types.
	if m.judge(rows[0], true, pgRowPrint("Dogs", "friendly")) {
		t.Errorf("category 7 there as written: judged lost")
	}
	if !m.judge(rows[1], false, "") {
		t.Errorf("pet 3 missing: not judged lost")
	}
	if !m.judge(rows[2], true, pgRowPrint(int64(9), int32(1), "placed", time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC))) {
		t.Errorf("order 2 holding another row (pet 9): not judged lost")
	}
	if m.judge(rows[1], false, "") {
		t.Errorf("pet 3 judged lost twice")
	}
	lost, by := m.losses()
	if len(lost) != 2 || lost[0] != (lostWrite{"pets", 3}) || lost[1] != (lostWrite{"orders", 2}) || by != [3]uint64{0, 1, 1} {
		t.Errorf("losses %+v by table %v, want pets 3 and orders 2", lost, by)
	}
	if rows := m.due(false); len(rows) != 0 {
		t.Errorf("due after the check: %+v, want none", rows)
	}
	if rows := m.due(true); len(rows) != 2 || rows[0].id != 7 || rows[1].id != 4 {
		t.Errorf("the minute's rows after the check: %+v, want categories 7 and pets 4", rows)
	}

	// A change: while it runs no check judges the row; its outcome is what
	// the row holds from then on.
	done := m.changing(pgPets, 4)
	if rows := m.due(true); len(rows) != 1 || rows[0].table != pgCategories {
		t.Errorf("the minute's rows while pet 4 changes: %+v, want category 7 alone", rows)
	}
	done("Fido", int64(7), "pending")
	rows = m.due(true)
	if len(rows) != 2 || rows[1].id != 4 {
		t.Fatalf("the minute's rows after the change: %+v", rows)
	}
	if m.judge(rows[1], true, pgRowPrint("Fido", int64(7), "pending")) {
		t.Errorf("pet 4 as changed: judged lost")
	}
	// A reading from before a change is not judged: the change may have
	// come first.
	before := m.due(true)
	m.changing(pgCategories, 7)() // deleted
	if m.judge(before[0], false, "") {
		t.Errorf("category 7, deleted by an acknowledged change after it was read: judged lost")
	}
	if rows := m.due(true); len(rows) != 1 || rows[0].id != 4 {
		t.Errorf("the minute's rows after category 7's delete: %+v, want pet 4 alone", rows)
	}
	// A delete of a row remembered before a reconnection forgets it too.
	m.reconnected()
	m.changing(pgPets, 4)()
	if rows := m.due(false); len(rows) != 0 {
		t.Errorf("due after pet 4's delete: %+v, want none", rows)
	}
	if lost, _ := m.losses(); len(lost) != 2 {
		t.Errorf("losses %+v, want the two found", lost)
	}
}

// TestLostWritesPrint: what a create wrote and what the database reads
// back compare equal in their own types: integers of any width, a time
// and its RFC 3339 form in UTC, a nil pointer and a NULL.
func TestLostWritesPrint(t *testing.T) {
	desc := "d"
	for _, c := range []struct {
		wrote, read []any
		same        bool
	}{
		{[]any{"Dogs", &desc}, []any{"Dogs", "d"}, true},
		{[]any{"Dogs", (*string)(nil)}, []any{"Dogs", nil}, true},
		{[]any{"Dogs", (*string)(nil)}, []any{"Dogs", ""}, false},
		{[]any{int64(3), int64(2), "placed", "2026-11-29T05:00:00Z"}, []any{int64(3), int32(2), "placed", time.Date(2026, 11, 29, 6, 0, 0, 0, time.FixedZone("CET", 3600))}, true},
		{[]any{int64(3), int64(2), "placed", "2026-11-29T05:00:00Z"}, []any{int64(3), int32(2), "placed", time.Date(2026, 11, 29, 5, 0, 1, 0, time.UTC)}, false},
		{[]any{"a", "b"}, []any{"a\x00b"}, false},
	} {
		if got := pgRowPrint(c.wrote...) == pgRowPrint(c.read...); got != c.same {
			t.Errorf("%v against %v: same %v, want %v", c.wrote, c.read, got, c.same)
		}
	}
}

// TestPostgresLostWritesNoticed: an instance on a primary a with a
// synchronous standby b, and a third host, lag, a standby that stopped
// before any create (behind a proxy that lets nothing through until the
// test routes it). A create of each kind on a; a SIGKILLed and b promoted
// (an ordinary failover): the instance reconnects, reads the replication
// again (b has no synchronous standby: one WARN), checks, and finds
// nothing lost. Creates on b; b SIGKILLed and lag promoted, with a row of
// its own in the category's id: the instance reconnects and finds all
// three lost, the category replaced and the pet and order missing: an
// ERROR each naming table and id, petstore_db_lost_writes_total by table,
// the admin /readyz listing them (still 200), the API listener's saying
// ready alone; no second WARN (no synchronous standby before lag either).
func TestPostgresLostWritesNoticed(t *testing.T) {
	t.Parallel()
	c := newPGCluster(t)
	a := c.addPrimary("a")
	b := c.addStandby("b", a, pgStandbyOptions{})
	a.syncOn(b)
	toLag := pmStartProxy(t) // no target: every connection closed at once
	db := pgMultiHost(a.addr(), b.addr(), toLag.addr())
	key := pmBigKey(t, db) // migrates
	lag := c.addStandby("lag", a, pgStandbyOptions{})
	lag.stop()

	var stored atomic.Pointer[pgStore]
	capture := func(s Store) Store { stored.Store(s.(*pgStore)); return s }
	ts := startServerIn(t, context.WithValue(context.Background(), storeWrapKey{}, capture), db, key)
	pmCloseIdleFirst(t, []*testServer{ts})
	st := stored.Load()
	create := func(what string) (cat, pet, order int64) {
		t.Helper()
		var ids [3]int64
		for i, req := range []struct{ path, body string }{
			{"/v1/categories", fmt.Sprintf(`{"name":"%s category"}`, what)},
			{"/v1/pets", `{"name":"` + what + ` pet","categoryId":%d}`},
			{"/v1/store/orders", `{"petId":%d,"quantity":2}`},
		} {
			body := req.body
			if i > 0 {
				body = fmt.Sprintf(body, ids[i-1])
			}
			deadline := time.Now().Add(20 * time.Second) // the first after a failover may get 503s
			for {
				r, _, err := pmSend(ts, 10*time.Second, "POST", req.path, key, body)
				if err == nil && r.status == 201 {
					var row struct{ ID int64 }
					if err := json.Unmarshal(r.body, &row); err != nil || row.ID == 0 {
						t.Fatalf("%s %s: 201 %s", what, req.path, r.body)
					}
					ids[i] = row.ID
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: POST %s not 201 within 20s: %+v %v", what, req.path, r, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		return ids[0], ids[1], ids[2]
	}
	// waitCheck waits until the store has seen a reconnection and checked
	// since, from counts taken before the failover, or until done says so.
	waitCheck := func(changes, checked int64, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for st.server.changes.Load() <= changes || st.checked.Load() <= checked || !done() {
			if time.Now().After(deadline) {
				lost, _ := st.written.losses()
				t.Fatalf("within 20s: %d reconnections seen, %d checks made (want more than %d and %d), losses %+v", st.server.changes.Load(), st.checked.Load(), changes, checked, lost)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// waitLog waits until the log (written out a second at a time) holds
	// n lines with s, and returns the log.
	waitLog := func(s string, n int) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			log := ts.stderr.String()
			if got := strings.Count(log, s); got >= n || time.Now().After(deadline) {
				if got != n {
					t.Errorf("%d log lines with %q, want %d", got, s, n)
				}
				return log
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	const warning, lostLine = "level=WARN msg=\"the primary has no synchronous standby left", "level=ERROR msg=\"an acknowledged write is lost"

	create("kept")
	changes, checked := st.server.changes.Load(), st.checked.Load()
	a.kill()
	b.promote()
	create("after the failover") // on b: the instance has reconnected
	waitCheck(changes, checked, func() bool { return true })
	if lost, _ := st.written.losses(); len(lost) != 0 {
		t.Errorf("an ordinary failover to the synchronous standby: losses %+v, want none", lost)
	}
	waitLog(warning, 1)

	cat, pet, order := create("lost")
	changes, checked = st.server.changes.Load(), st.checked.Load()
	b.kill()
	lag.start()
	lag.promote()
	var got int64
	if err := lag.queryRowIn("petstore", "INSERT INTO categories (id, name, fold, name_cmp) VALUES ($1, 'imposter', 'imposter', 'imposter') RETURNING id", cat).Scan(&got); err != nil {
		t.Fatal(err)
	}
	toLag.route(lag.addr())
	waitCheck(changes, checked, func() bool { lost, _ := st.written.losses(); return len(lost) >= 3 })

	wantLost := []lostWrite{{"categories", cat}, {"pets", pet}, {"orders", order}}
	raw := ts.get(t, ts.admin+"/readyz")
	var body struct {
		Status string
		Lost   []lostWrite `json:"lost_writes"`
	}
	if err := json.Unmarshal([]byte(raw), &body); err != nil || body.Status != "ready" || !slices.Equal(body.Lost, wantLost) {
		t.Errorf("the admin /readyz %s, want ready with lost writes %+v", raw, wantLost)
	}
	if r := ts.do(t, "GET", "/readyz", "", ""); r.status != 200 || string(r.body) != `{"status":"ready"}`+"\n" {
		t.Errorf("the API listener's /readyz %d %q, want 200 and the status alone", r.status, r.body)
	}
	log := waitLog(lostLine, 3) // and none after the ordinary failover
	for _, w := range wantLost {
		found := "missing"
		if w.Table == "categories" {
			found = `"another row holds its id"`
		}
		want := fmt.Sprintf("table=%s id=%d found=%s\n", w.Table, w.ID, found)
		if !strings.Contains(log, lostLine) || strings.Count(log, want) != 1 {
			t.Errorf("no ERROR line ending %q", want)
		}
	}
	metrics := ts.get(t, ts.admin+"/metrics")
	for _, table := range lostTables {
		if line := `petstore_db_lost_writes_total{table="` + table + `"} 1`; !strings.Contains(metrics, "\n"+line+"\n") {
			t.Errorf("the metrics have no line %q", line)
		}
	}
	if n := strings.Count(ts.stderr.String(), warning); n != 1 {
		t.Errorf("%d WARNs that the last synchronous standby went, want still 1", n)
	}
}

// TestPostgresChangedElsewhereIsNoLoss: an instance's last creates that
// another instance then changes or deletes (acknowledged changes) are no
// loss in its check; a row that is gone with no delete noted still is.
func TestPostgresChangedElsewhereIsNoLoss(t *testing.T) {
	db := postgresSchema(t, needPostgres(t))
	a, b := openTestStore(t, db).(*pgStore), openTestStore(t, db).(*pgStore)
	ctx := context.Background()
	c, err := a.CreateCategory(ctx, Category{Name: "Dogs"}, foldName("Dogs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.CreatePet(ctx, Pet{Name: "Rex", CategoryID: c.ID, Status: "available"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := a.CreateOrder(ctx, Order{PetID: p.ID, Quantity: 1, Status: "placed", CreatedAt: "2026-11-29T07:00:00Z"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteOrder(ctx, o.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReplacePet(ctx, Pet{ID: p.ID, Name: "Max", CategoryID: c.ID, Status: "sold"}, ""); err != nil {
		t.Fatal(err)
	}
	if err := a.checkWrites(ctx, true); err != nil {
		t.Fatal(err)
	}
	if lost := a.Replication().Lost; len(lost) != 0 {
		t.Fatalf("changed and deleted by another instance, judged lost: %v", lost)
	}
	// The pet gone without a delete noted (a database back in time): lost.
	if _, err := a.pool.Exec(ctx, "DELETE FROM pets WHERE id = $1", p.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.checkWrites(ctx, true); err != nil {
		t.Fatal(err)
	}
	if lost := a.Replication().Lost; len(lost) != 1 || lost[0] != (lostWrite{Table: "pets", ID: p.ID}) {
		t.Fatalf("a pet gone without a delete: lost %v, want pets %d", lost, p.ID)
	}
}
