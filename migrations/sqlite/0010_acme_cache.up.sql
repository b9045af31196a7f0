-- Schema 0010: HTTPS from an ACME CA (DECISIONS.md section 13) keeps its
-- state in the database, so that backups and petstore copy carry it and a
-- restart asks the CA for nothing: the account key, each name's
-- certificate with its private key, and the challenge answers of an order
-- under way (which any instance on the database can then give). Each row
-- is a blob of autocert's cache under its key, per CA: the directory URL,
-- so that certificates from a staging CA are never served once
-- --acme-directory names another.
CREATE TABLE acme_cache (
	directory  TEXT NOT NULL CHECK (length(directory) BETWEEN 1 AND 2048),
	key        TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 512),
	data       BLOB NOT NULL,
	updated_at TEXT NOT NULL, -- RFC 3339, UTC
	PRIMARY KEY (directory, key)
) STRICT, WITHOUT ROWID;
