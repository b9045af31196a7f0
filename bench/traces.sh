#!/usr/bin/env bash
# The traces' numbers in BENCHMARKS.md (issue 44):
#   bench/traces.sh BEFORE AFTER
# runs three servers side by side on copies of one seeded SQLite database,
# on CPU 1 with wrk on CPU 0 (as bench/conns.sh does): BEFORE (a build
# without tracing), AFTER with tracing off (no OTEL_* variable), and AFTER
# with every request sampled (always_on), exporting to bench/otlpsink on
# CPU 0. Each round runs the three once, keep-alive GET /v1/categories (100
# rows, wrk -t1 -c32), in an order rotated from round to round, RUNS rounds
# of DURATION; it prints each round, the server CPU per request (from
# /proc/PID/stat), and the medians of the rounds' ratios to BEFORE: on a
# machine that others load, the ratio of adjacent runs is steadier than
# either rate.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5s} RUNS=${RUNS:-9} WARMUP=${WARMUP:-3s}
TMP=$(mktemp -d) PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"' EXIT
log() { echo "traces: $*" >&2; }
free_port() { local p; while :; do p=$((20000 + RANDOM % 40000)); (: </dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$p"; return; }; done; }
wait_up() { for _ in $(seq 500); do curl -s -o /dev/null "$1" && return; sleep 0.02; done; log "no answer from $1"; exit 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
med() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

before=$1 after=$2
go build -o "$TMP/otlpsink" ./bench/otlpsink
sink=127.0.0.1:$(free_port)
taskset -c 0 "$TMP/otlpsink" "$sink" &
PIDS+=($!)
wait_up "http://$sink/count"
KEY=$("$before" keys create --db "$TMP/seed.db" --plan enterprise --rpm 100000000 --rpd 100000000000 2>/dev/null)
port=$(free_port)
"$before" serve --db "$TMP/seed.db" --addr "127.0.0.1:$port" --admin-addr off 2>/dev/null &
sp=$!
wait_up "http://127.0.0.1:$port/healthz"
for i in $(seq -f %03g 1 100); do
	curl -sf -o /dev/null -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
		-d "{\"name\":\"cat-$i\",\"description\":\"Benchmark category number $i\"}" "http://127.0.0.1:$port/v1/categories"
done
kill "$sp"; wait "$sp" 2>/dev/null || true
declare -A URL PID
for v in before off on; do
	bin=$after env=()
	[[ $v == before ]] && bin=$before
	[[ $v == on ]] && env=(OTEL_EXPORTER_OTLP_ENDPOINT="http://$sink" OTEL_TRACES_SAMPLER=always_on)
	cp "$TMP/seed.db" "$TMP/$v.db"
	port=$(free_port)
	env "${env[@]}" taskset -c 1 "$bin" serve --db "$TMP/$v.db" --addr "127.0.0.1:$port" --admin-addr off 2>"$TMP/$v.log" &
	PID[$v]=$! PIDS+=($!)
	URL[$v]=http://127.0.0.1:$port
	wait_up "${URL[$v]}/healthz"
done
run() { taskset -c 0 wrk -t1 -c32 -d"$2" -H "Authorization: Bearer $KEY" "${URL[$1]}/v1/categories"; }
for v in before off on; do run "$v" "$WARMUP" >/dev/null; done
orders=("before off on" "off on before" "on before off")
for i in $(seq "$RUNS"); do
	for v in ${orders[$((i % 3))]}; do
		t0=$(cpu_ticks "${PID[$v]}")
		run "$v" "$DURATION" >"$TMP/$v-$i.txt"
		echo $(($(cpu_ticks "${PID[$v]}") - t0)) >"$TMP/$v-$i.cpu"
	done
	for v in before off on; do
		reqs=$(awk '/requests in/ {print $1}' "$TMP/$v-$i.txt")
		echo "$v $(awk '/^Requests\/sec/ {print $2}' "$TMP/$v-$i.txt") $(awk -v t="$(cat "$TMP/$v-$i.cpu")" -v r="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz * 1e6 / r}')"
	done | awk -v i="$i" '{r[$1] = $2; c[$1] = $3} END {printf "round %d req/s %.0f %.0f %.0f CPU-us/req %.2f %.2f %.2f off/before %.3f on/before %.3f\n", i, r["before"], r["off"], r["on"], c["before"], c["off"], c["on"], c["off"] / c["before"], c["on"] / c["before"]}'
done | tee "$TMP/rounds"
echo "medians: req/s before $(awk '{print $4}' "$TMP/rounds" | med), off $(awk '{print $5}' "$TMP/rounds" | med), on $(awk '{print $6}' "$TMP/rounds" | med);" \
	"CPU us/req before $(awk '{print $8}' "$TMP/rounds" | med), off $(awk '{print $9}' "$TMP/rounds" | med), on $(awk '{print $10}' "$TMP/rounds" | med);" \
	"the rounds' CPU/req ratios: off/before $(awk '{print $12}' "$TMP/rounds" | med), on/before $(awk '{print $14}' "$TMP/rounds" | med)"
echo "ratio spread: off/before $(awk '{print $12}' "$TMP/rounds" | sort -g | sed -n '1p;$p' | tr '\n' ' ')on/before $(awk '{print $14}' "$TMP/rounds" | sort -g | sed -n '1p;$p' | tr '\n' ' ')"
echo "failed: $(cat "$TMP"/*-*.txt | awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(/[^0-9 ]/, " "); n += $1 + $2 + $3 + $4} END {print n + 0}')"
echo "sink: $(curl -s "http://$sink/count")"
