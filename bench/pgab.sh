#!/usr/bin/env bash
# PostgreSQL creates, this code against another commit's, and what a
# synchronous standby costs a create; see BENCHMARKS.md ("Failover").
#   bench/pgab.sh                 # against BASE=2c0ae55, 5 x 10 s each
#   BASE=main RUNS=3 bench/pgab.sh
# Both builds serve the same private PostgreSQL (PG_BIN, default Debian's
# 15: a primary and a streaming standby made here, in a directory of their
# own, on free loopback ports, run as the postgres user), each on a schema
# of its own, one at a time on CPU 1 with wrk -t1 -c32 on CPU 0 and
# bench/post.lua: unkeyed POSTs, then POSTs with an Idempotency-Key each
# (IDEM=1), alternating base, head, base, head..., with each server's CPU
# time per request (which other load on the machine moves far less than the
# request rate). Then the latency of one
# create at a time (-c1) on head, with the standby synchronous and not,
# alternating. The machine's own PostgreSQL is never touched.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."

BASE=${BASE:-2c0ae55} RUNS=${RUNS:-5} DURATION=${DURATION:-10s} WARMUP=${WARMUP:-3s}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
log() { echo "pgab: $*" >&2; }
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }

TMP=$(mktemp -d /tmp/pgab-XXXXXX)
PIDS=()
as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for d in "$TMP"/primary "$TMP"/standby; do
		[[ -f $d/postmaster.pid ]] && as_pg "$PG_BIN/pg_ctl" -D "$d" -m immediate stop >/dev/null 2>&1 || true
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
[[ $(id -u) == 0 ]] && chown postgres "$TMP" && chmod 755 "$TMP"

free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		(: </dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$p"; return; }
	done
}

log "building head and $BASE"
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$TMP/head" .
mkdir "$TMP/src" && git archive "$BASE" | tar -x -C "$TMP/src"
(cd "$TMP/src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$TMP/base" .)

log "a primary and a streaming standby"
PGP=$(free_port) PGS=$(free_port)
as_pg "$PG_BIN/initdb" -D "$TMP/primary" -A trust -U postgres -E UTF8 --locale=C >/dev/null
cat >>"$TMP/primary/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
wal_level = replica
max_wal_senders = 4
EOF
as_pg "$PG_BIN/pg_ctl" -D "$TMP/primary" -l "$TMP/primary.log" -w -o "-p $PGP -c cluster_name=primary" start >/dev/null
PRIMARY="postgres://postgres@127.0.0.1:$PGP"
psql -q "$PRIMARY/postgres" -c "CREATE DATABASE petstore"
as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$PGP" -U postgres -D "$TMP/standby" -R -X stream -c fast
as_pg "$PG_BIN/pg_ctl" -D "$TMP/standby" -l "$TMP/standby.log" -w -o "-p $PGS -c cluster_name=standby" start >/dev/null
sync_standby() { # on|off
	if [[ $1 == on ]]; then
		psql -q "$PRIMARY/postgres" -c "ALTER SYSTEM SET synchronous_standby_names = 'standby'" -c "SELECT pg_reload_conf()" >/dev/null
		until [[ $(psql -qtA "$PRIMARY/postgres" -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") == 1 ]]; do sleep 0.1; done
	else
		psql -q "$PRIMARY/postgres" -c "ALTER SYSTEM RESET synchronous_standby_names" -c "SELECT pg_reload_conf()" >/dev/null
		until [[ $(psql -qtA "$PRIMARY/postgres" -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") == 0 ]]; do sleep 0.1; done
	fi
}
# PostgreSQL on CPU 0 beside wrk, as bench/run.sh's rows 7.
for p in $(pgrep -f "$TMP/(primary|standby)" || true); do taskset -a -p -c 0 "$p" >/dev/null 2>&1 || true; done

serve() { # name binary: serve on a schema of its own, on CPU 1; sets URL and AUTH_<name>
	local name=$1 bin=$2 port db
	psql -q "$PRIMARY/petstore" -c "CREATE SCHEMA $name"
	db="$PRIMARY/petstore?sslmode=disable&search_path=$name"
	"$bin" keys create --db "$db" --plan enterprise --rpm 100000000 --rpd 100000000000 --name bench >"$TMP/$name.key" 2>/dev/null
	port=$(free_port)
	taskset -c 1 "$bin" serve --db "$db" --addr "127.0.0.1:$port" --admin-addr off 2>>"$TMP/$name.log" &
	PIDS+=("$!")
	printf -v "PID_$name" '%s' "$!"
	for _ in $(seq 500); do curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.02; done
	printf -v "URL_$name" '%s' "http://127.0.0.1:$port/v1/categories"
}
serve base "$TMP/base"
serve head "$TMP/head"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime of a process, all threads
# run label name conns [env...]: one timed run, kept in $TMP/label-N.txt,
# and the server's CPU time per request over it, in us, in $TMP/label-N.cpu.
run() {
	local label=$1 name=$2 conns=$3 url key n pid t0; shift 3
	url=URL_$name key=$(cat "$TMP/$name.key") pid=PID_$name
	local runs=("$TMP/$label"-*.txt)
	n=${#runs[@]}
	t0=$(cpu_ticks "${!pid}")
	env "$@" RUN_PREFIX="r$RANDOM$RANDOM" taskset -c 0 wrk -t1 -c"$conns" -d"$DURATION" --latency \
		-H "Authorization: Bearer $key" -s bench/post.lua "${!url}" >"$TMP/$label-$n.txt"
	awk -v t="$(($(cpu_ticks "${!pid}") - t0))" -v hz="$(getconf CLK_TCK)" '/requests in/ {printf "%.1f\n", t / hz * 1e6 / $1}' "$TMP/$label-$n.txt" >"$TMP/$label-$n.cpu"
}
cpu_med() { cat "$TMP/$1"-*.cpu | median; } # label: the median of its runs' CPU us per request
warm() { # name [env...]
	local name=$1 url key; shift
	url=URL_$name key=$(cat "$TMP/$name.key")
	env "$@" RUN_PREFIX="w$RANDOM$RANDOM" taskset -c 0 wrk -t1 -c32 -d"$WARMUP" -H "Authorization: Bearer $key" -s bench/post.lua "${!url}" >/dev/null
}
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
to_ms() {
	awk -v v="$1" 'BEGIN { n = v + 0
		if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) ; else if (v ~ /s$/) n *= 1000
		printf "%.3f", n }'
}
summary() { # label: median req/s, p50 ms, p99 ms; failed requests
	local f rps=() p50=() p99=() bad=0
	for f in "$TMP/$1"-*.txt; do
		rps+=("$(awk '/^Requests\/sec/ {print $2}' "$f")")
		p50+=("$(to_ms "$(awk '$1 == "50%" {print $2}' "$f")")")
		p99+=("$(to_ms "$(awk '$1 == "99%" {print $2}' "$f")")")
		bad=$((bad + $(awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(/[^0-9 ]/, " "); n += $1 + $2 + $3 + $4} END {print n + 0}' "$f")))
	done
	echo "$(printf '%s\n' "${rps[@]}" | median) $(printf '%s\n' "${p50[@]}" | median) $(printf '%s\n' "${p99[@]}" | median) $bad"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
runs() { # label: each run's req/s, in order
	local f
	for f in "$TMP/$1"-*.txt; do awk '/^Requests\/sec/ {printf "%.0f ", $2}' "$f"; done
}
paired() { # label-a label-b: the median of run i's b / a over i (runs i were next to each other)
	local i a b
	for i in $(seq 0 $((RUNS - 1))); do
		a=$(awk '/^Requests\/sec/ {print $2}' "$TMP/$1-$i.txt") b=$(awk '/^Requests\/sec/ {print $2}' "$TMP/$2-$i.txt")
		ratio "$b" "$a"; echo
	done | median
}

log "creates: $BASE and head alternating, $RUNS x $DURATION each, keyed and not (no synchronous standby)"
for name in base head; do warm "$name"; warm "$name" IDEM=1; done
for i in $(seq "$RUNS"); do
	for name in base head; do
		run "post-$name" "$name" 32
		run "idem-$name" "$name" 32 IDEM=1
	done
done

log "latency of one create at a time on head, the standby synchronous and not, alternating"
for i in $(seq "$RUNS"); do
	sync_standby on
	run lat-sync head 1
	sync_standby off
	run lat-async head 1
done

echo "Machine: $(nproc) CPUs, $(go version | cut -d' ' -f3-), load average $(cut -d' ' -f1-3 /proc/loadavg); PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')."
echo
echo "| what | $BASE req/s | head req/s | head / $BASE (medians) | median of run-by-run head / $BASE | each run's req/s ($BASE; head) | petstore's CPU us per request ($BASE, head) | p99 ms ($BASE, head) | failed |"
echo "|---|---:|---:|---:|---:|---|---|---|---:|"
for kind in post idem; do
	read -r b_rps _ b_p99 b_bad <<<"$(summary "$kind-base")"
	read -r h_rps _ h_p99 h_bad <<<"$(summary "$kind-head")"
	what="POST /v1/categories"
	[[ $kind == idem ]] && what="POST /v1/categories, an Idempotency-Key each"
	echo "| $what | $b_rps | $h_rps | $(ratio "$h_rps" "$b_rps") | $(paired "$kind-base" "$kind-head") | $(runs "$kind-base"); $(runs "$kind-head") | $(cpu_med "$kind-base"), $(cpu_med "$kind-head") | $b_p99, $h_p99 | $((b_bad + h_bad)) |"
done
echo
echo "| one create at a time (-c1), head | req/s | p50 ms | p99 ms | failed |"
echo "|---|---:|---:|---:|---:|"
for kind in async sync; do
	read -r rps p50 p99 bad <<<"$(summary "lat-$kind")"
	what="no synchronous standby"
	[[ $kind == sync ]] && what="a synchronous standby on loopback"
	echo "| $what | $rps | $p50 | $p99 | $bad |"
done
