-- Categories, pets and orders without AUTOINCREMENT (issue 19): it made
-- every insert read and write sqlite_sequence, and every commit write one
-- more page; without it a create ran 13% less CPU and 16% more creates a
-- second (BENCHMARKS.md). Ids stay what they were, and no id a client has
-- seen is handed out again: a new row gets the largest id + 1, and no
-- committed row of these tables is ever deleted (the Store's rules, on the
-- interface in store.go). api_keys keeps AUTOINCREMENT.
--
-- SQLite's way of changing a table's definition: a new table, the rows
-- copied with their ids, the old one dropped, the new one renamed; with
-- foreign keys off, as every migration runs (sqlite_migrate.go), and in
-- the one transaction golang-migrate wraps a migration in.
CREATE TABLE categories_new (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL,
	-- fold is the case-folded, NFC-normalised name: uniqueness is enforced on it.
	fold        TEXT NOT NULL UNIQUE,
	description TEXT
) STRICT;
INSERT INTO categories_new (id, name, fold, description) SELECT id, name, fold, description FROM categories;
DROP TABLE categories;
ALTER TABLE categories_new RENAME TO categories;

CREATE TABLE pets_new (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL,
	category_id INTEGER NOT NULL REFERENCES categories (id),
	status      TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
) STRICT;
INSERT INTO pets_new (id, name, category_id, status) SELECT id, name, category_id, status FROM pets;
DROP TABLE pets;
ALTER TABLE pets_new RENAME TO pets;
CREATE INDEX pets_category ON pets (category_id);

CREATE TABLE orders_new (
	id         INTEGER PRIMARY KEY,
	pet_id     INTEGER NOT NULL REFERENCES pets (id),
	quantity   INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 100),
	status     TEXT NOT NULL CHECK (status IN ('placed')),
	created_at TEXT NOT NULL -- RFC 3339, UTC
) STRICT;
INSERT INTO orders_new (id, pet_id, quantity, status, created_at) SELECT id, pet_id, quantity, status, created_at FROM orders;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;
CREATE INDEX orders_pet ON orders (pet_id);
