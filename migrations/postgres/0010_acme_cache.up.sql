-- Schema 0010: HTTPS from an ACME CA (DECISIONS.md section 13) keeps its
-- state in the database, so that pg_dump and petstore copy carry it, a
-- restart asks the CA for nothing, and every instance on the database
-- serves the one certificate: the account key, each name's certificate
-- with its private key, and the challenge answers of an order under way
-- (which any instance can then give, whichever the CA reaches). Each row
-- is a blob of autocert's cache under its key, per CA: the directory URL,
-- so that certificates from a staging CA are never served once
-- --acme-directory names another.
CREATE TABLE acme_cache (
	directory  text NOT NULL CHECK (length(directory) BETWEEN 1 AND 2048),
	key        text NOT NULL CHECK (length(key) BETWEEN 1 AND 512),
	data       bytea NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (directory, key)
);
