#!/usr/bin/env bash
# The connection caps' numbers in BENCHMARKS.md (issue 34):
#   bench/conns.sh ab BEFORE AFTER   # rows 11-12 of bench/tls.sh, two builds alternated; H2=1 adds HTTP/2
#   bench/conns.sh idle BIN MODE N   # peak RSS holding N idle connections (MODE h2, h1, silent)
# ab runs the two binaries side by side over HTTPS (--tls-cert, an ECDSA
# P-256 pair) on CPU 1 with wrk on CPU 0, as bench/tls.sh runs its servers:
# GET /v1/categories (100 rows) over keep-alive, then a full handshake per
# GET /healthz (bench/fullhandshake.c), RUNS rounds of DURATION each, the
# two builds' runs adjacent in each round and their order swapped from
# round to round. It prints each round and the medians, and the rounds'
# after/before ratios: on a machine that others load, the ratio of two
# adjacent runs is steadier than either rate.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5s} RUNS=${RUNS:-9} WARMUP=${WARMUP:-3s}
TMP=$(mktemp -d) PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"' EXIT
log() { echo "conns: $*" >&2; }
free_port() { local p; while :; do p=$((20000 + RANDOM % 40000)); (: </dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$p"; return; }; done; }
wait_up() { for _ in $(seq 500); do curl -sk -o /dev/null "$1" && return; sleep 0.02; done; log "no answer from $1"; exit 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
med() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
openssl ecparam -name prime256v1 -genkey -noout -out "$TMP/tls.key"
openssl req -new -x509 -key "$TMP/tls.key" -out "$TMP/tls.crt" -days 2 -subj /CN=127.0.0.1 \
	-addext subjectAltName=IP:127.0.0.1 2>/dev/null
# newkey BIN DB: an enterprise key whose limits refuse nothing.
newkey() { "$1" keys create --db "$2" --plan enterprise --rpm 100000000 --rpd 100000000000 2>/dev/null; }

ab() {
	local before=$1 after=$2 v bin port sp i order label f reqs
	cc -O2 -shared -fPIC -o "$TMP/fullhandshake.so" bench/fullhandshake.c -ldl
	KEY=$(newkey "$before" "$TMP/seed.db")
	port=$(free_port)
	"$before" serve --db "$TMP/seed.db" --addr "127.0.0.1:$port" --admin-addr off 2>/dev/null &
	sp=$!
	wait_up "http://127.0.0.1:$port/healthz"
	for i in $(seq -f %03g 1 100); do
		curl -sf -o /dev/null -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
			-d "{\"name\":\"cat-$i\",\"description\":\"Benchmark category number $i\"}" "http://127.0.0.1:$port/v1/categories"
	done
	kill "$sp"; wait "$sp" 2>/dev/null || true
	declare -gA URL PID
	for v in before after; do
		bin=$before; [[ $v == after ]] && bin=$after
		cp "$TMP/seed.db" "$TMP/$v.db"
		port=$(free_port)
		taskset -c 1 "$bin" serve --db "$TMP/$v.db" --addr "127.0.0.1:$port" --admin-addr off \
			--tls-cert "$TMP/tls.crt" --tls-key "$TMP/tls.key" 2>>"$TMP/$v.log" &
		PID[$v]=$! PIDS+=($!)
		URL[$v]=https://127.0.0.1:$port
		wait_up "${URL[$v]}/healthz"
	done
	local close=(-H 'Connection: close') shim=$TMP/fullhandshake.so
	for v in before after; do warm "${URL[$v]}/v1/categories"; done
	rounds ka /v1/categories
	for v in before after; do PRELOAD=$shim warm "${URL[$v]}/healthz" "${close[@]}"; done
	PRELOAD=$shim rounds hs /healthz "${close[@]}"
	local labels="ka hs"
	if [[ ${H2:-} == 1 ]]; then
		# HTTP/2 (issue 41): h2load, 8 connections of 4 streams each (32 in
		# flight, under the 64 of one address's share), on
		# the same GET; its summary written as wrk's, for the awk below.
		for v in before after; do h2run "${URL[$v]}/v1/categories" "$WARMUP" >/dev/null; done
		for i in $(seq "$RUNS"); do
			order="before after"; ((i % 2)) || order="after before"
			for v in $order; do
				t0=$(cpu_ticks "${PID[$v]}")
				h2run "${URL[$v]}/v1/categories" "$DURATION" >"$TMP/h2-$v-$i.txt"
				echo $(($(cpu_ticks "${PID[$v]}") - t0)) >"$TMP/h2-$v-$i.cpu"
			done
		done
		labels="ka hs h2"
	fi
	for label in $labels; do
		for i in $(seq "$RUNS"); do
			for v in before after; do
				f=$TMP/$label-$v-$i
				reqs=$(awk '/requests in/ {print $1}' "$f.txt")
				echo "$v $(awk '/^Requests\/sec/ {print $2}' "$f.txt") $(awk -v t="$(cat "$f.cpu")" -v r="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz * 1e6 / r}')"
			done | awk -v l="$label" -v i="$i" '{r[$1] = $2; c[$1] = $3} END {printf "%s %d req/s %.0f %.0f CPU-us/req %.1f %.1f ratio %.3f %.3f\n", l, i, r["before"], r["after"], c["before"], c["after"], r["after"] / r["before"], c["after"] / c["before"]}'
		done >"$TMP/$label.rounds"
		cat "$TMP/$label.rounds"
		echo "$label medians: req/s $(awk '{print $4}' "$TMP/$label.rounds" | med) -> $(awk '{print $5}' "$TMP/$label.rounds" | med)," \
			"CPU us/req $(awk '{print $7}' "$TMP/$label.rounds" | med) -> $(awk '{print $8}' "$TMP/$label.rounds" | med);" \
			"the rounds' after/before ratios: req/s $(awk '{print $10}' "$TMP/$label.rounds" | med), CPU/req $(awk '{print $11}' "$TMP/$label.rounds" | med);" \
			"failed: $(cat "$TMP/$label"-*.txt | awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(/[^0-9 ]/, " "); n += $1 + $2 + $3 + $4} END {print n + 0}')"
	done
	for v in before after; do echo "$v peak RSS: $(awk '/VmHWM/ {printf "%.1f MiB", $2 / 1024}' "/proc/${PID[$v]}/status")"; done
}
# h2run URL DURATION: h2load over HTTP/2, its counts as wrk prints them.
h2run() {
	taskset -c 0 h2load -c8 -m4 -t1 -D "${2%s}" -H "authorization: Bearer $KEY" "$1" 2>/dev/null |
		awk '/^finished in/ {gsub(/,/, ""); print "Requests/sec: " $4} /^requests:/ {print $6 " requests in"; if ($10 > 0) print "Non-2xx or 3xx responses: " $10}'
}
warm() { LD_PRELOAD=${PRELOAD:-} taskset -c 0 wrk -t1 -c32 -d"$WARMUP" -H "Authorization: Bearer $KEY" "${@:2}" "$1" >/dev/null; }
# rounds label path [wrk args]: RUNS rounds, the builds' order swapped each round.
rounds() {
	local label=$1 path=$2 i v t0 order; shift 2
	for i in $(seq "$RUNS"); do
		order="before after"; ((i % 2)) || order="after before"
		for v in $order; do
			t0=$(cpu_ticks "${PID[$v]}")
			LD_PRELOAD=${PRELOAD:-} taskset -c 0 wrk -t1 -c32 -d"$DURATION" -H "Authorization: Bearer $KEY" "$@" "${URL[$v]}$path" >"$TMP/$label-$v-$i.txt"
			echo $(($(cpu_ticks "${PID[$v]}") - t0)) >"$TMP/$label-$v-$i.cpu"
		done
	done
}

idle() {
	local bin=$1 mode=$2 n=$3 port pid key rss_idle out
	go build -o "$TMP/idleconns" ./bench/idleconns
	key=$(newkey "$bin" "$TMP/p.db")
	port=$(free_port)
	"$bin" serve --db "$TMP/p.db" --addr "127.0.0.1:$port" --admin-addr off --tls-cert "$TMP/tls.crt" --tls-key "$TMP/tls.key" \
		--log-level warn 2>"$TMP/log" &
	pid=$! PIDS+=($!)
	wait_up "https://127.0.0.1:$port/healthz"
	rss() { awk -v k="$1:" '$1 == k {printf "%.1f", $2 / 1024}' "/proc/$pid/status"; }
	rss_idle=$(rss VmRSS)
	mkfifo "$TMP/hold"
	"$TMP/idleconns" "127.0.0.1:$port" "$TMP/tls.crt" "$key" "$mode" "$n" <"$TMP/hold" >"$TMP/out" &
	exec 3>"$TMP/hold"
	for _ in $(seq 600); do [[ -s $TMP/out ]] && break; sleep 0.05; done
	echo "$(basename "$bin") $mode x$n: $(cat "$TMP/out"); RSS before $rss_idle MiB, holding them $(rss VmRSS) MiB, peak (VmHWM) $(rss VmHWM) MiB"
	exec 3>&-
}

case ${1:-} in
ab) ab "$2" "$3" ;;
idle) idle "$2" "$3" "$4" ;;
*) sed -n '2,4p' "$0" >&2; exit 2 ;;
esac
