#!/usr/bin/env bash
# Fuzzes a fleet archive's HTTP API from its own OpenAPI document with
# schemathesis (PyPI): every operation, with and without the token, must
# never answer 5xx or drop the connection, and the process must still be
# up at the end. Bounded in time (FUZZ_SECONDS per phase, default 300).
# Not in .ci/run: schemathesis and its dependencies take minutes to
# install, and a fuzz run's time is better spent here, by hand, with its
# findings recorded in docs/benchmarks.md.
#
#   bench/fuzz_api.sh            (installs schemathesis with pip if missing)
#
# The archive runs on a throwaway PostgreSQL cluster (initdb), with a
# 3-host mesh, as `goodput agent --role archive`; a second run fuzzes an
# agent (--role agent, its SQLite archive) the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-300}
EXAMPLES=${FUZZ_EXAMPLES:-200}
# GP names another goodput binary (a debug build, say); none: a release build.
[ -n "${GP:-}" ] || { cargo build --release -q -p goodput; GP=target/release/goodput; }
command -v schemathesis >/dev/null || python3 -m pip install --quiet --disable-pip-version-check \
    --root-user-action=ignore schemathesis
schemathesis --version
work=$(mktemp -d)
pids=()
as=()
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] && [ -x "$bin/initdb" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)"; exit 1; }
if [ "$(id -u)" = 0 ]; then chmod 755 "$work"; mkdir -p "$work/pg"; chown postgres: "$work/pg"; as=(runuser -u postgres --); fi
cleanup() {
  for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done
  "${as[@]}" "$bin/pg_ctl" -D "$work/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
pgport=15440
"${as[@]}" "$bin/initdb" -D "$work/pg/data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
"${as[@]}" "$bin/pg_ctl" -D "$work/pg/data" -l "$work/pg/log" -w -o \
    "-p $pgport -k $work/pg -c listen_addresses=127.0.0.1" start >/dev/null
"${as[@]}" "$bin/createdb" -h 127.0.0.1 -p $pgport -U postgres fleet
token=0123456789abcdef-fuzz
echo "$token" > "$work/token"
cat > "$work/mesh.toml" <<EOF
[agent]
api_port = 18793
[addresses.a]
address = "127.0.0.1"
[addresses.b]
address = "127.0.5.2"
[addresses.c]
address = "127.0.5.3"
[groups.all]
type = "mesh"
addresses = ["a", "b", "c"]
[tests.latency]
kind = "stamp"
host = "{{dest}}"
port = 18799
count = 5
interval = "10ms"
[schedules.often]
repeat = "PT1M"
[tasks.latency]
group = "all"
test = "latency"
schedule = "often"
EOF
fuzz() {
  local name=$1 port=$2; shift 2
  # A fleet archive's --api-listen is HTTPS: it is fuzzed on a plain socket.
  local listen=--api-listen
  [ "$name" = archive ] && listen=--plain-api-listen
  "$GP" agent --config "$work/mesh.toml" --token-file "$work/token" $listen 127.0.0.1:$port \
      --archive "$work/$name.sqlite" --no-beacon "$@" 2>"$work/$name.log" & local pid=$!; pids+=($pid)
  local t=0
  until curl -sf -o /dev/null "http://127.0.0.1:$port/api/v1/health"; do
    sleep 0.2; t=$((t + 1)); [ $t -lt 150 ] || { echo "$name did not start"; tail "$work/$name.log"; exit 1; }
  done
  local rc=0
  for auth in with without; do
    local h=()
    [ $auth = with ] && h=(-H "Authorization: Bearer $token")
    echo "== $name: fuzzing every operation $auth the token ($EXAMPLES examples each, at most ${SECONDS_EACH} s)"
    timeout "$SECONDS_EACH" schemathesis run "http://127.0.0.1:$port/api/v1/openapi.json" \
        --url "http://127.0.0.1:$port" --checks not_a_server_error --max-examples "$EXAMPLES" \
        --suppress-health-check=filter_too_much \
        --request-timeout 30 \
        "${h[@]}" --no-color 2>&1 || rc=$?
    [ $rc -eq 124 ] && { echo "(stopped at its time bound)"; rc=0; }
  done
  if kill -0 $pid 2>/dev/null; then echo "$name: still up, VmHWM $(awk '/VmHWM/{print $2}' /proc/$pid/status) KiB"; else echo "$name: DIED"; rc=1; fi
  echo "$name: $(grep -c panicked "$work/$name.log" || true) panics in its log"
  return $rc
}
status=0
fuzz archive 18793 --role archive --database "postgres://postgres@127.0.0.1:$pgport/fleet" || status=1
fuzz agent 18794 --as a || status=1
echo "fuzz: $([ $status = 0 ] && echo "no 5xx, no crash" || echo FAILURES)"
exit $status
