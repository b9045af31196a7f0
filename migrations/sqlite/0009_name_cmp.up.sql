-- Schema 0009: category names are unique under a second key, name_cmp (the
-- NFKC form, case-folded, without default-ignorable code points: names.go's
-- compareName), beside fold. SQL cannot compute it, so the column starts
-- NULL and petstore fills it when it opens the database (fillNameCmp), in
-- id order, leaving NULL a row whose key an earlier row holds: lookalikes
-- stored before keep their ids, and the earlier row's key refuses new ones.
ALTER TABLE categories ADD COLUMN name_cmp TEXT;
CREATE UNIQUE INDEX categories_name_cmp ON categories (name_cmp) WHERE name_cmp IS NOT NULL;
-- The rows not filled yet, and the lookalikes left NULL.
CREATE INDEX categories_name_cmp_unfilled ON categories (id) WHERE name_cmp IS NULL;
