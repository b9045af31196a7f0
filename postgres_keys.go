// postgres_keys.go owns PostgreSQL's queries of the API keys (their bans
// included) and of the day counts, which every instance adds to and reads.

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

const pgKeyColumns = "id, hash, name, plan, rpm, rpd, env, created_at, revoked_at IS NOT NULL, banned_until, expires_at, scope, " +
	"coalesce(lineage, id), coalesce(replaces, 0), last_used_at, seq"

func pgScanKey(row pgx.CollectableRow) (apiKey, error) {
	var k apiKey
	var hash []byte
	var rpm, rpd *int64
	var banned, expires, used *time.Time
	if err := row.Scan(&k.ID, &hash, &k.Name, &k.Plan, &rpm, &rpd, &k.Env, &k.CreatedAt, &k.Revoked, &banned, &expires, &k.Scope,
		&k.Lineage, &k.Replaces, &used, &k.seq); err != nil {
		return k, err
	}
	if used != nil {
		k.LastUsedAt = used.UTC()
	}
	if expires != nil {
		k.ExpiresAt = expires.UTC()
	}
	copy(k.Hash[:], hash)
	if rpm != nil && rpd != nil {
		k.RPM, k.RPD = *rpm, *rpd
	}
	k.CreatedAt = k.CreatedAt.UTC()
	if banned != nil {
		k.BannedUntil = banned.UTC()
	}
	return k, nil
}

// pgLockKeys is the advisory lock of the changes to api_keys (see
// pgLockCatalog for why advisory).
const pgLockKeys = "SELECT pg_advisory_xact_lock(1801812339, " + pgSchemaKey + ")"

// keyWrite runs fn in a transaction that holds pgLockKeys, taken before the
// change's seq is drawn (nextSeq) and held until its commit is visible:
// changes become visible in seq order, so a keyring that polls for seq
// above the last it saw never misses one, however the instances' writes
// interleave. Keys change rarely; the lock does not block reads.
func (s *pgStore) keyWrite(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: "BEGIN; " + pgLockKeys}, fn)
	if err != nil && !errors.Is(err, errNotFound) {
		return fmt.Errorf("%s: %w", what, describePostgres(err))
	}
	return err
}

func (s *pgStore) CreateKey(ctx context.Context, spec keySpec) (apiKey, error) {
	rpm, rpd := spec.limits()
	var expires *time.Time
	if !spec.ExpiresAt.IsZero() {
		expires = &spec.ExpiresAt
	}
	var k apiKey
	err := s.keyWrite(ctx, "insert key", func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, "INSERT INTO api_keys (hash, name, plan, rpm, rpd, env, created_at, expires_at, scope, seq) "+
			"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "+nextSeq+") RETURNING "+pgKeyColumns,
			spec.Hash[:], spec.Name, spec.Plan, rpm, rpd, spec.Env, s.now().UTC().Truncate(time.Second), expires, spec.scope())
		var err error
		k, err = pgx.CollectExactlyOneRow(rows, pgScanKey)
		return err
	})
	return k, err
}

// CreateFirstKey checks and inserts under the table's lock: of instances
// that start at once on a new database, the first to take it creates the
// key, and the others find it there.
func (s *pgStore) CreateFirstKey(ctx context.Context, hash [32]byte, name, env string) (apiKey, bool, error) {
	var keys []apiKey
	err := s.keyWrite(ctx, "insert first key", func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, "INSERT INTO api_keys (hash, name, plan, env, created_at, seq) "+
			"SELECT $1, $2, 'free', $3, $4, "+nextSeq+" WHERE NOT EXISTS (SELECT 1 FROM api_keys) RETURNING "+pgKeyColumns,
			hash[:], name, env, s.now().UTC().Truncate(time.Second))
		var err error
		keys, err = pgx.CollectRows(rows, pgScanKey)
		return err
	})
	if err != nil || len(keys) == 0 {
		return apiKey{}, false, err
	}
	return keys[0], true, nil
}

func (s *pgStore) KeysSince(ctx context.Context, seq int64) ([]apiKey, error) {
	return pgRead(ctx, s, "list keys", pgScanKey, "SELECT "+pgKeyColumns+" FROM api_keys WHERE seq > $1 ORDER BY id", seq)
}

// RotateKey inserts the new key and shortens the old one's life in one
// transaction under the keys' lock.
func (s *pgStore) RotateKey(ctx context.Context, id int64, hash [32]byte, until time.Time) (apiKey, error) {
	var k apiKey
	err := s.keyWrite(ctx, fmt.Sprintf("rotate key %d", id), func(tx pgx.Tx) error {
		var revoked bool
		switch err := tx.QueryRow(ctx, "SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = $1 FOR UPDATE", id).Scan(&revoked); {
		case errors.Is(err, pgx.ErrNoRows):
			return errNotFound
		case err != nil:
			return err
		case revoked:
			return errRevoked
		}
		rows, _ := tx.Query(ctx, `INSERT INTO api_keys (hash, name, plan, rpm, rpd, env, created_at, banned_until, scope, replaces, lineage, seq)
			SELECT $1, name, plan, rpm, rpd, env, $2, banned_until, scope, id, coalesce(lineage, id), `+nextSeq+` FROM api_keys WHERE id = $3
			RETURNING `+pgKeyColumns, hash[:], s.now().UTC().Truncate(time.Second), id)
		var err error
		if k, err = pgx.CollectExactlyOneRow(rows, pgScanKey); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE api_keys SET expires_at = least(coalesce(expires_at, $1), $1), seq = "+nextSeq+" WHERE id = $2", until, id)
		return err
	})
	if errors.Is(err, errRevoked) {
		return apiKey{}, errRevoked
	}
	return k, err
}

func (s *pgStore) RevokeKey(ctx context.Context, id int64) error {
	return s.updateKey(ctx, id, "revoked_at = coalesce(revoked_at, $1)", s.now().UTC().Truncate(time.Second))
}

// SetKeyBan stores the ban's end rounded up to PostgreSQL's microsecond, so
// that waiting out its Retry-After is enough after a restart too, on every
// key of the lineage.
func (s *pgStore) SetKeyBan(ctx context.Context, id int64, until time.Time) error {
	var v any
	if !until.IsZero() {
		t := until.Truncate(time.Microsecond)
		if t.Before(until) {
			t = t.Add(time.Microsecond)
		}
		v = t
	}
	return s.keyWrite(ctx, fmt.Sprintf("ban key %d", id), func(tx pgx.Tx) error {
		// The lineage's rows are locked in id order first, as AddDayCounts
		// stamps them, so that the two never deadlock (an UPDATE alone
		// would lock them in the table's physical order).
		rows, _ := tx.Query(ctx, `SELECT id FROM api_keys
			WHERE (SELECT coalesce(lineage, id) FROM api_keys WHERE id = $1) IN (id, lineage) ORDER BY id FOR UPDATE`, id)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return errNotFound
		}
		_, err = tx.Exec(ctx, "UPDATE api_keys SET banned_until = $1, seq = "+nextSeq+" WHERE id = ANY($2)", v, ids)
		return err
	})
}

func (s *pgStore) updateKey(ctx context.Context, id int64, set string, arg any) error {
	return s.keyWrite(ctx, fmt.Sprintf("update key %d", id), func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "UPDATE api_keys SET "+set+", seq = "+nextSeq+" WHERE id = $2", arg, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errNotFound
		}
		return nil
	})
}

func (s *pgStore) DayCounts(ctx context.Context, day string) (map[int64]int64, error) {
	type count struct{ id, n int64 }
	rows, err := pgRead(ctx, s, "read day counts", func(row pgx.CollectableRow) (count, error) {
		var c count
		err := row.Scan(&c.id, &c.n)
		return c, err
	}, "SELECT key_id, count FROM usage WHERE day = $1::text::date", day)
	if err != nil {
		return nil, err
	}
	counts := make(map[int64]int64, len(rows))
	for _, c := range rows {
		counts[c.id] = c.n
	}
	return counts, nil
}

// AddDayCounts adds the deltas in one transaction, in (key, day) order:
// instances that add to the same rows at once then lock them in the same
// order, and never deadlock.
func (s *pgStore) AddDayCounts(ctx context.Context, deltas []dayDelta, used []int64, at time.Time) error {
	sorted := slices.SortedFunc(slices.Values(deltas), func(a, b dayDelta) int {
		return cmp.Or(cmp.Compare(a.KeyID, b.KeyID), cmp.Compare(a.Day, b.Day))
	})
	ctx, cancel := s.op(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, d := range sorted {
			b.Queue(`INSERT INTO usage (key_id, day, count) VALUES ($1, $2::text::date, $3)
				ON CONFLICT (key_id, day) DO UPDATE SET count = usage.count + excluded.count`, d.KeyID, d.Day, d.N)
		}
		// One row at a time, in id order, as the counts (and SetKeyBan):
		// instances that stamp the same keys at once lock them in the same
		// order. A row is written only when its minute moves on: once a
		// minute per key, not once a second.
		minute := at.UTC().Truncate(time.Minute)
		for _, id := range slices.Sorted(slices.Values(used)) {
			b.Queue("UPDATE api_keys SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $1)", minute, id)
		}
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return fmt.Errorf("add day counts: %w", describePostgres(err))
	}
	return nil
}
