#!/usr/bin/env bash
# The extra database servers of the multi-server tests, on this machine (no Docker):
#
#   127.0.0.1:5433  a second PostgreSQL cluster ("second"), trust auth, prepared transactions,
#                   wal_level=logical (reshard's logical-replication capture)
#   127.0.0.1:5435  a PostgreSQL cluster ("primary") that only the replica tests write to
#   127.0.0.1:5434  a streaming replica ("replica", hot standby) of 5435. Not of the main
#                   cluster: a replica of 5432 replayed every test database's CREATE DATABASE
#                   (the whole template, about 4 MB of WAL each), which cost a third of a
#                   core throughout a CI run
#   127.0.0.1:3307  a second MariaDB server (data in /var/lib/mysql2), root@127.0.0.1 with no
#                   password, like the main server on 3306
#   127.0.0.1:3310  a MariaDB primary with a binary log (data in /var/lib/mysql-primary)
#   127.0.0.1:3311  a MariaDB replica of 3310 (GTID replication; data in /var/lib/mysql-replica)
#
# Usage: .ci/servers.sh [PORT...]   each PORT: one more MariaDB server like 3307 (data in
# /var/lib/mysql-PORT); .ci/run asks for 3308 and 3309.
#
# Run as root after the main PostgreSQL (5432) and MariaDB (3306) answer (.ci/run does).
# Idempotent: what already answers is left alone, so running it again is cheap (~1 s).
# Its last lines are `KEY=value` lines for the test environment (tests/backends.py):
#
#   SNOWSHARD_TEST_POSTGRES2_URL=postgresql+psycopg://postgres@127.0.0.1:5433/postgres
#   SNOWSHARD_TEST_POSTGRES_PRIMARY_URL=postgresql+psycopg://postgres@127.0.0.1:5435/postgres
#   SNOWSHARD_TEST_POSTGRES_REPLICA_URL=postgresql+psycopg://postgres@127.0.0.1:5434/postgres
#   SNOWSHARD_TEST_MYSQL2_URL=mysql+pymysql://root@127.0.0.1:3307/test
#   SNOWSHARD_TEST_MYSQL_PRIMARY_URL=mysql+pymysql://root@127.0.0.1:3310/test
#   SNOWSHARD_TEST_MYSQL_REPLICA_URL=mysql+pymysql://root@127.0.0.1:3311/test
#
# so a caller can `export` them:  while read -r l; do export "$l"; done < <(... | grep ^SNOWSHARD_)
# Nothing here stops, restarts or reconfigures the main servers.
set -euo pipefail

WAIT_SECONDS=${WAIT_SECONDS:-60}
PG_VERSION=${PG_VERSION:-$(ls /etc/postgresql | sort -V | tail -n 1)}
PG_MAIN_PORT=5432
PG_SECOND_PORT=5433
PG_REPLICA_PORT=5434
PG_PRIMARY_PORT=5435   # the replica's primary
MARIADB_MAIN_PORT=3306
MARIADB2_PORT=3307   # data in /var/lib/mysql2, socket /run/mysqld/mysql2.sock
MARIADB_PRIMARY_PORT=3310   # binary log on: the primary of the replica below
MARIADB_REPLICA_PORT=3311   # replicates 3310

say() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

# wait_for WHAT CHECK...: run CHECK every 0.2 s until it succeeds, at most WAIT_SECONDS.
wait_for() {
    local what=$1 deadline=$((SECONDS + WAIT_SECONDS))
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "$what: not within ${WAIT_SECONDS}s"
        sleep 0.2
    done
}

# psql_at PORT SQL: one value (or nothing) from the postgres database on 127.0.0.1:PORT.
psql_at() { PGOPTIONS="-c client_min_messages=warning" psql -w -X -h 127.0.0.1 -p "$1" -U postgres -d postgres -Atqc "$2"; }
pg_up() { pg_isready -q -h 127.0.0.1 -p "$1" -t 2; }
pg_in_recovery() { [ "$(psql_at "$1" 'SELECT pg_is_in_recovery()' 2>/dev/null)" = t ]; }
mariadb_at() { mariadb -h127.0.0.1 -P"$1" -uroot --connect-timeout=3 "${@:2}"; }
mariadb_root_tcp() { mariadb_at "$1" -Ne 'SELECT 1' >/dev/null 2>&1; }

pg_up "$PG_MAIN_PORT" || die "the main PostgreSQL does not answer on 127.0.0.1:$PG_MAIN_PORT"
mariadb_root_tcp "$MARIADB_MAIN_PORT" ||
    die "root cannot log in to the main MariaDB on 127.0.0.1:$MARIADB_MAIN_PORT"
install -d -o postgres -g postgres -m 2775 /var/run/postgresql

# trust_local_tcp CLUSTER: the cluster's pg_hba.conf trusts local socket and 127.0.0.1 logins,
# like the main cluster's (the tests log in as postgres without a password).
trust_local_tcp() {
    cat >"/etc/postgresql/$PG_VERSION/$1/pg_hba.conf" <<'HBA'
# written by .ci/servers.sh: test servers only, no passwords
local all all trust
host all all 127.0.0.1/32 trust
HBA
}

# ------------------------------------------------------------------ MariaDB, second server
# mariadb_server PORT NAME [OPTION...]: a mariadbd on 127.0.0.1:PORT with data in
# /var/lib/NAME, socket and pid file /run/mysqld/NAME.{sock,pid}, log /var/log/mysql/NAME.err;
# root@127.0.0.1 without a password, database `test`; OPTIONs go to mariadbd. Left alone
# when root can already log in on PORT.
mariadb_server() {
    local port=$1 name=$2
    local options=("${@:3}")
    local datadir=/var/lib/$name socket=/run/mysqld/$name.sock pidfile=/run/mysqld/$name.pid
    # its own tmpdir: a starting mariadbd deletes every #sql* file in its tmpdir, which in
    # a shared /tmp are the live temporary tables of the servers already running
    local tmpdir=/var/tmp/mariadb-$name
    mariadb_socket_up() { mariadb-admin --protocol=socket --socket="$socket" -uroot ping; }
    if ! mariadb_root_tcp "$port"; then
        install -d -o mysql -g mysql -m 0755 /run/mysqld /var/log/mysql
        install -d -o mysql -g mysql -m 0750 "$tmpdir"
        if [ ! -d "$datadir/mysql" ]; then
            say "initializing $datadir"
            rm -rf "$datadir"
            # One bootstrap at a time: several run side by side on a new machine sometimes
            # fail ("Unknown table 'mysql.tmp_user_sys'") and leave a half-made directory.
            # A failed one is removed, so the next run starts it again.
            if ! flock /run/mysqld/install-db.lock \
                mariadb-install-db --no-defaults --user=mysql --datadir="$datadir" \
                    --auth-root-authentication-method=normal --skip-test-db \
                    --skip-name-resolve >/dev/null; then
                rm -rf "$datadir"
                die "mariadb-install-db failed for $datadir"
            fi
        fi
        if ! mariadb_socket_up >/dev/null 2>&1; then
            say "starting mariadbd on port $port ($datadir)"
            # --no-defaults: /etc/mysql/my.cnf describes the main server (its port, socket,
            # pid file and data directory); everything this one needs is given here.
            start-stop-daemon --start --quiet --oknodo --background --pidfile "$pidfile" \
                --exec /usr/sbin/mariadbd -- --no-defaults --user=mysql \
                --datadir="$datadir" --port="$port" --bind-address=127.0.0.1 \
                --socket="$socket" --pid-file="$pidfile" --tmpdir="$tmpdir" \
                --log-error="/var/log/mysql/$name.err" --skip-name-resolve \
                --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
                "${options[@]}"
        fi
        wait_for "MariaDB on $port (socket $socket)" mariadb_socket_up
        # skip-name-resolve: TCP logins from 127.0.0.1 match 'root'@'127.0.0.1' only.
        mariadb --protocol=socket --socket="$socket" -uroot <<'SQL'
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
        wait_for "root@127.0.0.1 on MariaDB $port" mariadb_root_tcp "$port"
    fi
    mariadb_at "$port" -e 'CREATE DATABASE IF NOT EXISTS test'
    # XA (two-phase commit) is always on in MariaDB 10.11; make sure it answers.
    mariadb_at "$port" -e 'XA RECOVER' >/dev/null || die "XA RECOVER fails on $port"
    [ "$(mariadb_at "$port" -Ne 'SELECT @@port')" = "$port" ] ||
        die "the server answering on 127.0.0.1:$port says it is not on port $port"
}

# The MariaDB servers start in the background while the PostgreSQL ones are made.
# Extra ones asked for on the command line: .ci/run gives its floor leg a pair of its own
# (XA RECOVER lists the prepared branches of the whole server, so two legs running
# two-phase recovery tests at the same time must not share a server).
for extra in "$@"; do
    [[ $extra =~ ^[0-9]+$ ]] || die "extra MariaDB port must be a number, not '$extra'"
done
mariadb_jobs=()
mariadb_server "$MARIADB2_PORT" mysql2 &
mariadb_jobs+=($!)
for extra in "$@"; do
    mariadb_server "$extra" "mysql-$extra" &
    mariadb_jobs+=($!)
done
mariadb_server "$MARIADB_PRIMARY_PORT" mysql-primary --server-id=10 --log-bin=mysql-bin \
    --binlog-format=ROW &
mariadb_jobs+=($!)
mariadb_server "$MARIADB_REPLICA_PORT" mysql-replica --server-id=11 &
mariadb_jobs+=($!)

# ------------------------------------------------------------------ PostgreSQL, clusters
# pg_cluster NAME PORT: a cluster of the tests' own (trust auth, prepared transactions,
# wal_level=logical for reshard's logical-replication capture), created and started if it
# does not answer.
pg_cluster() {
    local name=$1 port=$2
    if ! pg_up "$port"; then
        if [ ! -d "/etc/postgresql/$PG_VERSION/$name" ]; then
            say "creating PostgreSQL cluster $PG_VERSION/$name on port $port"
            pg_createcluster -q "$PG_VERSION" "$name" -p "$port" \
                -o max_prepared_transactions=32 -o wal_level=logical >/dev/null
            trust_local_tcp "$name"
        fi
        say "starting PostgreSQL cluster $PG_VERSION/$name"
        pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" "$name" start
    fi
    wait_for "PostgreSQL on $port" pg_up "$port"
    [ "$(psql_at "$port" 'SHOW max_prepared_transactions')" != 0 ] ||
        die "cluster $PG_VERSION/$name has max_prepared_transactions = 0"
    if [ "$(psql_at "$port" 'SHOW wal_level')" != logical ]; then
        # a cluster made before wal_level=logical was asked for: set it (a restart of this
        # cluster only, which belongs to the tests)
        say "setting wal_level = logical on $PG_VERSION/$name (restart)"
        psql_at "$port" 'ALTER SYSTEM SET wal_level = logical' >/dev/null
        pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" "$name" restart
        wait_for "PostgreSQL on $port" pg_up "$port"
    fi
    [ "$(psql_at "$port" 'SHOW wal_level')" = logical ] ||
        die "cluster $PG_VERSION/$name does not run with wal_level = logical"
}
pg_cluster second "$PG_SECOND_PORT"
pg_cluster primary "$PG_PRIMARY_PORT"

# ------------------------------------------------------------------ PostgreSQL, replica of 5435
primary_hba=$(psql_at "$PG_PRIMARY_PORT" 'SHOW hba_file')
replication_rule='host replication all 127.0.0.1/32 trust'
if ! grep -qxF "$replication_rule" "$primary_hba"; then
    say "allowing replication connections from 127.0.0.1 on $PG_VERSION/primary (reload)"
    printf '%s\n' "$replication_rule" >>"$primary_hba"
    psql_at "$PG_PRIMARY_PORT" 'SELECT pg_reload_conf()' >/dev/null
fi
replica_dir=/var/lib/postgresql/$PG_VERSION/replica
# a replica made by an earlier version of this script streams from the main cluster: redo it
if [ -f "$replica_dir/postgresql.auto.conf" ] &&
    ! grep -q "port=$PG_PRIMARY_PORT" "$replica_dir/postgresql.auto.conf"; then
    say "the replica $PG_VERSION/replica streams from another cluster; recreating it"
    pg_dropcluster --stop "$PG_VERSION" replica
fi
if ! pg_in_recovery "$PG_REPLICA_PORT"; then
    if [ -f "$replica_dir/standby.signal" ]; then
        say "starting the replica $PG_VERSION/replica"
        pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" replica start ||
            say "pg_ctlcluster returned $?; waiting for the replica anyway"
    else
        if [ -d "/etc/postgresql/$PG_VERSION/replica" ]; then
            say "cluster $PG_VERSION/replica exists but is no standby; recreating it"
            pg_dropcluster --stop "$PG_VERSION" replica
        fi
        say "creating the replica $PG_VERSION/replica on port $PG_REPLICA_PORT (pg_basebackup)"
        pg_createcluster -q "$PG_VERSION" replica -p "$PG_REPLICA_PORT" \
            -o hot_standby=on -o max_prepared_transactions=32 \
            -o wal_receiver_status_interval=1s >/dev/null
        trust_local_tcp replica
        find "$replica_dir" -mindepth 1 -delete
        # -R writes primary_conninfo and standby.signal; -X stream copies the WAL meanwhile.
        # --checkpoint=fast: do not wait for the primary's next scheduled checkpoint.
        runuser -u postgres -- pg_basebackup -h 127.0.0.1 -p "$PG_PRIMARY_PORT" -U postgres \
            -D "$replica_dir" -R -X stream --checkpoint=fast --no-sync
        pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" replica start
    fi
fi
wait_for "PostgreSQL replica on $PG_REPLICA_PORT" pg_in_recovery "$PG_REPLICA_PORT"
# Proof that it streams: a row written on the primary shows up on the replica.
token="servers.sh $(date +%s.%N) $$"
psql_at "$PG_PRIMARY_PORT" "CREATE TABLE IF NOT EXISTS snowshard_replica_probe (token text PRIMARY KEY)"
psql_at "$PG_PRIMARY_PORT" "INSERT INTO snowshard_replica_probe VALUES ('$token')"
replica_has_token() {
    [ "$(psql_at "$PG_REPLICA_PORT" "SELECT count(*) FROM snowshard_replica_probe WHERE token = '$token'" 2>/dev/null)" = 1 ]
}
wait_for "a row written on $PG_PRIMARY_PORT to reach the replica on $PG_REPLICA_PORT" replica_has_token
psql_at "$PG_PRIMARY_PORT" "DELETE FROM snowshard_replica_probe WHERE token = '$token'"

# ------------------------------------------------------------------ wait for MariaDB
for pid in "${mariadb_jobs[@]}"; do
    wait "$pid" || die "a MariaDB server did not come up (see above)"
done

# ------------------------------------------------------------------ MariaDB, replica of 3310
replica_sql_running() {
    [ "$(mariadb_at "$MARIADB_REPLICA_PORT" -e 'SHOW SLAVE STATUS\G' | awk '$1 == "Slave_SQL_Running:" {print $2}')" = Yes ]
}
[ "$(mariadb_at "$MARIADB_PRIMARY_PORT" -Ne 'SELECT @@log_bin')" = 1 ] ||
    die "MariaDB on $MARIADB_PRIMARY_PORT has no binary log (an older server without --log-bin: stop it and run again)"
if ! replica_sql_running; then
    # start from the primary's current position: what it did before (its own setup) is
    # not replayed; both have root@127.0.0.1 and `test` from mariadb_server already
    position=$(mariadb_at "$MARIADB_PRIMARY_PORT" -Ne 'SELECT @@gtid_binlog_pos')
    say "making MariaDB $MARIADB_REPLICA_PORT a replica of $MARIADB_PRIMARY_PORT (from GTID '$position')"
    mariadb_at "$MARIADB_REPLICA_PORT" <<SQL
STOP SLAVE;
RESET SLAVE ALL;
SET GLOBAL gtid_slave_pos = '$position';
CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = $MARIADB_PRIMARY_PORT,
    MASTER_USER = 'root', MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos,
    MASTER_CONNECT_RETRY = 1;
START SLAVE;
SQL
fi
mariadb_at "$MARIADB_REPLICA_PORT" -e 'STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = 0; START SLAVE'
wait_for "the MariaDB replica on $MARIADB_REPLICA_PORT to run" replica_sql_running
# Proof that it replicates: a row written on the primary shows up on the replica.
mariadb_at "$MARIADB_PRIMARY_PORT" -e "CREATE TABLE IF NOT EXISTS test.snowshard_replica_probe (token VARCHAR(80) PRIMARY KEY)"
mariadb_at "$MARIADB_PRIMARY_PORT" -e "INSERT INTO test.snowshard_replica_probe VALUES ('$token')"
mariadb_replica_has_token() {
    [ "$(mariadb_at "$MARIADB_REPLICA_PORT" -Ne "SELECT count(*) FROM test.snowshard_replica_probe WHERE token = '$token'" 2>/dev/null)" = 1 ]
}
wait_for "a row written on $MARIADB_PRIMARY_PORT to reach the replica on $MARIADB_REPLICA_PORT" mariadb_replica_has_token
mariadb_at "$MARIADB_PRIMARY_PORT" -e "DELETE FROM test.snowshard_replica_probe WHERE token = '$token'"

say "ready: PostgreSQL $PG_SECOND_PORT and $PG_PRIMARY_PORT, replica $PG_REPLICA_PORT (of $PG_PRIMARY_PORT), MariaDB $MARIADB2_PORT, MariaDB replica $MARIADB_REPLICA_PORT (of $MARIADB_PRIMARY_PORT)"
echo "SNOWSHARD_TEST_POSTGRES2_URL=postgresql+psycopg://postgres@127.0.0.1:$PG_SECOND_PORT/postgres"
echo "SNOWSHARD_TEST_POSTGRES_PRIMARY_URL=postgresql+psycopg://postgres@127.0.0.1:$PG_PRIMARY_PORT/postgres"
echo "SNOWSHARD_TEST_POSTGRES_REPLICA_URL=postgresql+psycopg://postgres@127.0.0.1:$PG_REPLICA_PORT/postgres"
echo "SNOWSHARD_TEST_MYSQL2_URL=mysql+pymysql://root@127.0.0.1:$MARIADB2_PORT/test"
echo "SNOWSHARD_TEST_MYSQL_PRIMARY_URL=mysql+pymysql://root@127.0.0.1:$MARIADB_PRIMARY_PORT/test"
echo "SNOWSHARD_TEST_MYSQL_REPLICA_URL=mysql+pymysql://root@127.0.0.1:$MARIADB_REPLICA_PORT/test"
