#!/usr/bin/env bash
# goodput benchmark harness: runs goodput and peer tools (iperf3; nuttcp when
# installed) on loopback in one run, A/B alternated, and prints ratios.
# Not a test and never CI-gating: absolute numbers from a small VM are noise,
# the ratios between tools measured side by side are the result.
#
#   bench/run.sh [all|single|verify|multi|duplex|churn|memory|agent|iperf3|iperf3-server|stamp|stamp-sessions|twamp|owamp-sessions|owamp-precision|ttcp|echo-latency|echo-scale|udp|udp-streams|quic|quic-parity|trace|dashboard|fleet|mesh-scale]...
#
# Environment: SECONDS_PER_RUN (default 5), ROUNDS (default 3),
#   CHURN_SECONDS (default 30), MEMORY_CONNECTIONS (default 18000),
#   STAMP_SESSIONS (default 1000), STAMP_SIZE (default 44),
#   ECHO_CONNECTIONS (default 18000), UDP_LADDER (rates tried, bits/s),
#   AGENT_RUNS (default 5000), AGENT_RATE (default 200 requests/s),
#   QUINN_PERF (a quinn-perf binary, for quic-parity),
#   DASHBOARD_HOSTS (default 50), DASHBOARD_REQUESTS (default 21 timed
#   requests per URL), DASHBOARD_LOADS (default 7 browser loads per page),
#   FLEET_HOSTS (default 100), FLEET_REQUESTS (default 21),
#   FLEET_INGEST_SECONDS (default 20), OWAMP_SESSIONS (default 50),
#   MESH_PEERS (default 499), MESH_SECONDS (default 600),
#   TWAMPD, OWAMPD, OWPING (perfSONAR's twampd, owampd and owping, built
#   beside the project from github.com/perfsonar/owamp: no package
#   registry has them; without them goodput is measured alone).
set -euo pipefail
cd "$(dirname "$0")/.."

T=${SECONDS_PER_RUN:-5}
ROUNDS=${ROUNDS:-3}
GP=${GP:-target/release/goodput}
PORT_GP=14444
PORT_IP=15201
PORT_GI=15202
PORT_ST=18620
PORT_SS=18621
PORT_ECHO=14470
PORT_SP=11111
PORT_Q=14433
PORT_OW=18861
PORT_TW=18862
PORT_OWD=18863
PORT_TWD=18864
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

cargo build --release -q -p goodput
cargo build --release -q -p goodput-engine --example stamp_flood
FLOOD=target/release/examples/stamp_flood
command -v iperf3 >/dev/null || { echo "iperf3 not installed (apt-get install iperf3)"; exit 1; }

echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
echo "tools:   $($GP --version), $(iperf3 --version | head -1)$(command -v nuttcp >/dev/null && echo ", $(nuttcp -V 2>&1 | head -1)")"
echo "runs:    ${T}s each, $ROUNDS rounds, A/B alternated"
echo

# The benchmarks hold up to 18,000 connections from one address, which the
# server's per-client default (a quarter of the open-file limit) refuses, and
# flood the STAMP reflector from one address past its per-source default.
BENCH_LIMITS="--max-connections 19000 --max-per-client 19000 --max-pending-per-client 4096 --stamp-rate-limit 0"

# perfSONAR's owampd or twampd on loopback with no limits: $1 the binary,
# $2 owamp|twamp, $3 the control port, $4 the test ports.
start_perfsonar() {
  local dir=$work/$2
  mkdir -p "$dir"
  printf 'srcnode 127.0.0.1:%s\nvardir %s\ndatadir %s\ntestports %s\n' "$3" "$dir" "$dir" "$4" > "$dir/$2-server.conf"
  printf 'limit root with bandwidth=0, disk=0, delete_on_fetch=on\nassign default root\n' > "$dir/$2-server.limits"
  "$1" -f -Z -c "$dir" >/dev/null 2>&1 & pids+=($!)
}

start_servers() {
  $GP server --listen 127.0.0.1 --port $PORT_GP --verbosity 0 $BENCH_LIMITS \
      --iperf3 --iperf3-listen 127.0.0.1 --iperf3-port $PORT_GI \
      --stamp --stamp-listen 127.0.0.1 --stamp-port $PORT_ST --echo-port $PORT_ECHO \
      --quic --quic-listen 127.0.0.1 --quic-port $PORT_Q \
      --owamp --owamp-port $PORT_OW --twamp --twamp-port $PORT_TW --ow-twamp-listen 127.0.0.1 \
      --ow-twamp-max-bitrate 100G --ow-twamp-max-connections 1000 --ow-twamp-max-per-client 1000 \
      --ow-twamp-max-sessions 1000 & pids+=($!)
  [ -n "${OWAMPD:-}" ] && start_perfsonar "$OWAMPD" owamp $PORT_OWD 19000-19999
  [ -n "${TWAMPD:-}" ] && start_perfsonar "$TWAMPD" twamp $PORT_TWD 20000-20999
  if command -v sockperf >/dev/null; then
    sockperf server --tcp -i 127.0.0.1 -p $PORT_SP >/dev/null 2>&1 & pids+=($!)
  fi
  if command -v stamp-suite >/dev/null; then
    stamp-suite --is-reflector --local-addr 127.0.0.1 --local-port $PORT_SS >/dev/null 2>&1 & pids+=($!)
  fi
  iperf3 -s -B 127.0.0.1 -p $PORT_IP >/dev/null 2>&1 & pids+=($!)
  if command -v nuttcp >/dev/null; then nuttcp -S --nofork -P 15000 >/dev/null 2>&1 & pids+=($!); fi
  sleep 0.5
}

json_get() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }

# goodput: bytes/s moved over the run (both directions summed), from its JSON.
gp_rate() {
  local out=$work/gp.json
  $GP tcp 127.0.0.1 --port $PORT_GP --verbosity 0 --iterations 0 --transfer 1TiB \
      --time-limit "${T}s" --json "$out" "$@" >/dev/null || true
  json_get "$out" "(d['summary']['sent_bytes']+d['summary']['received_bytes'])/d['summary']['duration_s']"
}

# iperf3: bytes/s received (both directions summed with --bidir).
ip_rate() {
  local out=$work/ip.json
  iperf3 -c 127.0.0.1 -p $PORT_IP -t "$T" -J "$@" > "$out"
  json_get "$out" "(d['end']['sum_received']['bytes'] + d['end'].get('sum_received_bidir_reverse',{}).get('bytes',0))/d['end']['sum_received']['seconds']"
}

# goodput's iperf3 client against a stock iperf3 server: bytes/s the server
# received (from the results exchange), as ip_rate measures iperf3's own.
gi_rate() {
  local out=$work/gi.json
  $GP iperf3 127.0.0.1 -p $PORT_IP -t "$T" -v 0 --iperf3-json "$out" "$@" >/dev/null
  json_get "$out" "d['end']['sum_received']['bytes']/d['end']['sum_received']['seconds']"
}

nt_rate() {
  nuttcp -P 15000 -p 15001 -T "$T" -fparse "$@" 127.0.0.1 | sed -n 's/.*rate_Mbps=\([0-9.]*\).*/\1/p' | awk '{print $1*1e6/8}'
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
gbit() { awk -v b="$1" 'BEGIN{printf "%.2f Gbit/s", b*8/1e9}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2fx", a/b}'; }

# ab NAME "A command" "B command": alternate, print medians and ratio A/B.
ab() {
  local name=$1 a=$2 b=$3 ra=() rb=()
  for _ in $(seq "$ROUNDS"); do ra+=("$(eval "$a")"); rb+=("$(eval "$b")"); done
  local ma mb
  ma=$(printf '%s\n' "${ra[@]}" | median); mb=$(printf '%s\n' "${rb[@]}" | median)
  printf '%-52s %16s %16s %8s\n' "$name" "$(gbit "$ma")" "$(gbit "$mb")" "$(ratio "$ma" "$mb")"
}

header() { printf '%-52s %16s %16s %8s\n' "comparison" "A (median)" "B (median)" "A/B"; }

bench_single() {
  # iperf3 at its best -l: try the usual sizes once, keep the fastest.
  local best_l=128K best=0
  for l in 128K 256K 1M; do
    r=$(ip_rate -l $l); if awk -v r="$r" -v b="$best" 'BEGIN{exit !(r>b)}'; then best=$r; best_l=$l; fi
  done
  ab "1 conn push: goodput defaults / iperf3 -l $best_l" "gp_rate --connections 1" "ip_rate -l $best_l"
  if command -v nuttcp >/dev/null; then
    ab "1 conn push: goodput defaults / nuttcp -l1m" "gp_rate --connections 1" "nt_rate -l1m"
  fi
}

bench_buffers() {
  for b in 64KiB 128KiB 256KiB 1MiB; do
    ab "1 conn push: goodput --buffer $b / iperf3 -l 128K" "gp_rate --connections 1 --buffer $b" "ip_rate -l 128K"
  done
}

bench_verify() {
  ab "1 conn push: --verify data / --verify connection" "gp_rate --connections 1 --verify data" "gp_rate --connections 1 --verify connection"
}

bench_multi() {
  ab "8 conn push: goodput / iperf3 -P 8" "gp_rate --connections 8" "ip_rate -P 8 -l 128K"
}

bench_duplex() {
  ab "1 conn duplex: goodput / iperf3 --bidir" "gp_rate --connections 1 --pattern duplex" "ip_rate --bidir -l 128K"
}

bench_churn() {
  local s=${CHURN_SECONDS:-30} out=$work/churn.json
  $GP tcp 127.0.0.1 --port $PORT_GP --verbosity 0 --transfer 64 --connections 100 --shutdown rude \
      --iterations 0 --time-limit "${s}s" --max-records 0 --json "$out" >/dev/null || true
  json_get "$out" "'churn, 64 B x 100 conns, rude, %ds: %.0f completed connections/s, %d network errors, %d data errors' % ($s, d['summary']['successful']/d['summary']['duration_s'], d['summary']['network_errors'], d['summary']['data_errors'])"
}

rss_kib() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }

# Holds N established connections that move one byte per second each way
# (as idle as a live connection gets), then reads both processes' RSS.
hold() {
  local n=$1 port=$2 status=$work/hold.csv
  $GP server --listen 127.0.0.1 --port "$port" --verbosity 0 $BENCH_LIMITS & local srv=$!
  sleep 0.5
  $GP tcp 127.0.0.1 --port "$port" --verbosity 0 --connections "$n" --transfer 1GiB --pattern duplex \
      --rate-limit 1 --rate-period 1s --idle-timeout 120s --status-interval 500ms --status-file "$status" & local cli=$!
  local t=0
  while [ "$(tail -1 "$status" 2>/dev/null | cut -d, -f4)" != "$n" ]; do
    sleep 0.5; t=$((t+1)); [ $t -lt 240 ] || { echo "only $(tail -1 "$status" | cut -d, -f4) of $n established" >&2; break; }
  done
  # RSS 2 s after the last connection is up, and again once settled: the
  # allocator gives the memory of the setup burst back over a few seconds.
  sleep 2
  local early="$(rss_kib $cli) $(rss_kib $srv)"
  sleep "${MEMORY_SETTLE:-10}"
  echo "$(rss_kib $cli) $(rss_kib $srv) $early"
  kill -INT $cli; wait $cli 2>/dev/null || true; kill -INT $srv; wait $srv 2>/dev/null || true
}

bench_iperf3_server() {
  ab "iperf3 client: goodput server vs iperf3 server, 1 stream" "ip_rate -p $PORT_GI" "ip_rate"
  ab "iperf3 client: goodput server vs iperf3 server, -P 4" "ip_rate -p $PORT_GI -P 4" "ip_rate -P 4"
  ab "iperf3 client: goodput server vs iperf3 server, -R" "ip_rate -p $PORT_GI -R" "ip_rate -R"
}

bench_iperf3() {
  # Both clients against the same stock iperf3 server, then the stock client
  # against goodput's iperf3 service and against the stock server.
  ab "iperf3 wire: goodput client vs iperf3 client, 1 stream" "gi_rate" "ip_rate"
  ab "iperf3 wire: goodput client vs iperf3 client, -P 4" "gi_rate -P 4" "ip_rate -P 4"
  # goodput writes up to 512 KiB of whole blocks per call; with -l 1M both
  # make the same calls.
  ab "iperf3 wire: same as above, both -l 1M" "gi_rate -l 1M" "ip_rate -l 1M"
  bench_iperf3_server
}

bench_memory() {
  local big=${MEMORY_CONNECTIONS:-18000} small=1000
  read -r c1 s1 e1 f1 < <(hold $small 14600)
  read -r c2 s2 e2 f2 < <(hold "$big" 14601)
  awk -v c1="$c1" -v s1="$s1" -v c2="$c2" -v s2="$s2" -v e1="$e1" -v f1="$f1" -v e2="$e2" -v f2="$f2" \
      -v a="$small" -v b="$big" -v w="${MEMORY_SETTLE:-10}" 'BEGIN{
    printf "memory: %d -> %d established connections: client RSS %d -> %d KiB (%.2f KiB/conn), server RSS %d -> %d KiB (%.2f KiB/conn), settled %d s\n",
      a, b, c1, c2, (c2-c1)/(b-a), s1, s2, (s2-s1)/(b-a), w + 2
    printf "memory, 2 s after the last connect: client %.2f KiB/conn, server %.2f KiB/conn\n", (e2-e1)/(b-a), (f2-f1)/(b-a) }'
}

# STAMP reflector: replies/s each reflector sustains under the same closed-loop
# load (stamp_flood: 4 sockets x 64 requests outstanding), A/B alternated.
bench_stamp() {
  command -v stamp-suite >/dev/null || { echo "stamp-suite not installed (cargo install stamp-suite)"; return; }
  local size=${STAMP_SIZE:-44} ra=() rb=()
  for _ in $(seq "$ROUNDS"); do
    ra+=("$($FLOOD 127.0.0.1:$PORT_ST "$T" 4 64 "$size" | cut -d' ' -f1)")
    rb+=("$($FLOOD 127.0.0.1:$PORT_SS "$T" 4 64 "$size" | cut -d' ' -f1)")
  done
  local ma mb
  ma=$(printf '%s\n' "${ra[@]}" | median); mb=$(printf '%s\n' "${rb[@]}" | median)
  printf '%-52s %16s %16s %8s\n' "stamp reflector ${size} B: goodput vs stamp-suite" \
    "$(awk -v v="$ma" 'BEGIN{printf "%.0f pkt/s", v}')" "$(awk -v v="$mb" 'BEGIN{printf "%.0f pkt/s", v}')" "$(ratio "$ma" "$mb")"
}

# TWAMP reflector: replies/s under the same closed-loop load (stamp_flood
# --twamp: 4 sessions, each its own socket, 64 packets outstanding),
# goodput's reflector against twampd's, A/B alternated.
bench_twamp() {
  local size=${STAMP_SIZE:-44} ra=() rb=() ma mb
  for _ in $(seq "$ROUNDS"); do
    ra+=("$($FLOOD --twamp 127.0.0.1:$PORT_TW "$T" 4 64 "$size" | cut -d' ' -f1)")
    [ -n "${TWAMPD:-}" ] && rb+=("$($FLOOD --twamp 127.0.0.1:$PORT_TWD "$T" 4 64 "$size" | cut -d' ' -f1)")
  done
  ma=$(printf '%s\n' "${ra[@]}" | median)
  if [ ${#rb[@]} -eq 0 ]; then
    printf '%-52s %16s %16s\n' "twamp reflector ${size} B: goodput (set TWAMPD to compare)" \
      "$(awk -v v="$ma" 'BEGIN{printf "%.0f pkt/s", v}')" "-"
    return
  fi
  mb=$(printf '%s\n' "${rb[@]}" | median)
  printf '%-52s %16s %16s %8s\n' "twamp reflector ${size} B: goodput vs twampd" \
    "$(awk -v v="$ma" 'BEGIN{printf "%.0f pkt/s", v}')" "$(awk -v v="$mb" 'BEGIN{printf "%.0f pkt/s", v}')" "$(ratio "$ma" "$mb")"
}

# Resident memory of a process and its children (owampd forks per
# connection and per session), KiB.
tree_rss_kib() {
  local total=0 p
  for p in $1 $(pgrep -P "$1" || true); do
    total=$((total + $(rss_kib "$p")))
    for c in $(pgrep -P "$p" || true); do total=$((total + $(rss_kib "$c"))); done
  done
  echo $total
}

# OWAMP sessions held at once: N goodput clients each send one session of
# 10 packets/s for T seconds to the server, which keeps every receive log
# until fetched; the server's memory with all N under way, and how many
# ended whole (all packets fetched, none lost).
owamp_hold() {  # $1 port, $2 server pid
  local n=${OWAMP_SESSIONS:-50} count=$((T * 10)) cpids=() i rss whole
  for i in $(seq "$n"); do
    $GP owamp 127.0.0.1:"$1" --to -c $count -i 100ms -v 0 --json "$work/hold-$1-$i.json" >/dev/null 2>&1 & cpids+=($!)
  done
  sleep $((T / 2 + 3))
  rss=$(tree_rss_kib "$2")
  for p in "${cpids[@]}"; do wait "$p" || true; done
  whole=0
  for i in $(seq "$n"); do
    python3 -c "import json,sys; d=json.load(open('$work/hold-$1-$i.json'))['owamp']['to']; sys.exit(0 if d['sent']==$count and d['lost']==0 else 1)" 2>/dev/null && whole=$((whole + 1))
  done
  echo "$rss $whole"
}
bench_owamp_sessions() {
  local n=${OWAMP_SESSIONS:-50} a b gp_pid
  gp_pid=$(pgrep -f -- "--owamp-port $PORT_OW" | head -1)
  a=$(owamp_hold $PORT_OW "$gp_pid")
  printf '%-52s %16s %16s\n' "owamp: $n sessions at once, server memory" \
    "$(echo "$a" | awk '{printf "%.1f MiB", $1/1024}')" "$([ -n "${OWAMPD:-}" ] || echo '(set OWAMPD)')"
  if [ -n "${OWAMPD:-}" ]; then
    b=$(owamp_hold $PORT_OWD "$(pgrep -f -- "$work/owamp" | head -1)")
    printf '%-52s %16s %16s %8s\n' "owamp: $n sessions at once, server memory: goodput vs owampd" \
      "$(echo "$a" | awk '{printf "%.1f MiB", $1/1024}')" "$(echo "$b" | awk '{printf "%.1f MiB", $1/1024}')" \
      "$(ratio "$(echo "$b" | cut -d' ' -f1)" "$(echo "$a" | cut -d' ' -f1)")"
    echo "  sessions whole (every packet fetched, none lost): goodput $(echo "$a" | cut -d' ' -f2)/$n, owampd $(echo "$b" | cut -d' ' -f2)/$n"
  else
    echo "  sessions whole (every packet fetched, none lost): $(echo "$a" | cut -d' ' -f2)/$n"
  fi
}

# One-way delay precision on loopback: ROUNDS x 2 runs of 100 packets at
# 10 ms to owampd (goodput's server without OWAMPD), each tool's median
# and the spread of its medians. owping reads its median from 0.1 ms
# buckets; goodput's is exact to 0.1%.
bench_owamp_precision() {
  local port=$PORT_OW gm=() om=() i
  [ -n "${OWAMPD:-}" ] && port=$PORT_OWD
  for i in $(seq $((ROUNDS * 2))); do
    $GP owamp 127.0.0.1:$port --to -c 100 -i 10ms -v 0 --json "$work/prec.json" >/dev/null 2>&1 || true
    gm+=("$(json_get "$work/prec.json" "d['owamp']['to']['delay']['median_us']/1000")")
    if [ -n "${OWPING:-}" ]; then
      om+=("$("$OWPING" -t -c 100 -i 0.01f -M 127.0.0.1:$port 2>/dev/null | awk '$1=="MEDIAN"{print $2*1000}')")
    fi
  done
  printf '  goodput medians (ms): %s; spread %s ms\n' "${gm[*]}" \
    "$(printf '%s\n' "${gm[@]}" | sort -g | awk 'NR==1{a=$1} {b=$1} END{printf "%.4f", b-a}')"
  [ ${#om[@]} -gt 0 ] && printf '  owping medians (ms):  %s; spread %s ms\n' "${om[*]}" \
    "$(printf '%s\n' "${om[@]}" | sort -g | awk 'NR==1{a=$1} {b=$1} END{printf "%.4f", b-a}')"
  return 0
}

# STAMP sender at scale: N sessions at 10 packets/s each for T seconds
# against goodput's reflector; loss must be 0.
bench_stamp_sessions() {
  local n=${STAMP_SESSIONS:-1000} out=$work/st.json
  /usr/bin/time -f '%M' -o "$work/st.rss" $GP stamp 127.0.0.1 -p $PORT_ST --sessions "$n" --rate 10 \
      --duration "${T}s" -v 0 --json "$out" || true
  json_get "$out" "'stamp sender: %d sessions x 10 pkt/s for ${T} s: %d sent, %d received, %d lost, %d late, RTT p99 %.3f ms, RSS %s KiB' % (d['stamp']['sessions'], d['stamp']['total']['sent'], d['stamp']['total']['received'], d['stamp']['total']['lost'], d['stamp']['total']['late'], d['stamp']['total']['rtt']['p99_us']/1e3, open('$work/st.rss').read().strip())"
}

# TTCP: goodput's transmitter into goodput's receiver, one TCP stream with
# 128 KiB calls, against iperf3 with -l 128K; bytes/s the receiver counted.
tt_rate() {
  local out=$work/tt.json port=15310
  $GP ttcp -r -B 127.0.0.1 -p $port -l 131072 -v 0 --json "$out" & local r=$!
  sleep 0.3
  # About T seconds at ~20 Gbit/s: the receiver's real time is what counts.
  $GP ttcp -t 127.0.0.1 -p $port -l 131072 -n $((T * 20000)) -v 0 >/dev/null
  wait $r
  json_get "$out" "d['ttcp']['bytes']/d['ttcp']['real_s']"
}
bench_ttcp() { ab "ttcp 1 stream 128 KiB vs iperf3 -l 128K" "tt_rate" "ip_rate -l 128K"; }

# Echo round trip, one connection, 64-byte messages back to back: goodput
# echo --send-after-recv against goodput's echo service, and sockperf
# ping-pong --tcp --mps max against sockperf's server. p50 in microseconds.
gp_echo_p50() {
  local out=$work/echo.json
  $GP echo 127.0.0.1:$PORT_ECHO --connections 1 --messages $((T * 15000)) --message-rate 0 \
      --send-after-recv --message-size 64 -v 0 --json "$out"
  json_get "$out" "d['echo']['round_trip']['p50_us']"
}
sp_p50() {
  sockperf ping-pong --tcp -i 127.0.0.1 -p $PORT_SP -m 64 -t "$T" --full-rtt --mps max 2>&1 \
    | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p'
}
bench_echo_latency() {
  command -v sockperf >/dev/null || { echo "sockperf not installed (apt-get install sockperf)"; return; }
  # sockperf's server binds without SO_REUSEADDR: a connection of an
  # earlier run still in TIME-WAIT on its port (60 s) keeps it from
  # listening, and every ratio would be against nothing.
  if [ -z "$(T=1 sp_p50)" ]; then
    echo "sockperf's server does not answer on port $PORT_SP (a TIME-WAIT from an earlier run? wait a minute)"
    return
  fi
  local ra=() rb=()
  for _ in $(seq "$ROUNDS"); do ra+=("$(gp_echo_p50)"); rb+=("$(sp_p50)"); done
  local ma mb
  ma=$(printf '%s\n' "${ra[@]}" | median); mb=$(printf '%s\n' "${rb[@]}" | median)
  printf '%-52s %16s %16s %8s\n' "echo p50 RTT 64 B: goodput vs sockperf (lower wins)" \
    "$(awk -v v="$ma" 'BEGIN{printf "%.1f us", v}')" "$(awk -v v="$mb" 'BEGIN{printf "%.1f us", v}')" "$(ratio "$ma" "$mb")"
  # Every round's p50 and ratio, for the spread.
  local i rr=()
  for i in "${!ra[@]}"; do rr+=("$(ratio "${ra[$i]}" "${rb[$i]}")"); done
  echo "  rounds (goodput / sockperf us, ratio): $(for i in "${!ra[@]}"; do printf '%s/%s %s; ' "${ra[$i]}" "${rb[$i]}" "${rr[$i]}"; done)"
}

# Many echo connections at 1 message/s, ramped at 10,000 connections/s.
bench_echo_scale() {
  local n=${ECHO_CONNECTIONS:-18000} out=$work/echoscale.json sp
  sp=$(pgrep -f "goodput server --listen 127.0.0.1 --port $PORT_GP" | head -1)
  local before; before=$(rss_kib "$sp")
  /usr/bin/time -f '%M' -o "$work/echo.rss" $GP echo 127.0.0.1:$PORT_ECHO --connections "$n" --batch-size 100 \
      --batch-delay 10 --messages 20 --message-rate 1000 --message-size 64 --hold -v 0 --json "$out" || true
  local after; after=$(rss_kib "$sp")
  json_get "$out" "'echo: %d connections x 20 msgs at 1/s: %d established, %d failed, %d echoed, %d mismatched, RTT p50 %.3f / p99 %.3f ms; client RSS %s KiB, server RSS %s -> %s KiB' % (d['echo']['connections'], d['echo']['established'], d['echo']['refused']+d['echo']['reset']+d['echo']['timed_out']+d['echo']['other_failures'], d['echo']['echoed'], d['echo']['mismatched'], d['echo']['round_trip']['p50_us']/1e3, d['echo']['round_trip']['p99_us']/1e3, open('$work/echo.rss').read().strip(), '$before', '$after')"
}

# UDP media: the highest rate of a ladder that one stream carries with less
# than 0.1% datagram loss, 1400-byte datagrams. goodput udp (the server
# streams at 60 fps, the client plays out, payloads verified) against
# goodput's server; iperf3 -u -l 1400 -w 4M (the most rmem_max lets it set;
# goodput, as root, forces up to 64 MiB) against iperf3's server.
UDP_LADDER=${UDP_LADDER:-"250M 500M 1G 1500M 2G 3G 4G 6G 8G 10G 15G 20G 25G 30G 40G"}
gp_udp_loss() {
  local out=$work/udp.json
  $GP udp 127.0.0.1 -p $PORT_GP -b "$1" --length "${T}s" --datagram-size 1400 -v 0 --json "$out" >/dev/null || true
  # Loss against the plan, not the sender's count: a datagram sent too late
  # for its frame, or never sent, counts as lost; so does a dropped frame.
  json_get "$out" "(lambda m: '%.4f %.0f' % (max(100*(1-m['total']['received']/(m['frames']*m['datagrams_per_frame'])), 100*m['total']['frames_dropped']/m['frames']), m['total']['received_bytes']*8/m['length_s']))(d['media'])"
}
ip_udp_loss() {
  local out=$work/ipu.json
  iperf3 -c 127.0.0.1 -p $PORT_IP -u -l 1400 -w 4M -b "$1" -t "$T" -J > "$out" || true
  json_get "$out" "'%.4f %.0f' % (d['end']['sum']['lost_percent'], d['end']['sum']['bits_per_second'])"
}
# highest FN: walks the ladder up to the first rate with 0.1% loss or more;
# prints the highest rate measured (bits/s) on a step below it and logs
# each step to stderr.
highest() {
  local fn=$1 best=0
  for r in $UDP_LADDER; do
    read -r loss bits < <($fn "$r")
    echo "  $fn $r: loss $loss%, $(awk -v b="$bits" 'BEGIN{printf "%.2f Gbit/s", b/1e9}')" >&2
    awk -v l="$loss" 'BEGIN{exit !(l < 0.1)}' || break
    best=$(awk -v a="$best" -v b="$bits" 'BEGIN{print (b>a)? b : a}')
  done
  echo "$best"
}
bench_udp() {
  local a b
  a=$(highest gp_udp_loss); b=$(highest ip_udp_loss)
  printf '%-52s %16s %16s %8s\n' "udp 1 stream <0.1% loss: goodput udp / iperf3 -u" \
    "$(gbit "$(awk -v x="$a" 'BEGIN{print x/8}')")" "$(gbit "$(awk -v x="$b" 'BEGIN{print x/8}')")" "$(ratio "$a" "$b")"
}
# 100 concurrent 25 Mbit/s streams at 60 fps for T seconds: frames dropped
# must be 0.
bench_udp_streams() {
  local out=$work/udps.json
  /usr/bin/time -f '%M' -o "$work/udps.rss" $GP udp 127.0.0.1 -p $PORT_GP -c 100 -b 25M --frame-rate 60 \
      --length "${T}s" -v 0 --json "$out" >/dev/null || true
  json_get "$out" "'udp media: %d streams x 25 Mbit/s at 60 fps for ${T} s: %d frames completed, %d dropped, %d repeated; %d datagrams lost of %d; jitter %.3f ms; client RSS %s KiB' % (d['media']['streams'], d['media']['total']['frames_completed'], d['media']['total']['frames_dropped'], d['media']['total']['frames_repeated'], d['media']['total']['lost'], d['media']['total']['sent'], d['media']['total']['jitter_us']/1e3, open('$work/udps.rss').read().strip())"
}

# QUIC perf against goodput's QUIC service, one connection: a 1 GB download
# and upload on one stream (Mbit/s by picoquic's definition: bytes x 8 over
# the connection's whole duration, handshake included), and 100 requests
# outstanding of 512 B up / 4000 B down for T seconds; goodput's own TCP
# (one connection, 1 GB pull / push) beside it.
qc() {
  local out=$work/q.json
  $GP quic 127.0.0.1 $PORT_Q --insecure -v 0 --json "$out" "$@" >/dev/null || true
  echo "$out"
}
tcp1g() {
  local out=$work/t1g.json
  $GP tcp 127.0.0.1 --port $PORT_GP -v 0 --connections 1 --transfer 1GB --pattern "$1" --json "$out" >/dev/null || true
  json_get "$out" "(d['summary']['sent_bytes']+d['summary']['received_bytes'])/d['summary']['duration_s']"
}
bench_quic() {
  local dl ul rps tdl tul
  dl=$(json_get "$(qc -s '*1:8:1000000000;')" "d['quic']['download_mbps']*1e6/8")
  ul=$(json_get "$(qc --upload 1GB)" "d['quic']['upload_mbps']*1e6/8")
  tdl=$(tcp1g pull); tul=$(tcp1g push)
  printf '%-52s %16s %16s %8s\n' "quic 1 GB download vs goodput tcp pull" "$(gbit "$dl")" "$(gbit "$tdl")" "$(ratio "$dl" "$tdl")"
  printf '%-52s %16s %16s %8s\n' "quic 1 GB upload vs goodput tcp push" "$(gbit "$ul")" "$(gbit "$tul")" "$(ratio "$ul" "$tul")"
  rps=$(json_get "$(qc --rps --streams 100 --request 512 --response 4000 --duration "${T}s")" "'%.0f requests/s, p50 %.0f us, p99 %.0f us' % (d['quic']['requests']['per_second'], d['quic']['requests']['latency']['p50_us'], d['quic']['requests']['latency']['p99_us'])")
  echo "quic --rps --streams 100 --request 512 --response 4000, ${T} s: $rps"
}

# QUIC at the same packet size as quinn perf (issue 24): quinn perf's
# packets are 1,452 bytes (its MTU discovery ceiling), goodput's capped to
# the same with --max-mtu / --quic-max-mtu, A/B alternated, one connection
# downloading for T seconds.
#   client: goodput's client vs quinn perf's client, both against quinn
#     perf's server;
#   server: quinn perf's client against goodput's server vs against quinn
#     perf's server.
# quinn perf is not built here (docs/quic-interop.md says how to build it
# by hand): give its binary as QUINN_PERF. Rates: goodput's is the bytes
# downloaded over the whole run (handshake included); quinn perf's client
# reports the mean of its 1 GiB requests' own rates (gaps excluded).
PORT_QQ=14434
PORT_QG=14435
qp_rate() { # quinn perf client against PORT: Mbit/s -> bytes/s
  timeout $((T + 20)) "$QUINN_PERF" client "127.0.0.1:$1" --ip 127.0.0.1 --download-size 1G --upload-size 0 --duration "$T" 2>&1 \
    | awk -F'│' '/AVG/{r=$NF} END{gsub(/[^0-9.]/,"",r); print r*1e6/8}'
}
gq_rate() { # goodput client against PORT: bytes/s
  local out=$work/qq.json
  $GP quic 127.0.0.1 "$1" --insecure -v 0 --max-mtu 1452 --download "${T}s" --json "$out" >/dev/null || true
  json_get "$out" "d['quic']['download_bytes']/$T"
}
# ab, and each round's ratio A/B under it (lowest to highest): the
# machine is shared, so one median hides how far rounds scatter.
ab_rounds() {
  local name=$1 a=$2 b=$3 ra=() rb=() rr=() i
  for i in $(seq "$ROUNDS"); do
    ra+=("$(eval "$a")"); rb+=("$(eval "$b")")
    rr+=("$(awk -v a="${ra[-1]}" -v b="${rb[-1]}" 'BEGIN{printf "%.2f", (b>0)? a/b : 0}')")
  done
  local ma mb
  ma=$(printf '%s\n' "${ra[@]}" | median); mb=$(printf '%s\n' "${rb[@]}" | median)
  printf '%-52s %16s %16s %8s\n' "$name" "$(gbit "$ma")" "$(gbit "$mb")" "$(ratio "$ma" "$mb")"
  printf '  rounds A/B: %s\n' "$(printf '%s\n' "${rr[@]}" | sort -g | tr '\n' ' ')"
}
bench_quic_parity() {
  [ -x "${QUINN_PERF:-}" ] || { echo "quic-parity: set QUINN_PERF to a quinn-perf binary (docs/quic-interop.md)"; return 0; }
  "$QUINN_PERF" server --listen 127.0.0.1:$PORT_QQ >/dev/null 2>&1 & pids+=($!)
  $GP server --listen 127.0.0.1 --port $((PORT_GP + 1)) --verbosity 0 --no-udp \
      --quic --quic-listen 127.0.0.1:$PORT_QG --quic-max-mtu 1452 >/dev/null 2>&1 & pids+=($!)
  sleep 0.5
  ab_rounds "quic client at 1452 B: goodput / quinn perf" "gq_rate $PORT_QQ" "qp_rate $PORT_QQ"
  ab_rounds "quic server at 1452 B: goodput / quinn perf" "qp_rate $PORT_QG" "qp_rate $PORT_QQ"
}

# The agent: its resident memory idle with 100 tasks led (each a STAMP
# test every 6 h to a host with no agent, so nothing runs while it is
# measured), then its API under AGENT_RATE requests/s (default 200) of a
# read mix after AGENT_RUNS runs (default 5000) were stored through it.
bench_agent() {
  local cfg=$work/agent-mesh.toml api=18790
  { echo "[agent]"; echo "api_port = $api"
    echo '[addresses.me]'; echo 'address = "127.0.0.1"'
    for i in $(seq 1 100); do echo "[addresses.d$i]"; echo "address = \"127.0.1.$i\""; echo "no_agent = true"; done
    echo '[tests.lat]'; echo 'kind = "stamp"'; echo 'host = "{{dest}}"'; echo 'count = 10'
    echo '[schedules.rare]'; echo 'repeat = "PT6H"'; echo 'slip = "PT1H"'; echo 'sliprand = true'
    for i in $(seq 1 100); do
      echo "[groups.g$i]"; echo 'type = "disjoint"'; echo 'a = ["me"]'; echo "b = [\"d$i\"]"; echo 'unidirectional = true'
      echo "[tasks.t$i]"; echo "group = \"g$i\""; echo 'test = "lat"'; echo 'schedule = "rare"'
    done; } > "$cfg"
  echo "0123456789abcdef-bench" > "$work/token"
  $GP agent --config "$cfg" --as me --archive "$work/agent.sqlite" --token-file "$work/token" \
      --beacon-port 14446 --stamp-port 18624 --api-listen 127.0.0.1:$api 2>"$work/agent.log" & local pid=$!; pids+=($pid)
  sleep 10
  local tasks; tasks=$(python3 -c "import json,urllib.request; print(len(json.load(urllib.request.urlopen('http://127.0.0.1:$api/api/v1/tasks'))))")
  echo "agent idle, $tasks tasks led: VmRSS $(rss_kib $pid) KiB, VmHWM $(awk '/VmHWM/{print $2}' /proc/$pid/status) KiB (goal: at most 25 MiB = 25600 KiB)"
  python3 bench/api_load.py 127.0.0.1:$api "$(cat "$work/token")" me d1 127.0.1.1 "${AGENT_RUNS:-5000}" "${AGENT_RATE:-200}" "$T"
  echo "agent after the load: VmRSS $(rss_kib $pid) KiB, VmHWM $(awk '/VmHWM/{print $2}' /proc/$pid/status) KiB"
  kill $pid; wait $pid 2>/dev/null || true
}

# A chain of namespaces, client -> r1 -> r2 -> r3 -> server, r1 silent (its
# time-exceeded dropped), MTU 1500 between r2 and r3 and 9000 elsewhere, no
# ICMP rate limit: the path tests' chain. Times a whole trace, goodput
# against traceroute (hops) and tracepath (hops and path MTU), each with its
# defaults and with a 1 s wait.
bench_trace() {
  [ "$(id -u)" = 0 ] || { echo "trace: needs root for the namespaces (skipped)"; return; }
  command -v tracepath >/dev/null && command -v traceroute >/dev/null && command -v nft >/dev/null \
    || { echo "trace: needs tracepath, traceroute and nft (skipped)"; return; }
  local p=gpb$$ n
  ns() { ip netns exec "$p-$1" "${@:2}"; }
  chain_down() { for n in c r1 r2 r3 s; do ip netns del "$p-$n" 2>/dev/null || true; done; }
  chain_down
  for n in c r1 r2 r3 s; do
    ip netns add "$p-$n"; ns "$n" ip link set lo up
    ns "$n" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.icmp_ratelimit=0
  done
  local i=1 a b mtu
  for link in "c r1 9000" "r1 r2 9000" "r2 r3 1500" "r3 s 9000"; do
    set -- $link; a=$1; b=$2; mtu=$3
    ip link add "$p-x" type veth peer name "$p-y"
    ip link set "$p-x" netns "$p-$a"; ip link set "$p-y" netns "$p-$b"
    ns "$a" ip link set "$p-x" name l$i mtu "$mtu" up; ns "$b" ip link set "$p-y" name l$i mtu "$mtu" up
    ns "$a" ip addr add 10.82.$i.1/24 dev l$i; ns "$b" ip addr add 10.82.$i.2/24 dev l$i
    i=$((i + 1))
  done
  ns c ip route add default via 10.82.1.2; ns s ip route add default via 10.82.4.1
  ns r1 ip route add 10.82.3.0/24 via 10.82.2.2; ns r1 ip route add 10.82.4.0/24 via 10.82.2.2
  ns r2 ip route add 10.82.1.0/24 via 10.82.2.1; ns r2 ip route add 10.82.4.0/24 via 10.82.3.2
  ns r3 ip route add 10.82.1.0/24 via 10.82.3.1; ns r3 ip route add 10.82.2.0/24 via 10.82.3.1
  printf 'table inet silent {\n chain out {\n  type filter hook output priority 0;\n  icmp type time-exceeded drop\n }\n}\n' > "$work/silent.nft"
  ns r1 nft -f "$work/silent.nft"
  ns c ping -c 1 -W 2 10.82.4.2 >/dev/null 2>&1 || true
  local gp; gp=$(readlink -f "$GP")
  wall() { local t0 t1; t0=$(date +%s.%N); ns c "$@" >/dev/null 2>&1 || true; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}'; }
  pair() {
    local name=$1 a=$2 b=$3 ra=() rb=() ma mb
    for _ in $(seq "$ROUNDS"); do ra+=("$(eval "wall $a")"); rb+=("$(eval "wall $b")"); done
    ma=$(printf '%s\n' "${ra[@]}" | median); mb=$(printf '%s\n' "${rb[@]}" | median)
    printf '%-52s %14s s %14s s %8s\n' "$name" "$ma" "$mb" "$(ratio "$ma" "$mb")"
  }
  printf '%-52s %16s %16s %8s\n' "trace to hop 4, hop 1 silent (wall time)" "A (median)" "B (median)" "A/B"
  pair "goodput trace / traceroute -n (defaults)" "$gp trace -v 0 10.82.4.2" "traceroute -n 10.82.4.2"
  pair "goodput trace / traceroute -n -w 1" "$gp trace -v 0 -w 1s 10.82.4.2" "traceroute -n -w 1 10.82.4.2"
  pair "goodput trace --pmtu / tracepath -n (defaults)" "$gp trace -v 0 --pmtu 10.82.4.2" "tracepath -n 10.82.4.2"
  chain_down
}

# The dashboard over a seeded archive: a mesh of DASHBOARD_HOSTS hosts (50:
# 2,450 ordered pairs, each with the last 2 h of one-minute STAMP runs and a
# week of six-hourly TCP runs) and h01 -> h02 with a year of one-minute STAMP
# runs (525,600), stored by the seed_bench example through the archive's own
# put. One agent holds every host's identity (--as h01 ... --as h50), so it
# evaluates all 4,900 measurements itself and its grid is the whole mesh's
# without asking a peer. After its first evaluation: the median of
# DASHBOARD_REQUESTS requests (curl, a new connection each) of the grid and
# the pair explorer's year, then page-ready in headless chromium
# (bench/dashboard_page.py), each against the issue's target.
bench_dashboard() {
  local dir=$work/dashboard api=18791 hosts=${DASHBOARD_HOSTS:-50} n=${DASHBOARD_REQUESTS:-21}
  local base=http://127.0.0.1:$api
  cargo build --release -q -p goodput-archive --example seed_bench
  target/release/examples/seed_bench --dir "$dir" --hosts "$hosts" --api-port $api --year-pair
  local as=() i
  for i in $(seq 1 "$hosts"); do as+=(--as "$(printf 'h%02d' "$i")"); done
  echo "0123456789abcdef-bench" > "$work/token"
  $GP agent --config "$dir/mesh.toml" "${as[@]}" --archive "$dir/archive.sqlite" --token-file "$work/token" \
      --no-beacon --api-listen 127.0.0.1:$api 2>"$dir/agent.log" & local pid=$!; pids+=($pid)
  local t=0
  until curl -sf -o /dev/null "$base/api/v1/health"; do
    sleep 0.2; t=$((t + 1)); [ $t -lt 300 ] || { echo "dashboard: the agent did not start"; tail "$dir/agent.log"; return 1; }
  done
  # The rules are first evaluated a minute after the start (alerts.every);
  # the grid is empty until then.
  evaluated() { curl -sf "$base/api/v1/grid?metric=loss" | python3 -c "import json,sys; print(json.load(sys.stdin)['agents'][0]['evaluated_ms'])"; }
  local ev=0 seen
  while [ "$ev" = 0 ]; do sleep 0.1; ev=$(evaluated); done
  seen=$(date +%s%3N)
  echo "first evaluation of $((hosts * (hosts - 1) * 2)) measurements' rules: $((seen - ev)) ms (from its start to its cells being served; 100 ms polls)"
  # median_ms URL: the median of n requests' total times after one
  # warm-up (fewer, at least 5, when they add up to more than 30 s).
  median_ms() {
    local code i=0 spent=0 v
    code=$(curl -s -o "$work/body" -w '%{http_code}' "$1")
    [ "$code" = 200 ] || { echo "dashboard: $1 answered $code: $(head -c 300 "$work/body")" >&2; echo 0; return; }
    : > "$work/times"
    while [ $i -lt "$n" ] && { [ $i -lt 5 ] || [ "$spent" -lt 30000 ]; }; do
      v=$(curl -s -o /dev/null -w '%{time_total}' "$1" | awk '{printf "%.3f", $1 * 1000}')
      echo "$v" >> "$work/times"; spent=$(awk -v a="$spent" -v b="$v" 'BEGIN{printf "%d", a + b}'); i=$((i + 1))
    done
    median < "$work/times"
  }
  local hour=3600000 year=$((365 * 86400000)) now to from step
  now=$(date +%s%3N)
  # The pair page's 1y span: ~300 points in whole hours (dashboard.rs span_of).
  step=$(( ( (year / 300 + hour - 1) / hour) * hour )); to=$(( (now / hour + 1) * hour )); from=$((to - year))
  local series="$base/api/v1/series?source=h01&dest=h02&kind=stamp&metric=delay_median&from_ms=$from&to_ms=$to&step_ms=$step"
  local pair1y="$base/ui/pair?source=h01&dest=h02&range=1y" grid="$base/ui/grid?metric=loss"
  local g_loss g_tp g_page s_year p_year p_day cells
  cells=$(curl -sf "$base/api/v1/grid?metric=loss" | python3 -c "import json,sys; g=json.load(sys.stdin); print(len(g['hosts']), 'hosts,', len(g['cells']), 'half-cells')")
  for m in loss throughput delay; do
    curl -sf "$base/api/v1/grid?metric=$m" | python3 -c "import json,sys,collections; g=json.load(sys.stdin); print('$m grid:', ', '.join('%d %s' % (n, s) for s, n in sorted(collections.Counter(c['status'] for c in g['cells']).items())))"
  done
  g_loss=$(median_ms "$base/api/v1/grid?metric=loss")
  g_tp=$(median_ms "$base/api/v1/grid?metric=throughput")
  g_page=$(median_ms "$grid")
  s_year=$(median_ms "$series")
  p_year=$(median_ms "$pair1y")
  p_day=$(median_ms "$base/ui/pair?source=h01&dest=h02&range=1d")
  local r_grid=0 r_pair=0
  if command -v chromedriver >/dev/null; then
    python3 bench/dashboard_page.py --loads "${DASHBOARD_LOADS:-7}" "$grid" "$pair1y" | tee "$work/pages.txt"
    r_grid=$(awk -v u="$grid" '$1 == "ready_ms" && $2 == u {print $3}' "$work/pages.txt")
    r_pair=$(awk -v u="$pair1y" '$1 == "ready_ms" && $2 == u {print $3}' "$work/pages.txt")
  else
    echo "dashboard: no chromedriver (apt-get install chromium chromium-driver): page-ready not measured"
  fi
  [ "$(evaluated)" = "$ev" ] || echo "note: the rules were evaluated again while these were timed"
  verdict() { awk -v v="$1" -v t="$2" 'BEGIN{ if (v == 0) print "-"; else print (v <= t) ? "PASS" : "MISS" }'; }
  row() { printf '%-62s %10s %10s %6s\n' "$1" "$(awk -v v="$2" 'BEGIN{printf "%.1f ms", v}')" "${3:+<= $3 ms}" "${3:+$(verdict "$2" "$3")}"; }
  printf '%-62s %10s %10s %6s\n' "dashboard, $hosts hosts (medians)" "measured" "target" ""
  row "GET /api/v1/grid?metric=loss ($cells)" "$g_loss" 50
  row "GET /api/v1/grid?metric=throughput" "$g_tp" 50
  row "GET /ui/grid?metric=loss (the page, server side)" "$g_page" 50
  row "GET /api/v1/series h01->h02 delay_median, 1 y, step $((step / hour)) h" "$s_year" 200
  row "GET /ui/pair h01 h02 range=1y (the page, server side)" "$p_year" 200
  row "GET /ui/pair h01 h02 range=1d (the page, server side)" "$p_day" ""
  row "chromium: /ui/grid?metric=loss ready (loadEventEnd)" "$r_grid" 1000
  row "chromium: /ui/pair h01 h02 range=1y ready (loadEventEnd)" "$r_pair" 1000
  echo "agent: VmRSS $(rss_kib $pid) KiB, VmHWM $(awk '/VmHWM/{print $2}' /proc/$pid/status) KiB; archive $(du -m "$dir/archive.sqlite" | cut -f1) MiB"
  kill $pid; wait $pid 2>/dev/null || true
}

# A fleet archive on PostgreSQL: a throwaway cluster (initdb, default
# durability settings but shared_buffers 1GB and max_wal_size 4GB), seeded
# through the archive code with FLEET_HOSTS hosts' recent STAMP and TCP runs
# and a year of h01 -> h02's STAMP minutes; then `goodput agent --role
# archive` on it: the grid and a year's series timed with curl, and the
# sustained ingest of 50 simulated agents posting to it.
bench_fleet() {
  local dir=$work/fleet api=18792 hosts=${FLEET_HOSTS:-100} pgport=15439 n=${FLEET_REQUESTS:-21}
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$bin" ] && [ -x "$bin/initdb" ] || { echo "fleet: PostgreSQL is not installed (apt-get install postgresql)"; return 1; }
  mkdir -p "$dir/pg"
  local as=()
  if [ "$(id -u)" = 0 ]; then chmod 755 "$work" "$dir"; chown -R postgres: "$dir/pg"; as=(runuser -u postgres --); fi
  "${as[@]}" "$bin/initdb" -D "$dir/pg/data" -U postgres --auth=trust -E UTF8 >/dev/null
  "${as[@]}" "$bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w -o \
      "-p $pgport -k $dir/pg -c listen_addresses=127.0.0.1 -c shared_buffers=1GB -c max_wal_size=4GB" start >/dev/null
  pg_stop() { "${as[@]}" "$bin/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true; }
  # Stopped with the rest if the harness is interrupted.
  pids+=("$(head -1 "$dir/pg/data/postmaster.pid")")
  "${as[@]}" "$bin/createdb" -h 127.0.0.1 -p $pgport -U postgres fleet
  local db=postgres://postgres@127.0.0.1:$pgport/fleet base=http://127.0.0.1:$api
  echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$pgport"
  cargo build --release -q -p goodput-archive --example seed_bench --example ingest_bench
  target/release/examples/seed_bench --dir "$dir" --hosts "$hosts" --api-port $api --hours 1 --year-pair --database "$db"
  echo "0123456789abcdef-bench" > "$work/token"
  $GP agent --role archive --database "$db" --config "$dir/mesh.toml" --archive "$dir/state.sqlite" \
      --token-file "$work/token" --plain-api-listen 127.0.0.1:$api --archive-limit 100GiB \
      2>"$dir/archive.log" & local pid=$!; pids+=($pid)
  local t=0
  until curl -sf -o /dev/null "$base/api/v1/health"; do
    sleep 0.2; t=$((t + 1)); [ $t -lt 300 ] || { echo "fleet: the archive did not start"; tail "$dir/archive.log"; pg_stop; return 1; }
  done
  evaluated() { curl -sf "$base/api/v1/grid?metric=loss" | python3 -c "import json,sys; print(json.load(sys.stdin)['agents'][0]['evaluated_ms'])"; }
  local ev=0 seen
  while [ "$ev" = 0 ]; do sleep 0.2; ev=$(evaluated); done
  seen=$(date +%s%3N)
  echo "first evaluation of the rules of $((hosts * (hosts - 1) * 2)) measurements: $((seen - ev)) ms from its start to its cells served"
  median_ms() {
    local code i=0 v
    code=$(curl -s -o "$work/body" -w '%{http_code}' "$1")
    [ "$code" = 200 ] || { echo "fleet: $1 answered $code: $(head -c 300 "$work/body")" >&2; echo 0; return; }
    : > "$work/times"
    while [ $i -lt "$n" ]; do
      v=$(curl -s -o /dev/null -w '%{time_total}' "$1" | awk '{printf "%.3f", $1 * 1000}')
      echo "$v" >> "$work/times"; i=$((i + 1))
    done
    median < "$work/times"
  }
  local hour=3600000 year=$((365 * 86400000)) now to from step cells
  now=$(date +%s%3N)
  step=$(( ( (year / 300 + hour - 1) / hour) * hour )); to=$(( (now / hour + 1) * hour )); from=$((to - year))
  cells=$(curl -sf "$base/api/v1/grid?metric=loss" | python3 -c "import json,sys; g=json.load(sys.stdin); print(len(g['hosts']), 'hosts,', len(g['cells']), 'half-cells')")
  local g_loss s_year s_raw
  g_loss=$(median_ms "$base/api/v1/grid?metric=loss")
  s_year=$(median_ms "$base/api/v1/series?source=h01&dest=h02&kind=stamp&metric=delay_median&from_ms=$from&to_ms=$to&step_ms=$step")
  s_raw=$(median_ms "$base/api/v1/series?source=h01&dest=h02&kind=stamp&metric=delay_median&from_ms=$((to - 86400000))&to_ms=$to")
  local h0 r0 b0
  h0=$(curl -sf "$base/api/v1/health"); r0=$(echo "$h0" | python3 -c "import json,sys; print(json.load(sys.stdin)['archive_runs'])")
  b0=$(echo "$h0" | python3 -c "import json,sys; print(json.load(sys.stdin)['archive_bytes'])")
  target/release/examples/ingest_bench --url "$base" --token-file "$work/token" --agents 50 \
      --seconds "${FLEET_INGEST_SECONDS:-20}" --batch 500 --docs minute | tee "$work/ingest-minute.txt"
  local h1 r1 b1
  h1=$(curl -sf "$base/api/v1/health"); r1=$(echo "$h1" | python3 -c "import json,sys; print(json.load(sys.stdin)['archive_runs'])")
  b1=$(echo "$h1" | python3 -c "import json,sys; print(json.load(sys.stdin)['archive_bytes'])")
  target/release/examples/ingest_bench --url "$base" --token-file "$work/token" --agents 50 \
      --seconds "${FLEET_INGEST_SECONDS:-20}" --batch 100 --docs stamp | tee "$work/ingest-stamp.txt"
  local h2 r2 b2
  h2=$(curl -sf "$base/api/v1/health"); r2=$(echo "$h2" | python3 -c "import json,sys; print(json.load(sys.stdin)['archive_runs'])")
  b2=$(echo "$h2" | python3 -c "import json,sys; print(json.load(sys.stdin)['archive_bytes'])")
  local rate_min rate_stamp
  rate_min=$(awk '{for (i = 1; i < NF; i++) if ($(i+1) == "runs/s") print $i}' "$work/ingest-minute.txt")
  rate_stamp=$(awk '{for (i = 1; i < NF; i++) if ($(i+1) == "runs/s") print $i}' "$work/ingest-stamp.txt")
  verdict() { awk -v v="$1" -v t="$2" -v up="$3" 'BEGIN{ if (v == 0) print "-"; else if (up) print (v >= t) ? "PASS" : "MISS"; else print (v <= t) ? "PASS" : "MISS" }'; }
  printf '%-64s %14s %14s %6s\n' "fleet archive on PostgreSQL, $hosts hosts" "measured" "target" ""
  printf '%-64s %14s %14s %6s\n' "GET /api/v1/grid?metric=loss ($cells), median" "$(printf '%.1f ms' "$g_loss")" "<= 100 ms" "$(verdict "$g_loss" 100 0)"
  printf '%-64s %14s %14s %6s\n' "GET /api/v1/series h01->h02, 1 y of minutes, step $((step / hour)) h" "$(printf '%.1f ms' "$s_year")" "<= 200 ms" "$(verdict "$s_year" 200 0)"
  printf '%-64s %14s %14s %6s\n' "GET /api/v1/series h01->h02, the last day, every run" "$(printf '%.1f ms' "$s_raw")" "" ""
  printf '%-64s %14s %14s %6s\n' "ingest, 50 agents, per-minute summaries" "$rate_min runs/s" ">= 10000/s" "$(verdict "$rate_min" 10000 1)"
  printf '%-64s %14s %14s %6s\n' "ingest, 50 agents, whole STAMP results (7 KB)" "$rate_stamp runs/s" "" ""
  awk -v r0="$r0" -v r1="$r1" -v r2="$r2" -v b0="$b0" -v b1="$b1" -v b2="$b2" 'BEGIN {
    if (r1 > r0) printf "storage: %.0f MiB per million per-minute summaries (%d runs, %.1f MiB)\n", (b1 - b0) / (r1 - r0) * 1e6 / 1048576, r1 - r0, (b1 - b0) / 1048576;
    if (r2 > r1) printf "storage: %.0f MiB per million whole STAMP results (%d runs, %.1f MiB)\n", (b2 - b1) / (r2 - r1) * 1e6 / 1048576, r2 - r1, (b2 - b1) / 1048576;
    printf "archive: %d runs, %.0f MiB in PostgreSQL\n", r2, b2 / 1048576 }'
  echo "archive process: VmRSS $(rss_kib $pid) KiB, VmHWM $(awk '/VmHWM/{print $2}' /proc/$pid/status) KiB"
  kill $pid; wait $pid 2>/dev/null || true
  pg_stop
}

# One agent with a 500-host mesh's background load (item 1 of issue 42):
# continuous STAMP streams at 10 packets/s to MESH_PEERS (default 499)
# no_agent peers on 127.0.1.1 and up, all of them one process
# (examples/mesh_peers) that reflects the agent's streams and leads one
# stream from each address to the agent's own reflector. Samples the
# agent's CPU (per cent of one core) and RSS every 10 s, the archive's
# growth, checks every peer's per-minute summaries against the
# simulator's log, and times the agent's exclusive TCP run to a goodput
# server with and without the load. MESH_SECONDS (default 600) is the
# streams' length.
bench_mesh_scale() {
  local n=${MESH_PEERS:-499} secs=${MESH_SECONDS:-600} api=18796 beacon=14448 ast=18627 rport=18628
  local srv=127.0.0.3 srvport=14449 cfg=$work/mesh-scale.toml dir=$work/mesh-scale
  mkdir -p "$dir"
  cargo build --release -q -p goodput-engine --example mesh_peers
  local lead=$((ROUNDS * (T + 4) + 15))
  local t0=$(( $(date +%s) + lead ))
  { echo "[agent]"; echo "api_port = $api"
    echo '[addresses.me]'; echo 'address = "127.0.0.1"'
    echo '[addresses.srv]'; echo "address = \"$srv\""; echo 'no_agent = true'
    python3 - "$n" <<'PY'
import ipaddress, sys
for i in range(int(sys.argv[1])):
    print(f'[addresses.p{i}]\naddress = "{ipaddress.IPv4Address("127.0.1.1") + i}"\nno_agent = true')
PY
    echo '[tests.bg]'; echo 'kind = "stamp"'; echo 'host = "{{dest}}"'; echo "port = $rport"
    echo 'continuous = true'; echo 'rate = 10'; echo "duration = \"${secs}s\""
    echo '[tests.tp]'; echo 'kind = "tcp"'; echo "hosts = [\"{{dest}}:$srvport\"]"; echo 'duration = "1s"'
    echo '[schedules.stream]'; echo 'repeat = "P1D"'; echo "start = \"$(date -u -d "@$t0" +%Y-%m-%dT%H:%M:%SZ)\""
    echo '[schedules.never]'; echo 'repeat = "P1D"'; echo 'start = "2099-01-01T00:00:00Z"'
    echo '[groups.peers]'; echo 'type = "disjoint"'; echo 'a = ["me"]'
    echo "b = [$(seq 0 $((n - 1)) | sed 's/.*/"p&"/' | paste -sd,)]"; echo 'unidirectional = true'
    echo '[groups.server]'; echo 'type = "disjoint"'; echo 'a = ["me"]'; echo 'b = ["srv"]'; echo 'unidirectional = true'
    echo '[tasks.bg]'; echo 'group = "peers"'; echo 'test = "bg"'; echo 'schedule = "stream"'
    echo '[tasks.tp]'; echo 'group = "server"'; echo 'test = "tp"'; echo 'schedule = "never"'
  } > "$cfg"
  echo "0123456789abcdef-bench" > "$work/token"
  $GP server --listen $srv --port $srvport --verbosity 0 & pids+=($!)
  $GP agent --config "$cfg" --as me --archive "$dir/agent.sqlite" --token-file "$work/token" \
      --beacon-port $beacon --stamp-port $ast --api-listen 127.0.0.1:$api 2>"$dir/agent.log" & local pid=$!; pids+=($pid)
  local t=0
  until curl -sf -o /dev/null "http://127.0.0.1:$api/api/v1/health"; do
    sleep 0.2; t=$((t + 1)); [ $t -lt 150 ] || { echo "mesh-scale: the agent did not start"; tail "$dir/agent.log"; return 1; }
  done
  # The peers: their own streams to the agent's reflector for the agent's
  # streams' length; the log is written once everything has settled.
  target/release/examples/mesh_peers 127.0.1.1 "$n" $rport 127.0.0.1:$ast 10 \
      $((t0 - $(date +%s) + secs)) $((t0 - $(date +%s) + secs + 20)) "$dir/peers.json" & local sim=$!; pids+=($sim)
  echo "{\"kind\": \"tcp\", \"hosts\": [\"$srv:$srvport\"], \"duration\": \"${T}s\"}" > "$dir/tp.json"
  tp_rate() {
    local out id
    out=$($GP agent run --agent "http://127.0.0.1:$api" --token-file "$work/token" --dest srv "$dir/tp.json" 2>&1) || { echo "mesh-scale: $out" >&2; echo 0; return; }
    id=$(echo "$out" | awk 'NR==1{print $2}' | sed 's/:$//')
    curl -sf "http://127.0.0.1:$api/api/v1/runs/$id" | python3 -c "import json,sys; f=json.load(sys.stdin)['figures']; print((f.get('throughput_up_bps') or 0)/8)"
  }
  local quiet=() loaded=() r
  for _ in $(seq "$ROUNDS"); do quiet+=("$(tp_rate)"); done
  while [ "$(date +%s)" -lt $((t0 + 2)) ]; do sleep 0.5; done
  clk=$(getconf CLK_TCK)
  ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
  local a0 s0 prev pt rss cpus=() rsss=()
  a0=$(du -cb "$dir"/agent.sqlite* | tail -1 | cut -f1)
  prev=$(ticks $pid); pt=$(date +%s.%N)
  local tp_at=$((t0 + secs / 2)) end=$((t0 + secs))
  while [ "$(date +%s)" -lt $end ]; do
    sleep 10
    local now c
    now=$(date +%s.%N); c=$(ticks $pid)
    cpus+=("$(awk -v a="$prev" -v b="$c" -v t0="$pt" -v t1="$now" -v hz="$clk" 'BEGIN{printf "%.1f", (b - a) / hz / (t1 - t0) * 100}')")
    rsss+=("$(rss_kib $pid)")
    prev=$c; pt=$now
    if [ ${#loaded[@]} -lt "$ROUNDS" ] && [ "$(date +%s)" -ge $tp_at ]; then
      for _ in $(seq "$ROUNDS"); do loaded+=("$(tp_rate)"); done
      prev=$(ticks $pid); pt=$(date +%s.%N)
    fi
  done
  wait $sim || true
  sleep 5
  local a1; a1=$(du -cb "$dir"/agent.sqlite* | tail -1 | cut -f1)
  echo "mesh-scale: $n peers, continuous STAMP at 10 packets/s each way, ${secs} s (2 cores, loopback; samples every 10 s)"
  printf '%s\n' "${cpus[@]}" | awk -v hz="$clk" '{a[NR]=$1; s+=$1; if ($1>m) m=$1} END {printf "agent CPU, %% of one core: first %s, last %s, max %.1f, mean %.1f (goal <= 10)\n", a[1], a[NR], m, s/NR}'
  printf '%s\n' "${rsss[@]}" | awk '{a[NR]=$1; if ($1>m) m=$1} END {printf "agent RSS: first %.1f MiB, last %.1f MiB, max %.1f MiB (goal <= 64 MiB)\n", a[1]/1024, a[NR]/1024, m/1024}'
  echo "agent VmHWM: $(awk '/VmHWM/{printf "%.1f MiB", $2/1024}' /proc/$pid/status)"
  awk -v a="$a0" -v b="$a1" 'BEGIN{printf "archive: %.1f MiB more over the run (the streams'"'"' end results included)\n", (b-a)/1048576}'

  python3 - "$dir" "$n" <<'PY'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
import sqlite3
peers = json.load(open(f"{d}/peers.json"))["peers"]
# The archive itself (the API's run list leaves the documents out).
db = sqlite3.connect(f"file:{d}/agent.sqlite?mode=ro", uri=True)
rows = [{"dest": r[0], "result": json.loads(r[1])} for r in db.execute(
    "SELECT r.dest, d.result FROM runs r JOIN run_documents d ON d.id = r.id WHERE r.kind = 'stamp_minute'")]
runs = [{"state": r[0], "reason": r[1]} for r in db.execute("SELECT state, reason FROM runs WHERE kind = 'stamp'")]
states = {}
for r in runs:
    states[r["state"]] = states.get(r["state"], 0) + 1
print("agent's streams:", ", ".join(f"{v} {k}" for k, v in sorted(states.items())),
      "; reasons:", sorted({r.get("reason") for r in runs if r["state"] != "finished"} - {None}) or "none")
# What a day of streaming adds: the minute rows' own bytes (their
# documents and their runs rows), a row a stream a minute. The file's
# size over a short run is mostly the WAL's, which a checkpoint resets.
row_bytes = db.execute(
    "SELECT COUNT(*), SUM(LENGTH(d.result)) + SUM(LENGTH(r.id) + LENGTH(r.task) + LENGTH(r.source)"
    " + LENGTH(COALESCE(r.dest, '')) + LENGTH(r.measurement_key) + LENGTH(d.spec)) "
    "FROM runs r JOIN run_documents d ON d.id = r.id WHERE r.kind = 'stamp_minute'").fetchone()
if row_bytes[0]:
    per = row_bytes[1] / row_bytes[0]
    print(f"minute rows: {row_bytes[0]}, {per:.0f} B each (documents and text fields; numbers and indexes besides); "
          f"a day of {n} streams: {per * n * 1440 / 1048576:.0f} MiB")
sums = {}
for r in rows:
    s = sums.setdefault(r["dest"], [0, 0, 0, 0, 0, 0])
    for i, k in enumerate(["sent", "received", "lost", "not_sent", "late", "duplicates"]):
        s[i] += r["result"][k]
ok = bad = 0
for i, p in enumerate(peers):
    sent, recv, lost, not_sent, late, dup = sums.get(f"p{i}", [0] * 6)
    if recv == p["reflected"] and sent == recv + lost and late == 0 and dup == 0 and sent > 0:
        ok += 1
    else:
        bad += 1
        if bad <= 5:
            print(f"  mismatch p{i} {p['address']}: summaries {sent} sent, {recv} received, {lost} lost, {not_sent} not sent, {late} late; simulator reflected {p['reflected']}")
print(f"agent's streams against the simulator's log: {ok} sessions matched, {bad} mismatched")
sent = sum(p["sent"] for p in peers); rep = sum(p["replies"] for p in peers)
fail = sum(p["send_failed"] for p in peers)
print(f"peers' streams to the agent's reflector: {sent} sent, {rep} answered, {fail} not sent ({sum(1 for p in peers if p['sent'] == p['replies'] and p['sent'] > 0)} of {n} sessions fully answered)")
PY
  local mq ml
  mq=$(printf '%s\n' "${quiet[@]}" | median); ml=$(printf '%s\n' "${loaded[@]:-0}" | median)
  echo "agent's exclusive TCP run to a goodput server (${T} s, $ROUNDS rounds): $(gbit "$mq") quiet [${quiet[*]}], $(gbit "$ml") under the load [${loaded[*]:-}], ratio $(ratio "$ml" "$mq") (goal >= 0.98x)"
  echo "perfSONAR for comparison: one powstream process per stream (499 here) and an owampd child per reflected session; 4-8 GB of RAM advised for a test point"
  kill $pid $sim 2>/dev/null; wait $pid 2>/dev/null || true
}

what=("$@"); [ ${#what[@]} -gt 0 ] || what=(all)
start_servers
for w in "${what[@]}"; do
  case $w in
    all) header; bench_single; bench_verify; bench_multi; bench_duplex; bench_iperf3; bench_stamp; bench_stamp_sessions; bench_ttcp; bench_echo_latency; bench_echo_scale; bench_udp; bench_udp_streams; bench_quic; bench_churn; bench_memory; bench_agent; bench_trace; bench_dashboard; bench_mesh_scale ;;
    trace) bench_trace ;;
    quic) header; bench_quic ;;
    quic-parity) header; bench_quic_parity ;;
    udp) header; bench_udp ;;
    udp-streams) bench_udp_streams ;;
    echo-latency) header; bench_echo_latency ;;
    echo-scale) bench_echo_scale ;;
    ttcp) header; bench_ttcp ;;
    stamp) header; bench_stamp ;;
    stamp-sessions) bench_stamp_sessions ;;
    twamp) header; bench_twamp ;;
    owamp-sessions) bench_owamp_sessions ;;
    owamp-precision) bench_owamp_precision ;;
    iperf3) header; bench_iperf3 ;;
    iperf3-server) header; bench_iperf3_server ;;
    single) header; bench_single ;;
    buffers) header; bench_buffers ;;
    verify) header; bench_verify ;;
    multi) header; bench_multi ;;
    duplex) header; bench_duplex ;;
    churn) bench_churn ;;
    memory) bench_memory ;;
    agent) bench_agent ;;
    dashboard) bench_dashboard ;;
    fleet) bench_fleet ;;
    mesh-scale) bench_mesh_scale ;;
    *) echo "unknown benchmark '$w'"; exit 2 ;;
  esac
done
