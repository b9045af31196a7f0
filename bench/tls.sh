# bench/tls.sh: rows 11-13 of bench/run.sh (issue 29), sourced by it and
# run with its helpers: petstore serving HTTPS itself (--tls-cert, an ECDSA
# P-256 pair) against the same binary over plain HTTP and against Caddy
# (Debian's caddy) terminating TLS in front of it. Every server runs on
# CPU 1 and wrk on CPU 0, as in the other rows, and the runs alternate.
#
# Row 11: GET /v1/categories over HTTP/1.1 keep-alive (wrk speaks no
#   HTTP/2): petstore over HTTPS, over plain HTTP, and through Caddy's
#   reverse_proxy to the plain one.
# Row 12: a full TLS 1.3 handshake per request (`Connection: close`, and
#   bench/fullhandshake.c so that wrk never resumes a session). One wrk on
#   one CPU cannot keep up with a server doing full handshakes (OpenSSL's
#   client side costs more than Go's server side: measured 98% of CPU 0
#   against 56% of CPU 1), so the row compares each TLS terminator's
#   handshakes per second of its own CPU time, not wrk's rate. The target
#   is on each terminator answering a request of next to no work itself
#   (petstore's /healthz, Caddy's `respond`); the same with the list, Caddy
#   proxying to petstore, is the deployment's view and counts both
#   processes' CPU.
# Row 13: petstore's peak RSS after rows 11-12.

# check_full_handshakes: wrk with the shim against bench/baseline's
# counters; exits when any handshake was resumed.
check_full_handshakes() {
	local port counts
	port=$(free_port)
	start tlscheck "$TMP/baseline" -addr "127.0.0.1:$port" -tls-cert "$TMP/tls.crt" -tls-key "$TMP/tls.key"
	wait_up "https://127.0.0.1:$port/healthz"
	LD_PRELOAD=$TMP/fullhandshake.so taskset -c 0 wrk -t1 -c8 -d1s -H 'Connection: close' "https://127.0.0.1:$port/healthz" >/dev/null
	counts=$(curl -sk "https://127.0.0.1:$port/handshakes")
	stop "$PID"
	log "wrk with bench/fullhandshake.c against bench/baseline: $counts handshakes"
	if ! awk '{exit !($2 >= 100 && $4 == 0)}' <<<"$counts"; then
		log "wrk resumed TLS sessions (or made none): row 12 would not measure full handshakes"
		exit 1
	fi
}

# tls_note label: the servers' CPU time per request over label's runs, and
# how busy it kept CPU 1 (wrk's runs were DURATION each).
tls_note() {
	local ticks
	ticks=$(cat "$OUT/wrk/$1"-*.cpu | awk '{n += $1} END {print n}')
	echo "CPU $(cpu_us "$1") us/req, $(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v n="$RUNS" -v d="${DURATION%s}" \
		'BEGIN {printf "%.0f", 100 * t / hz / (n * d)}')% busy"
}
# per_cpu_s label: requests (here: handshakes) per second of server CPU.
per_cpu_s() { awk -v us="$(cpu_us "$1")" 'BEGIN {printf "%.0f", 1e6 / us}'; }

tls_rows() {
	log "HTTPS: rows 11-13"
	openssl ecparam -name prime256v1 -genkey -noout -out "$TMP/tls.key"
	openssl req -new -x509 -key "$TMP/tls.key" -out "$TMP/tls.crt" -days 2 -subj /CN=127.0.0.1 \
		-addext subjectAltName=IP:127.0.0.1 2>/dev/null
	cc -O2 -shared -fPIC -o "$TMP/fullhandshake.so" bench/fullhandshake.c -ldl
	check_full_handshakes

	local pl pl_pid pl_port tl tl_pid ca ca_pid cport caddy_v f
	cp "$TMP/seeded.db" "$TMP/plain.db"
	cp "$TMP/seeded.db" "$TMP/tls.db"
	serve_petstore "$TMP/plain.db"
	pl=$P pl_pid=$PID pl_port=$PORT
	SCHEME=https serve_petstore "$TMP/tls.db" --tls-cert "$TMP/tls.crt" --tls-key "$TMP/tls.key"
	tl=$P tl_pid=$PID

	# Caddy as docs/operations.md sets it up, less what a benchmark on
	# loopback does not want: no admin endpoint, no automatic certificates,
	# no HTTP/3 (UDP; wrk speaks HTTP/1.1), no access log, loopback only.
	# /healthz is answered by Caddy itself (row 12), the rest by petstore.
	cport=$(free_port)
	mkdir -p "$TMP/caddy"
	cat >"$TMP/Caddyfile" <<-EOF
		{
			admin off
			auto_https off
			servers {
				protocols h1 h2
			}
			log {
				level ERROR
			}
		}
		https://127.0.0.1:$cport {
			bind 127.0.0.1
			tls $TMP/tls.crt $TMP/tls.key
			handle /healthz {
				respond \`{"status":"ok"}\` 200
			}
			handle {
				reverse_proxy 127.0.0.1:$pl_port
			}
		}
	EOF
	start caddy env HOME="$TMP/caddy" XDG_DATA_HOME="$TMP/caddy" XDG_CONFIG_HOME="$TMP/caddy" \
		caddy run --config "$TMP/Caddyfile" --adapter caddyfile
	ca=https://127.0.0.1:$cport ca_pid=$PID
	wait_up "$ca/healthz"
	caddy_v=$(caddy version | cut -d' ' -f1)

	for f in "$tl" "$ca"; do
		cmp -s <(curl -s --cacert "$TMP/tls.crt" "${AUTH[@]}" "$f/v1/categories") "$TMP/list.json" ||
			log "WARNING: the list over $f differs from plain HTTP's"
		log "$f: $(openssl s_client -connect "${f#https://}" -servername 127.0.0.1 </dev/null 2>/dev/null |
			awk '/^New, / {v = $0} /^Server Temp Key/ {k = $0} END {print v ", " k}')"
	done

	# Row 11: keep-alive, alternated.
	warm "$pl/v1/categories" "${AUTH[@]}"
	warm "$tl/v1/categories" "${AUTH[@]}"
	warm "$ca/v1/categories" "${AUTH[@]}"
	for i in $(seq "$RUNS"); do
		CPU_PID=$pl_pid run_once ka-plain "$i" "$pl/v1/categories" "${AUTH[@]}"
		CPU_PID=$tl_pid run_once ka-tls "$i" "$tl/v1/categories" "${AUTH[@]}"
		CPU_PID="$ca_pid $pl_pid" run_once ka-caddy "$i" "$ca/v1/categories" "${AUTH[@]}"
	done

	# Row 12: a full handshake per request, alternated. The key goes to
	# /healthz too, or petstore would limit the keyless address.
	local close=(-H 'Connection: close') pre=$TMP/fullhandshake.so
	PRELOAD=$pre warm "$tl/healthz" "${AUTH[@]}" "${close[@]}"
	PRELOAD=$pre warm "$ca/healthz" "${AUTH[@]}" "${close[@]}"
	for i in $(seq "$RUNS"); do
		PRELOAD=$pre CPU_PID=$tl_pid run_once hs-petstore "$i" "$tl/healthz" "${AUTH[@]}" "${close[@]}"
		PRELOAD=$pre CPU_PID=$ca_pid run_once hs-caddy "$i" "$ca/healthz" "${AUTH[@]}" "${close[@]}"
		PRELOAD=$pre CPU_PID=$tl_pid run_once hsl-petstore "$i" "$tl/v1/categories" "${AUTH[@]}" "${close[@]}"
		PRELOAD=$pre CPU_PID="$ca_pid $pl_pid" run_once hsl-caddy "$i" "$ca/v1/categories" "${AUTH[@]}" "${close[@]}"
	done

	local rss c_rss
	rss=$(hwm_mib "$tl_pid") c_rss=$(hwm_mib "$ca_pid")
	stop "$ca_pid"
	stop "$tl_pid"
	stop "$pl_pid"

	local p_rps t_rps c_rps
	summarize ka-plain
	p_rps=$RPS
	local plain_row=("the same over plain HTTP: petstore$(note)" "$RPS" "$P50" "$P99" "" "$(tls_note ka-plain)" 1.00 "" "")
	summarize ka-tls
	t_rps=$RPS
	row 11 "GET /v1/categories over HTTPS (P-256), HTTP/1.1 keep-alive: petstore --tls-cert$(note)" "$RPS" "$P50" "$P99" "" \
		"$(tls_note ka-tls)" "$(ratio "$RPS" "$p_rps") (vs plain; $(ratio "$(cpu_us ka-plain)" "$(cpu_us ka-tls)") by CPU per request)" ">= 0.85 x plain HTTP" "$(ok "$RPS >= 0.85 * $p_rps")"
	row 11 "${plain_row[@]}"
	summarize ka-caddy
	c_rps=$RPS
	row 11 "the same through Caddy $caddy_v (TLS at Caddy, plain HTTP to petstore, both on CPU 1)$(note)" "$RPS" "$P50" "$P99" "" \
		"$(tls_note ka-caddy)" "$(ratio "$RPS" "$p_rps") (vs plain); petstore's HTTPS $(ratio "$t_rps" "$c_rps") x this ($(ratio "$(cpu_us ka-caddy)" "$(cpu_us ka-tls)") x by CPU per request)" \
		"petstore's HTTPS >= 3 x" "$(ok "$t_rps >= 3 * $c_rps")"

	local p_hs c_hs
	p_hs=$(per_cpu_s hs-petstore) c_hs=$(per_cpu_s hs-caddy)
	summarize hs-petstore
	row 12 "full TLS 1.3 handshakes, a new connection per GET /healthz: petstore$(note)" "$RPS" "$P50" "$P99" "" \
		"$p_hs handshakes per CPU second ($(tls_note hs-petstore))" "$(ratio "$p_hs" "$c_hs") x Caddy's" \
		">= 1.2 x Caddy's, per CPU second" "$(ok "$p_hs >= 1.2 * $c_hs")"
	summarize hs-caddy
	row 12 "the same, Caddy answering /healthz itself (respond)$(note)" "$RPS" "$P50" "$P99" "" \
		"$c_hs handshakes per CPU second ($(tls_note hs-caddy))" "" "" ""
	p_hs=$(per_cpu_s hsl-petstore) c_hs=$(per_cpu_s hsl-caddy)
	summarize hsl-petstore
	row 12 "a new connection per GET /v1/categories: petstore$(note)" "$RPS" "$P50" "$P99" "" \
		"$p_hs per CPU second ($(tls_note hsl-petstore))" "$(ratio "$p_hs" "$c_hs") x through Caddy" "" ""
	summarize hsl-caddy
	row 12 "the same through Caddy's reverse_proxy (Caddy's and petstore's CPU)$(note)" "$RPS" "$P50" "$P99" "" \
		"$c_hs per CPU second ($(tls_note hsl-caddy))" "" "" ""

	row 13 "peak RSS (VmHWM) under rows 11-12: petstore --tls-cert" "" "" "" "$rss MiB" "" "" "<= 28 MiB" "$(ok "$rss <= 28")"
	row 13 "peak RSS (VmHWM) under rows 11-12: Caddy (beside the plain petstore)" "" "" "" "$c_rss MiB" "" "" "" ""
}
