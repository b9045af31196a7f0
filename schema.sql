-- The full current schema, for reading. The migrations in migrations/sqlite/ are what
-- creates it; TestSchemaMatchesMigrations checks that the two agree.

CREATE TABLE categories (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL,
	-- fold is the case-folded, NFC-normalised name: uniqueness is enforced on it.
	fold        TEXT NOT NULL UNIQUE,
	description TEXT,
	-- name_cmp is the name's comparison key (compareName: NFKC, case-folded,
	-- without default-ignorables), unique too; NULL until filled, and for a
	-- lookalike stored before schema 9 whose key an earlier row holds.
	name_cmp    TEXT
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
	-- expires_at: when the key stops working (RFC 3339, UTC); NULL: never.
	expires_at   TEXT,
	-- scope: a read key may only GET and HEAD; its POST is 403.
	scope        TEXT NOT NULL DEFAULT 'write' CHECK (scope IN ('read', 'write')),
	-- replaces: the key this one was rotated from (keys rotate); NULL for a new key.
	replaces     INTEGER REFERENCES api_keys (id),
	-- lineage: the id of the first key of its rotations, whose limits, quota, ban and
	-- Idempotency-Key scope it shares; NULL for that first key itself.
	lineage      INTEGER REFERENCES api_keys (id),
	-- last_used_at: the minute of its last request, written with the day counts.
	last_used_at TEXT,
	CHECK (CASE plan WHEN 'enterprise' THEN rpm IS NOT NULL AND rpd IS NOT NULL
	                 ELSE rpm IS NULL AND rpd IS NULL END)
) STRICT;

CREATE INDEX api_keys_seq ON api_keys (seq);
CREATE INDEX api_keys_lineage ON api_keys (lineage);

-- usage counts each key's requests per UTC day, for the daily quota.
CREATE TABLE usage (
	key_id INTEGER NOT NULL REFERENCES api_keys (id),
	day    TEXT NOT NULL, -- YYYY-MM-DD, UTC
	count  INTEGER NOT NULL CHECK (count >= 0),
	PRIMARY KEY (key_id, day)
) STRICT, WITHOUT ROWID;

-- pets are the beta pets area; each belongs to an existing category. A pet
-- may be replaced and deleted: AUTOINCREMENT, so that no id comes back, and
-- version, 1 when made and grown by every change (its ETag).
CREATE TABLE pets (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	name        TEXT NOT NULL,
	category_id INTEGER NOT NULL REFERENCES categories (id),
	status      TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold')),
	version     INTEGER NOT NULL DEFAULT 1
) STRICT;

CREATE INDEX pets_category ON pets (category_id);

-- orders are the experimental store area; each is for an existing pet. An
-- order may be deleted: AUTOINCREMENT and version, as pets.
CREATE TABLE orders (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	pet_id     INTEGER NOT NULL REFERENCES pets (id),
	quantity   INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 100),
	status     TEXT NOT NULL CHECK (status IN ('placed')),
	created_at TEXT NOT NULL, -- RFC 3339, UTC
	version    INTEGER NOT NULL DEFAULT 1
) STRICT;

CREATE INDEX orders_pet ON orders (pet_id);

-- idempotency keeps the answer (201, or 409 conflict) of each POST sent with an
-- Idempotency-Key, per API key, written in the transaction of the row it created.
CREATE TABLE idempotency (
	key_id      INTEGER NOT NULL REFERENCES api_keys (id),
	idem_key    TEXT NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
	-- fingerprint is SHA-256 of the request's method, path and body.
	fingerprint BLOB NOT NULL CHECK (length(fingerprint) = 32),
	status      INTEGER NOT NULL CHECK (status IN (201, 409)),
	body        BLOB NOT NULL,
	created_us  INTEGER NOT NULL, -- Unix microseconds; kept for --idempotency-ttl after
	PRIMARY KEY (key_id, idem_key)
) STRICT, WITHOUT ROWID;

CREATE INDEX idempotency_created ON idempotency (created_us);

-- deployment holds the one random id of this database (made by migration 0008,
-- carried by petstore copy): the default --redis-prefix is petstore:<id>:.
CREATE TABLE deployment (
	one INTEGER PRIMARY KEY DEFAULT 1 CHECK (one = 1),
	id  TEXT NOT NULL CHECK (length(id) BETWEEN 1 AND 64)
) STRICT;

-- acme_cache holds what HTTPS from an ACME CA keeps (--acme-domains): the account
-- key, each name's certificate and private key, and the challenge answers of an
-- order under way, as autocert's cache blobs by key, per CA (its directory URL).
CREATE TABLE acme_cache (
	directory  TEXT NOT NULL CHECK (length(directory) BETWEEN 1 AND 2048),
	key        TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 512),
	data       BLOB NOT NULL,
	updated_at TEXT NOT NULL, -- RFC 3339, UTC
	PRIMARY KEY (directory, key)
) STRICT, WITHOUT ROWID;

CREATE UNIQUE INDEX categories_name_cmp ON categories (name_cmp) WHERE name_cmp IS NOT NULL;
CREATE INDEX categories_name_cmp_unfilled ON categories (id) WHERE name_cmp IS NULL;
