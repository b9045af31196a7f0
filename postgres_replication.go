// postgres_replication.go owns what petstore shows of PostgreSQL's
// synchronous replication (DECISIONS.md sections 19 and 21): the settings
// and the synchronous standbys the primary reports, read at open, at every
// reconnection and each minute (postgres_lostwrites.go's watch), for the
// admin /readyz, the metrics, the start-up warning and the one when the
// last synchronous standby goes.

package main

import (
	"context"
	"log/slog"
	"time"
)

// pgReplicationEvery is how often the store reads the replication again.
const pgReplicationEvery = time.Minute

// pgReadReplication reads the session's synchronous_commit, the primary's
// synchronous_standby_names, and its standbys that confirm commits. A
// role without pg_read_all_stats (in pg_monitor) sees its standbys' rows
// with a NULL sync_state: then the count is unknown.
const pgReadReplication = `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
	count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')), count(*) FILTER (WHERE sync_state IS NULL)
	FROM pg_stat_replication`

// readReplication reads the replication and keeps it for Replication. A
// read that fails keeps the last one. A primary that had a synchronous
// standby and has none now gets a WARN, once per such change.
func (s *pgStore) readReplication(ctx context.Context) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	r := replication{Shown: true, Hosts: s.hosts}
	var unknown int
	if err := s.pool.QueryRow(ctx, pgReadReplication).Scan(&r.SyncCommit, &r.SyncNames, &r.SyncStandbys, &unknown); err != nil {
		return describePostgres(err)
	}
	if unknown > 0 {
		r.SyncStandbys = -1
	}
	if old := s.repl.Swap(&r); old != nil && old.SyncStandbys > 0 && r.SyncStandbys == 0 && s.log != nil {
		s.log.Warn("the primary has no synchronous standby left: a failover may lose acknowledged writes",
			"synchronous_commit", r.SyncCommit, "synchronous_standby_names", r.SyncNames)
	}
	return nil
}

func (s *pgStore) Replication() replication {
	r := replication{Shown: true, Hosts: s.hosts, SyncStandbys: -1}
	if last := s.repl.Load(); last != nil {
		r = *last
	}
	r.Lost, r.LostBy = s.written.losses()
	return r
}

// pgWarnReplication warns, at start, when the URL lists several hosts (a
// failover is expected) but an acknowledged write may be on the primary
// alone, or when the role may not tell.
func pgWarnReplication(log *slog.Logger, r replication) {
	switch {
	case !r.Shown || r.Hosts < 2 || r.safe():
	case r.SyncStandbys < 0:
		log.Warn("cannot tell whether the primary has a synchronous standby: grant pg_monitor to petstore's database role",
			"synchronous_commit", r.SyncCommit, "synchronous_standby_names", r.SyncNames)
	default:
		log.Warn("several database hosts, but no synchronous standby: a failover may lose acknowledged writes",
			"synchronous_standbys", r.SyncStandbys, "synchronous_commit", r.SyncCommit, "synchronous_standby_names", r.SyncNames)
	}
}
