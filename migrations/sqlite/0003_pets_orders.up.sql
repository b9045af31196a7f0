-- pets are the beta pets area; each belongs to an existing category.
CREATE TABLE pets (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	name        TEXT NOT NULL,
	category_id INTEGER NOT NULL REFERENCES categories (id),
	status      TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
) STRICT;

CREATE INDEX pets_category ON pets (category_id);

-- orders are the experimental store area; each is for an existing pet.
CREATE TABLE orders (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	pet_id     INTEGER NOT NULL REFERENCES pets (id),
	quantity   INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 100),
	status     TEXT NOT NULL CHECK (status IN ('placed')),
	created_at TEXT NOT NULL -- RFC 3339, UTC
) STRICT;

CREATE INDEX orders_pet ON orders (pet_id);
