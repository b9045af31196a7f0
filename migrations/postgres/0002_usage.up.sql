-- usage counts each key's requests per UTC day, for the daily quota.
CREATE TABLE usage (
	key_id bigint NOT NULL REFERENCES api_keys (id),
	day    date NOT NULL, -- UTC
	count  bigint NOT NULL CHECK (count >= 0),
	PRIMARY KEY (key_id, day)
);
