-- Schema 0011 (issue 46): pets may be replaced and deleted, orders deleted.
-- Their ids must never be given again, and without AUTOINCREMENT SQLite
-- gives a new row the largest id + 1, so a deleted highest row's id would
-- come back: pets and orders are rebuilt with AUTOINCREMENT (categories,
-- never deleted, keep the cheaper ids of 0007). Each row gains version, 1
-- when made, grown by every change: its ETag, which If-Match names.
--
-- As 0007: a new table, the rows copied with their ids (which sets
-- sqlite_sequence past them), the old one dropped, the new one renamed;
-- foreign keys off (sqlite_migrate.go), in the one transaction
-- golang-migrate wraps a migration in (no BEGIN or COMMIT here).
CREATE TABLE pets_new (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	name        TEXT NOT NULL,
	category_id INTEGER NOT NULL REFERENCES categories (id),
	status      TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold')),
	version     INTEGER NOT NULL DEFAULT 1
) STRICT;
INSERT INTO pets_new (id, name, category_id, status) SELECT id, name, category_id, status FROM pets;
DROP TABLE pets;
ALTER TABLE pets_new RENAME TO pets;
CREATE INDEX pets_category ON pets (category_id);

CREATE TABLE orders_new (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	pet_id     INTEGER NOT NULL REFERENCES pets (id),
	quantity   INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 100),
	status     TEXT NOT NULL CHECK (status IN ('placed')),
	created_at TEXT NOT NULL, -- RFC 3339, UTC
	version    INTEGER NOT NULL DEFAULT 1
) STRICT;
INSERT INTO orders_new (id, pet_id, quantity, status, created_at) SELECT id, pet_id, quantity, status, created_at FROM orders;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;
CREATE INDEX orders_pet ON orders (pet_id);
