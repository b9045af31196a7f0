-- The deployment id (DECISIONS.md section 15): a random id of this
-- database, made once here (instances that start together migrate one at a
-- time, so they all read the same id), and carried by petstore copy, which
-- overwrites the target's own. The default --redis-prefix is
-- petstore:<id>:, so that two deployments on one Redis (whose key ids both
-- start at 1) never share buckets, counts or bans. 16 hex digits, as
-- SQLite's; gen_random_uuid() is in core from PostgreSQL 13 (its own hex has
-- a fixed version digit, hence the md5). One row: one is 1 and the primary key.
CREATE TABLE deployment (
	one integer PRIMARY KEY DEFAULT 1 CHECK (one = 1),
	id  text NOT NULL CHECK (length(id) BETWEEN 1 AND 64)
);
INSERT INTO deployment (id) VALUES (substr(md5(gen_random_uuid()::text), 1, 16));
