-- idempotency keeps the answer (201, or 409 conflict) of each POST sent with an
-- Idempotency-Key, per API key, written in the transaction of the row it created.
CREATE TABLE idempotency (
	key_id      bigint NOT NULL REFERENCES api_keys (id),
	idem_key    text NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
	-- fingerprint is SHA-256 of the request's method, path and body.
	fingerprint bytea NOT NULL CHECK (length(fingerprint) = 32),
	status      integer NOT NULL CHECK (status IN (201, 409)),
	body        bytea NOT NULL,
	created_us  bigint NOT NULL, -- Unix microseconds; kept for --idempotency-ttl after
	PRIMARY KEY (key_id, idem_key)
);

CREATE INDEX idempotency_created ON idempotency (created_us);

-- idempotency_running marks the keys of requests running now, on any instance,
-- until the transaction that stores their answer deletes the mark, or until
-- until_us if the instance died. It is unlogged: a crash of PostgreSQL empties
-- it, and it costs no WAL.
CREATE UNLOGGED TABLE idempotency_running (
	key_id   bigint NOT NULL,
	idem_key text NOT NULL,
	owner    bigint NOT NULL, -- the request's random token: only it may end its mark
	until_us bigint NOT NULL, -- Unix microseconds
	PRIMARY KEY (key_id, idem_key)
);
