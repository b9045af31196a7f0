-- Schema 0011 (issue 46): pets may be replaced and deleted, orders deleted.
-- Their identity sequences never hand out an id twice, deletes or not;
-- each row gains version, 1 when made, grown by every change: its ETag,
-- which If-Match names. A column with a constant default is added without
-- rewriting the table, and instances of the schema before write rows
-- that get it.
ALTER TABLE pets ADD COLUMN version bigint NOT NULL DEFAULT 1;
ALTER TABLE orders ADD COLUMN version bigint NOT NULL DEFAULT 1;
-- A delete of a pet or an order notes the id in deleted_rows, in its own
-- statement: an instance whose last create it was then tells the row
-- deleted by an acknowledged change from a row lost by a database that
-- went back in time (postgres_lostwrites.go). One row per delete; ids are
-- never reused, so a row is noted once.
CREATE TABLE deleted_rows (
  tbl text NOT NULL,
  id bigint NOT NULL,
  deleted_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tbl, id)
);
