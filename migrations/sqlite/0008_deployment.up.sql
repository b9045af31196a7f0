-- The deployment id (DECISIONS.md section 15): a random id of this
-- database, made once here, so that every instance on it agrees, and
-- carried by petstore copy, which overwrites the target's own. The default
-- --redis-prefix is petstore:<id>:, so that two deployments on one Redis
-- (whose key ids both start at 1) never share buckets, counts or bans.
-- One row: one is 1 and the primary key.
CREATE TABLE deployment (
	one INTEGER PRIMARY KEY DEFAULT 1 CHECK (one = 1),
	id  TEXT NOT NULL CHECK (length(id) BETWEEN 1 AND 64)
) STRICT;
INSERT INTO deployment (id) VALUES (lower(hex(randomblob(8))));
