package main

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPostgresStaleIfMatchOnTwoInstances: two instances on one database
// get a PUT of the same pet with the same If-Match at once, round after
// round: exactly one wins (200, the next ETag), the other is 412, checked
// on the primary in the change's own statement.
func TestPostgresStaleIfMatchOnTwoInstances(t *testing.T) {
	t.Parallel()
	db := postgresSchema(t, needPostgres(t))
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 2)
	ts[0].do(t, "POST", "/v1/categories", key, `{"name":"Dog"}`)
	ts[0].do(t, "POST", "/v1/pets", key, `{"name":"Rex","categoryId":1}`)
	const rounds = 20
	for round := 1; round <= rounds; round++ {
		tag := fmt.Sprintf(`"%d"`, round)
		var statuses [2]int
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range ts {
			wg.Go(func() {
				<-start
				r, _, err := pmSend(s, 10*time.Second, "PUT", "/v1/pets/1", key, fmt.Sprintf(`{"name":"Rex %d-%d","categoryId":1}`, round, i), "If-Match", tag)
				if err != nil {
					t.Errorf("round %d, instance %d: %v", round, i, err)
				}
				statuses[i] = r.status
			})
		}
		close(start)
		wg.Wait()
		if !(statuses == [2]int{200, 412} || statuses == [2]int{412, 200}) {
			t.Fatalf("round %d: %v, want exactly one 200 and one 412", round, statuses)
		}
	}
	if r := ts[1].do(t, "GET", "/v1/pets/1", key, ""); r.header.Get("ETag") != fmt.Sprintf(`"%d"`, rounds+1) {
		t.Errorf("after %d rounds: ETag %q", rounds, r.header.Get("ETag"))
	}
}

// TestPostgresPagingCompleteUnderCreatesAndDeletes: while two instances
// create and delete pets (their own new ones), and place orders for pets
// that the other instance deletes at the same moment, a reader paging the
// pet list through both instances in turn sees every pet that existed
// throughout exactly once, in ascending id order; no create and no delete
// fails (an order for a pet deleted first is 400, a delete of a pet an
// order named first is 409: never a 503).
func TestPostgresPagingCompleteUnderCreatesAndDeletes(t *testing.T) {
	t.Parallel()
	db := postgresSchema(t, needPostgres(t))
	key := pmBigKey(t, db)
	ts := pmStart(t, db, key, 2)
	ts[0].do(t, "POST", "/v1/categories", key, `{"name":"Dog"}`)
	stable := map[int64]bool{}
	for i := range 40 {
		p := decode[Pet](t, ts[i%2].do(t, "POST", "/v1/pets", key, fmt.Sprintf(`{"name":"Stable %d","categoryId":1}`, i)))
		stable[p.ID] = true
	}
	const writeFor = 1500 * time.Millisecond
	var churn, races atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w, s := range ts {
		other := ts[1-w]
		wg.Go(func() {
			for i := 0; time.Since(start) < writeFor && i < 300; i++ {
				r, _, err := pmSend(s, 10*time.Second, "POST", "/v1/pets", key, fmt.Sprintf(`{"name":"Churn %d-%d","categoryId":1}`, w, i))
				if err != nil || r.status != 201 {
					t.Errorf("writer %d: create: %d %s %v", w, r.status, r.body, err)
					return
				}
				var p Pet
				json.Unmarshal(r.body, &p)
				// An order on this instance, a delete on the other, at once.
				var order, del response
				var oerr, derr error
				var both sync.WaitGroup
				both.Go(func() {
					order, _, oerr = pmSend(s, 10*time.Second, "POST", "/v1/store/orders", key, fmt.Sprintf(`{"petId":%d,"quantity":1}`, p.ID))
				})
				both.Go(func() {
					del, _, derr = pmSend(other, 10*time.Second, "DELETE", fmt.Sprintf("/v1/pets/%d", p.ID), key, "")
				})
				both.Wait()
				ok := oerr == nil && derr == nil && (order.status == 201 && del.status == 409 || order.status == 400 && del.status == 204)
				if !ok {
					t.Errorf("writer %d, pet %d: order %d %s (%v), delete %d %s (%v): want 201 and 409, or 400 and 204", w, p.ID, order.status, order.body, oerr, del.status, del.body, derr)
					return
				}
				if del.status == 409 { // the order won: cancel it and delete the pet
					var o Order
					json.Unmarshal(order.body, &o)
					if r, _, err := pmSend(other, 10*time.Second, "DELETE", fmt.Sprintf("/v1/store/orders/%d", o.ID), key, ""); err != nil || r.status != 204 {
						t.Errorf("writer %d: delete order %d: %d %v", w, o.ID, r.status, err)
						return
					}
					if r, _, err := pmSend(s, 10*time.Second, "DELETE", fmt.Sprintf("/v1/pets/%d", p.ID), key, ""); err != nil || r.status != 204 {
						t.Errorf("writer %d: delete pet %d: %d %v", w, p.ID, r.status, err)
						return
					}
				} else {
					races.Add(1)
				}
				churn.Add(1)
			}
		})
	}
	seen := map[int64]int{}
	after, last, pages := int64(0), int64(0), 0
	for passes := 0; time.Since(start) < writeFor || passes == 0; passes++ {
		after = 0
		for pages < 5000 {
			pages++
			r, _, err := pmSend(ts[pages%2], 10*time.Second, "GET", fmt.Sprintf("/v1/pets?limit=7&after_id=%d", after), key, "")
			if err != nil || r.status != 200 {
				t.Fatalf("page after %d: %d %s %v", after, r.status, r.body, err)
			}
			var page []Pet
			json.Unmarshal(r.body, &page)
			last = after
			for _, p := range page {
				if p.ID <= last {
					t.Fatalf("page after %d holds %d after %d: not ascending", after, p.ID, last)
				}
				last = p.ID
				if stable[p.ID] {
					seen[p.ID]++
				}
			}
			if len(page) < 7 {
				break
			}
			after = last
		}
		for id := range stable {
			if seen[id] != passes+1 {
				t.Fatalf("pass %d: stable pet %d seen %d times, want once a pass", passes, id, seen[id]-passes)
			}
		}
	}
	wg.Wait()
	if churn.Load() < 20 {
		t.Errorf("only %d pets made and deleted in %v: the test did not load the instances", churn.Load(), writeFor)
	}
	t.Logf("%d pets made and deleted (%d deletes beat their order), %d pages read", churn.Load(), races.Load(), pages)
}
