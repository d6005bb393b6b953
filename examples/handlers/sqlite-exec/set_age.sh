#!/bin/sh
# set_age.sh: a `lanes work --exec` handler for the seed design
# (examples/seed/lanes.yaml). It applies a set_age update, a message on
# msgs.received_from.<user> with the payload {"age": N}, to a SQLite
# table with the sqlite3 command-line shell (Debian: apt-get install
# sqlite3), and writes it only if it is newer than what the row holds.
#
#   sqlite3 users.db < examples/handlers/users/schema.sql    # once: the tables
#   USERS_DB=users.db lanes work -f examples/seed/lanes.yaml \
#     --exec examples/handlers/sqlite-exec/set_age.sh
#
# Why the check: a message can be delivered again (a worker died before
# its ack, an instance was cut off past its lease), and the handler of an
# instance that lost its lane can still be finishing a write after the
# new owner wrote a newer update. The row keeps the stream sequence of
# the message that wrote it (LANES_SEQ, its version), and a write with a
# version not above it changes nothing. docs/effects.md explains.
#
# What lanes work does with the exit code:
#   0   ack: written, or already there / older than the row (nothing to do)
#   65  terminate: the message is bad, trying again cannot help
#   127 sqlite3 is not installed: lanes work takes it for a handler
#       outage, and the message waits until the handler can run
#   1   retry after the lane's backoff: the database is busy past 5 s or
#       missing, or sqlite3 failed
set -eu

if ! command -v sqlite3 >/dev/null 2>&1; then
	echo "set_age.sh: sqlite3 not found on PATH (Debian: apt-get install sqlite3)" >&2
	exit 127
fi

# The database: set by whoever starts lanes work. Its absence is a setup
# problem, not a bad message, so it is retried rather than terminated.
if [ -z "${USERS_DB:-}" ]; then
	echo "set_age.sh: USERS_DB is not set: name the SQLite database (create it with: sqlite3 users.db < examples/handlers/users/schema.sql)" >&2
	exit 1
fi
# sqlite3 would create an empty file and then fail on the missing table:
# say what is wrong instead.
if [ ! -f "$USERS_DB" ]; then
	printf 'set_age.sh: USERS_DB=%s: no such file (create it with: sqlite3 %s < examples/handlers/users/schema.sql)\n' "$USERS_DB" "$USERS_DB" >&2
	exit 1
fi
if [ -z "${LANES_KEY:-}" ]; then
	echo "set_age.sh: LANES_KEY is not set: lanes work sets it (and LANES_SEQ)" >&2
	exit 1
fi
key=$LANES_KEY
seq=${LANES_SEQ:-}

# The version goes into the SQL as it is: it must be digits only.
case $seq in
'' | *[!0-9]*)
	printf 'set_age.sh: LANES_SEQ="%s" is not a stream sequence\n' "$seq" >&2
	exit 65
	;;
esac

# The payload is on stdin: {"age": N}. A sed match, not a JSON parser: it
# takes the last "age" member whose value is an integer (at most 18
# digits, so it fits SQLite's 64-bit INTEGER), on one line or several.
payload=$(cat)
age=$({ printf '%s' "$payload" | tr '\n\r\t' '   '; echo; } |
	sed -n 's/^.*"age"[[:space:]]*:[[:space:]]*\(-\{0,1\}[0-9]\{1,18\}\)[[:space:]]*[,}].*$/\1/p')
if [ -z "$age" ]; then
	# stderr is what lanes work logs (and puts on a parked message): the
	# payload's start is enough. printf, not echo: no escapes interpreted.
	printf 'set_age.sh: not a set_age update: want {"age": N} with N an integer, got "%.64s"\n' "$payload" >&2
	exit 65
fi

# The key comes from a subject token, which may hold a quote: double
# single quotes for the SQL string literal (SQLite has no backslash
# escapes, so that is all it takes).
id=$(printf '%s' "$key" | sed "s/'/''/g")

# One sqlite3 run:
#   .timeout 5000   wait up to 5 s for another writer (several workers
#                   share the file) instead of failing at once
#   -bail           stop at the first error and exit non-zero: lanes
#                   work retries the message
#   -init /dev/null no ~/.sqliterc: its settings could change the output
# The upsert writes the row only when this message is newer than the
# row's version (the WHERE of the DO UPDATE); changes() is 0 when it was
# not: a redelivery, or an update older than the row.
if ! applied=$(sqlite3 -batch -bail -init /dev/null "$USERS_DB" <<EOF
.timeout 5000
INSERT INTO users (id, age, version) VALUES ('$id', $age, $seq)
ON CONFLICT (id) DO UPDATE SET age = excluded.age, version = excluded.version
WHERE excluded.version > users.version;
SELECT changes();
EOF
); then
	printf 'set_age.sh: sqlite3 failed on %s (version %s of %s): retry\n' "$USERS_DB" "$seq" "$key" >&2
	exit 1
fi

if [ "$applied" = 1 ]; then
	printf 'set_age %s age=%s version=%s: written\n' "$key" "$age" "$seq"
else
	printf 'set_age %s age=%s version=%s: not written, the row holds this version or a newer one\n' "$key" "$age" "$seq"
fi
