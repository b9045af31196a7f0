-- Schema 0007 rebuilds SQLite's categories, pets and orders without
-- AUTOINCREMENT (migrations/sqlite/0007_no_autoincrement.up.sql). PostgreSQL
-- draws their ids from identity sequences, which never hand out an id
-- twice, and has nothing to change; this version keeps both stores'
-- schemas numbered alike, which petstore copy relies on.
SELECT 1;
