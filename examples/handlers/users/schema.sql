-- The seed's table: one row per user, and the version of the update that
-- wrote it (the stream sequence of its message, LANES_SEQ). A row's
-- version only grows: see the upsert in users.go and set_age.sh.
PRAGMA journal_mode = WAL;

CREATE TABLE IF NOT EXISTS users (
  id      TEXT PRIMARY KEY,
  age     INTEGER NOT NULL,
  version INTEGER NOT NULL
);

-- Every change of a row, in the order it was written: the judge of the
-- tests (a key's version must never go down). A trigger writes it, so it
-- holds whatever program writes the table.
CREATE TABLE IF NOT EXISTS changes (
  n    INTEGER PRIMARY KEY AUTOINCREMENT,
  id   TEXT NOT NULL,
  was  INTEGER,          -- the version before (NULL: the row was new)
  now  INTEGER NOT NULL
);

CREATE TRIGGER IF NOT EXISTS users_inserted AFTER INSERT ON users BEGIN
  INSERT INTO changes (id, was, now) VALUES (new.id, NULL, new.version);
END;

CREATE TRIGGER IF NOT EXISTS users_updated AFTER UPDATE ON users BEGIN
  INSERT INTO changes (id, was, now) VALUES (new.id, old.version, new.version);
END;
