-- The life of a key (DECISIONS.md section 11): when it stops working, and
-- whether it may write.
-- expires_at: NULL: never. From then on the key is refused (401).
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
-- scope: a read key may only GET and HEAD; its POST is 403.
ALTER TABLE api_keys ADD COLUMN scope text NOT NULL DEFAULT 'write' CHECK (scope IN ('read', 'write'));
