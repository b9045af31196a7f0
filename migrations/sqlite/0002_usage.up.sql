-- usage counts each key's requests per UTC day, for the daily quota.
CREATE TABLE usage (
	key_id INTEGER NOT NULL REFERENCES api_keys (id),
	day    TEXT NOT NULL, -- YYYY-MM-DD, UTC
	count  INTEGER NOT NULL CHECK (count >= 0),
	PRIMARY KEY (key_id, day)
) STRICT, WITHOUT ROWID;
