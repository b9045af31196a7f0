-- Schema 0011 (issue 46): pets may be replaced and deleted, orders deleted.
-- Their identity sequences never hand out an id twice, deletes or not;
-- each row gains version, 1 when made, grown by every change: its ETag,
-- which If-Match names. A column with a constant default is added without
-- rewriting the table, and instances of the schema before write rows
-- that get it.
ALTER TABLE pets ADD COLUMN version bigint NOT NULL DEFAULT 1;
ALTER TABLE orders ADD COLUMN version bigint NOT NULL DEFAULT 1;
