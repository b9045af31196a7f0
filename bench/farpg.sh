#!/usr/bin/env bash
# Creates against a far primary (DECISIONS.md section 22; BENCHMARKS.md,
# "A far primary"): this code against the build before it, with the
# primary behind bench/delayproxy adding DELAY (default 20 ms) each way.
#   bench/farpg.sh                                 # BASE=02f62bc, built here
#   BASE_BIN=/work/baseline/petstore-02f62bc RUNS=3 bench/farpg.sh
# A private PostgreSQL (PG_BIN, default Debian's 15) in a directory of its
# own on a free loopback port, run as the postgres user; each build on a
# schema of its own, two instances of each. Alternating base, head, base,
# head..., each DURATION: one client's unkeyed, keyed (a key each) and
# replayed (one key again and again) creates (wrk -c1, p50); one instance
# with 32 clients (unkeyed); the two instances at once, 32 clients each.
# The machine's own PostgreSQL is never touched.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."

BASE=${BASE:-02f62bc} BASE_BIN=${BASE_BIN:-} RUNS=${RUNS:-2} DURATION=${DURATION:-5s} DELAY=${DELAY:-20ms}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
log() { echo "farpg: $*" >&2; }
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }

TMP=$(mktemp -d /tmp/farpg-XXXXXX)
PIDS=()
as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[[ -f $TMP/primary/postmaster.pid ]] && as_pg "$PG_BIN/pg_ctl" -D "$TMP/primary" -m immediate stop >/dev/null 2>&1 || true
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

log "building head, $BASE and the proxy"
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$TMP/head" .
go build -o "$TMP/delayproxy" ./bench/delayproxy
if [[ -n $BASE_BIN ]]; then
	cp "$BASE_BIN" "$TMP/base"
else
	mkdir "$TMP/src" && git archive "$BASE" | tar -x -C "$TMP/src"
	(cd "$TMP/src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$TMP/base" .)
fi

log "a primary, $DELAY each way behind a proxy"
PGP=$(free_port)
as_pg "$PG_BIN/initdb" -D "$TMP/primary" -A trust -U postgres -E UTF8 --locale=C >/dev/null
printf "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\n" >>"$TMP/primary/postgresql.conf"
as_pg "$PG_BIN/pg_ctl" -D "$TMP/primary" -l "$TMP/primary.log" -w -o "-p $PGP" start >/dev/null
psql -q "postgres://postgres@127.0.0.1:$PGP/postgres" -c "CREATE DATABASE petstore"
"$TMP/delayproxy" "127.0.0.1:$PGP" "$DELAY" >"$TMP/proxy.addr" &
PIDS+=("$!")
until [[ -s $TMP/proxy.addr ]]; do sleep 0.05; done
FAR="postgres://postgres@$(cat "$TMP/proxy.addr")/petstore"

serve() { # name binary: two instances on a schema of its own; sets URL_<name>1, URL_<name>2
	local name=$1 bin=$2 port db i
	psql -q "postgres://postgres@127.0.0.1:$PGP/petstore" -c "CREATE SCHEMA $name"
	db="$FAR?sslmode=disable&search_path=$name"
	"$bin" keys create --db "$db" --plan enterprise --rpm 100000000 --rpd 100000000000 --name bench >"$TMP/$name.key" 2>/dev/null
	for i in 1 2; do
		port=$(free_port)
		"$bin" serve --db "$db" --addr "127.0.0.1:$port" --admin-addr off 2>>"$TMP/$name$i.log" &
		PIDS+=("$!")
		for _ in $(seq 500); do curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.02; done
		printf -v "URL_$name$i" '%s' "http://127.0.0.1:$port/v1/categories"
	done
}
serve base "$TMP/base"
serve head "$TMP/head"

wrk_to() { # out name instance conns [env...]
	local out=$1 name=$2 i=$3 conns=$4 url key; shift 4
	url=URL_$name$i key=$(cat "$TMP/$name.key")
	env "$@" RUN_PREFIX="r$RANDOM$RANDOM" wrk -t1 -c"$conns" -d"$DURATION" --latency \
		-H "Authorization: Bearer $key" -s bench/post.lua "${!url}" >"$out"
}
next() { local runs=("$TMP/$1"-*.txt); echo "$TMP/$1-${#runs[@]}.txt"; } # label: its next run's file
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
to_ms() {
	awk -v v="$1" 'BEGIN { n = v + 0
		if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) ; else if (v ~ /s$/) n *= 1000
		printf "%.1f", n }'
}
rps() { awk '/^Requests\/sec/ {print $2}' "$1"; }
p50() { to_ms "$(awk '$1 == "50%" {print $2}' "$1")"; }
bad() { awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(/[^0-9 ]/, " "); n += $1 + $2 + $3 + $4} END {print n + 0}' "$1"; }
each() { # label fn: fn of each run, in order
	local f
	for f in "$TMP/$1"-*.txt; do printf '%s ' "$("$2" "$f")"; done
}
med() { each "$1" "$2" | tr ' ' '\n' | grep . | median; } # label fn: the median over its runs
two() { # label: each run's req/s, both instances together
	local f
	for f in "$TMP/$1"-*-a.txt; do
		awk -v a="$(rps "$f")" -v b="$(rps "${f%-a.txt}-b.txt")" 'BEGIN {printf "%.0f ", a + b}'
	done
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

log "warming up each instance"
for name in base head; do
	for i in 1 2; do DURATION=2s wrk_to /dev/null "$name" "$i" 32; done
done
log "base and head alternating, $RUNS x $DURATION each"
for r in $(seq "$RUNS"); do
	for name in base head; do
		wrk_to "$(next "post-$name")" "$name" 1 1
		wrk_to "$(next "idem-$name")" "$name" 1 1 IDEM=1
		wrk_to "$(next "replay-$name")" "$name" 1 1 REPLAY=1
		wrk_to "$(next "one-$name")" "$name" 1 32
		n=$((r - 1))
		wrk_to "$TMP/two-$name-$n-a.txt" "$name" 1 32 &
		wrk_to "$TMP/two-$name-$n-b.txt" "$name" 2 32
		wait "$!"
	done
done

echo "Machine: $(nproc) CPUs, $(go version | cut -d' ' -f3-), load average $(cut -d' ' -f1-3 /proc/loadavg); PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), $DELAY each way."
echo
echo "| one client (wrk -c1) | $BASE p50 ms | head p50 ms | each run's p50 ($BASE; head) | failed |"
echo "|---|---:|---:|---|---:|"
for kind in post idem replay; do
	what="unkeyed create"
	[[ $kind == idem ]] && what="keyed create (a key each)"
	[[ $kind == replay ]] && what="replay (one key again)"
	failed=$(( $(each "$kind-base" bad | tr ' ' '+')0 + $(each "$kind-head" bad | tr ' ' '+')0 ))
	echo "| $what | $(med "$kind-base" p50) | $(med "$kind-head" p50) | $(each "$kind-base" p50); $(each "$kind-head" p50) | $failed |"
done
echo
b1=$(med one-base rps) h1=$(med one-head rps)
b2=$(two two-base | tr ' ' '\n' | grep . | median) h2=$(two two-head | tr ' ' '\n' | grep . | median)
echo "| unkeyed creates, 32 clients each | $BASE req/s | head req/s | head / $BASE | each run ($BASE; head) |"
echo "|---|---:|---:|---:|---|"
echo "| one far instance | $b1 | $h1 | $(ratio "$h1" "$b1") | $(each one-base rps); $(each one-head rps) |"
echo "| two far instances together | $b2 | $h2 | $(ratio "$h2" "$b2") | $(two two-base); $(two two-head) |"
echo "| two / one | $(ratio "$b2" "$b1") | $(ratio "$h2" "$h1") | | |"
