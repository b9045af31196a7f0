#!/usr/bin/env bash
# CPU and allocation profiles of petstore under the harness's load (server
# on CPU 1, wrk on CPU 0, 100 categories, the default flags and log level):
#   bench/profile.sh [get|post|flood] ...   # default: all three
# Builds with -tags pprof (pprof.go) and prints each profile's top entries;
# the profiles stay in bench/out/profile/ for `go tool pprof`.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-10} TOP=${TOP:-25}
OUT=bench/out/profile; mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$TMP"' EXIT
CGO_ENABLED=0 go build -tags pprof -trimpath -o "$TMP/petstore" .
port() { while :; do p=$((20000 + RANDOM % 40000)); (: </dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$p"; return; }; done; }
PORT=$(port) PP=$(port)
DB=$TMP/p.db
KEY=$("$TMP/petstore" keys create --db "$DB" --plan enterprise --rpm 100000000 --rpd 100000000000 2>/dev/null)
FREE=$("$TMP/petstore" keys create --db "$DB" --plan free 2>/dev/null)
# Never banning: a banned key's requests wait --ban-hold, and the flood's
# profile would show that wait instead of a refusal's work.
PETSTORE_PPROF_ADDR=127.0.0.1:$PP taskset -c 1 "$TMP/petstore" serve --db "$DB" --addr "127.0.0.1:$PORT" --admin-addr off --ban-threshold 1000000000 2>"$TMP/log" &
P=http://127.0.0.1:$PORT
for _ in $(seq 500); do curl -s -o /dev/null "$P/healthz" && break; sleep 0.02; done
for i in $(seq -f %03g 1 100); do
	curl -sf -o /dev/null -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
		-d "{\"name\":\"cat-$i\",\"description\":\"Benchmark category number $i\"}" "$P/v1/categories"
done
# one label: wrk args run for SECS + 2 s while a SECS-long CPU profile, then
# an allocation profile of the same load, are taken.
profile() {
	local label=$1; shift
	for kind in cpu allocs; do
		RUN_PREFIX="$label$kind$RANDOM" taskset -c 0 wrk -t1 -c"${CONNS:-32}" -d$((SECS + 2))s "$@" "$P/v1/categories" >"$OUT/$label-$kind-wrk.txt" &
		local w=$!
		sleep 1
		if [[ $kind == cpu ]]; then
			curl -sf -o "$OUT/$label.cpu" "http://127.0.0.1:$PP/debug/pprof/profile?seconds=$SECS"
		else
			curl -sf -o "$TMP/a0" "http://127.0.0.1:$PP/debug/pprof/allocs"
			sleep "$SECS"
			curl -sf -o "$TMP/a1" "http://127.0.0.1:$PP/debug/pprof/allocs"
			go tool pprof -proto -base "$TMP/a0" "$TMP/a1" >"$OUT/$label.allocs" 2>/dev/null
		fi
		wait "$w"
	done
	echo "== $label: $(awk '/^Requests\/sec/ {print $2}' "$OUT/$label-cpu-wrk.txt") req/s; $(grep -h 'Non-2xx' "$OUT/$label-cpu-wrk.txt" || echo 'all 2xx')"
	go tool pprof -top -nodecount="$TOP" "$OUT/$label.cpu" 2>/dev/null | sed -n '4,$p'
	echo "-- allocations (objects):"
	go tool pprof -top -nodecount=15 -sample_index=alloc_objects "$OUT/$label.allocs" 2>/dev/null | sed -n '4,$p'
}
for what in "${@:-get post flood}"; do for w in $what; do case $w in
	get) profile get -H "Authorization: Bearer $KEY" ;;
	post) profile post -H "Authorization: Bearer $KEY" -s bench/post.lua ;;
	flood) CONNS=16 profile flood -H "Authorization: Bearer $FREE" ;;
esac; done; done
