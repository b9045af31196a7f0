-- Rotation (keys rotate, DECISIONS.md section 11): a key made by rotating
-- another replaces it, and every key rotated from one first key shares that
-- key's lineage: one minute bucket, one day quota (usage is counted under
-- the first key's id), one ban, one Idempotency-Key scope.
-- replaces: the key this one was rotated from; NULL for a key created anew.
ALTER TABLE api_keys ADD COLUMN replaces INTEGER REFERENCES api_keys (id);
-- lineage: the id of the lineage's first key; NULL for that first key itself.
ALTER TABLE api_keys ADD COLUMN lineage INTEGER REFERENCES api_keys (id);
-- last_used_at: the minute of the key's last request (RFC 3339, UTC),
-- written with the day counts, not per request.
ALTER TABLE api_keys ADD COLUMN last_used_at TEXT;
CREATE INDEX api_keys_lineage ON api_keys (lineage);
