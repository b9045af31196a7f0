-- idempotency keeps the answer (201, or 409 conflict) of each POST sent with an
-- Idempotency-Key, per API key, written in the transaction of the row it created.
CREATE TABLE idempotency (
	key_id      INTEGER NOT NULL REFERENCES api_keys (id),
	idem_key    TEXT NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
	-- fingerprint is SHA-256 of the request's method, path and body.
	fingerprint BLOB NOT NULL CHECK (length(fingerprint) = 32),
	status      INTEGER NOT NULL CHECK (status IN (201, 409)),
	body        BLOB NOT NULL,
	created_us  INTEGER NOT NULL, -- Unix microseconds; kept for --idempotency-ttl after
	PRIMARY KEY (key_id, idem_key)
) STRICT, WITHOUT ROWID;

CREATE INDEX idempotency_created ON idempotency (created_us);
