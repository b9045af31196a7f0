CREATE TABLE categories (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	name        TEXT NOT NULL,
	-- fold is the case-folded, NFC-normalised name: uniqueness is enforced on it.
	fold        TEXT NOT NULL UNIQUE,
	description TEXT
) STRICT;

CREATE TABLE api_keys (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	hash         BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),
	name         TEXT NOT NULL DEFAULT '',
	plan         TEXT NOT NULL CHECK (plan IN ('free', 'pro', 'business', 'enterprise')),
	rpm          INTEGER CHECK (rpm > 0),
	rpd          INTEGER CHECK (rpd > 0),
	env          TEXT NOT NULL CHECK (env IN ('production', 'staging')),
	created_at   TEXT NOT NULL,
	revoked_at   TEXT,
	banned_until TEXT,
	-- seq grows with every change to a row, so a running server can poll for changes.
	seq          INTEGER NOT NULL DEFAULT 0,
	CHECK (CASE plan WHEN 'enterprise' THEN rpm IS NOT NULL AND rpd IS NOT NULL
	                 ELSE rpm IS NULL AND rpd IS NULL END)
) STRICT;

CREATE INDEX api_keys_seq ON api_keys (seq);
