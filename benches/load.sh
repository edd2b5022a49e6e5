#!/usr/bin/env bash
# Load run: /metrics under wrk while the daemon keeps polling.
#
#   benches/load.sh BIN [SECONDS] [PATH]   (defaults: 30, /metrics)
#
# Starts `BIN --demo` on a free loopback port, samples the poll duration
# idle, then runs `wrk -t2 -c64 -d<SECONDS>s --latency` against PATH
# while it samples the poll duration again. PATH=/-/healthy, which reads no
# snapshot, is the control run: it loads the CPU the same way without
# touching anything the poller publishes to. Fails (exit 1) when wrk saw a
# socket error or a non-2xx answer, when gpumem_poll_overruns_total moved,
# or when polls stopped (gpumem_polls_total must advance by about one per
# second). Prints requests/s, latency percentiles and poll timing idle and
# under load, for BENCHMARKS.md. Loopback only; installs nothing (CI runs
# `apt-get install -y wrk`); needs curl and wrk.
set -euo pipefail

BIN=${1:?usage: benches/load.sh BIN [SECONDS] [PATH]}
SECS=${2:-30}
TARGET=${3:-/metrics}
command -v wrk >/dev/null || { echo "load.sh: wrk is not installed (apt-get install -y wrk)" >&2; exit 2; }
command -v curl >/dev/null || { echo "load.sh: curl is not installed" >&2; exit 2; }

# A free port: one nothing answers on.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
PORT=""
for _ in $(seq 1 50); do
  p=$((20000 + RANDOM % 30000))
  if port_free "$p"; then PORT=$p; break; fi
done
[ -n "$PORT" ] || { echo "load.sh: no free port found" >&2; exit 2; }
URL="http://127.0.0.1:$PORT"

WORK=$(mktemp -d)
DAEMON=""
cleanup() {
  if [ -n "$DAEMON" ]; then kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# wrk's 64 connections and this script's own scrapes all come from
# 127.0.0.1: at the default per-source limit (64) each scrape would close
# one of wrk's idle keep-alive connections, which wrk counts as a read
# error. This run measures throughput, not that limit, so it is raised.
printf 'limits:\n  max_connections_per_source: 128\n' >"$WORK/web.yml"
"$BIN" --demo --web.listen-address "127.0.0.1:$PORT" --web.config.file "$WORK/web.yml" >"$WORK/daemon.log" 2>&1 &
DAEMON=$!

# Ready: /-/ready answers 200 once the first poll ended. Bounded wait.
deadline=$((SECONDS + 30))
until curl -fsS -o /dev/null "$URL/-/ready" 2>/dev/null; do
  if ! kill -0 "$DAEMON" 2>/dev/null; then echo "load.sh: the daemon exited:" >&2; cat "$WORK/daemon.log" >&2; exit 1; fi
  [ "$SECONDS" -lt "$deadline" ] || { echo "load.sh: not ready within 30 s" >&2; exit 1; }
  sleep 0.1
done

# metric NAME: the value of an unlabelled sample of the latest scrape.
scrape() { curl -fsS --max-time 5 "$URL/metrics" >"$WORK/m.txt"; }
metric() { awk -v m="$1" '$1 == m { print $2; exit }' "$WORK/m.txt"; }

# sample_polls SECONDS FILE: every poll's duration (ms), read once per poll
# (the gauge holds the latest poll's); also leaves the last scrape in m.txt.
sample_polls() {
  local until=$((SECONDS + $1)) last="" n
  : >"$2"
  while [ "$SECONDS" -lt "$until" ]; do
    scrape || { sleep 0.05; continue; }
    n=$(metric gpumem_polls_total)
    if [ "$n" != "$last" ]; then
      [ -z "$last" ] || awk -v d="$(metric gpumem_poll_duration_seconds)" 'BEGIN { printf "%.3f\n", d * 1000 }' >>"$2"
      last=$n
    fi
    sleep 0.2
  done
}

# stats FILE: "n=N p50=X p90=Y max=Z" over the lines of FILE (ms).
stats() {
  sort -g "$1" | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "n=0"; exit }
    p50 = v[int((NR + 1) / 2)]; p90 = v[int(NR * 0.9) > 0 ? int(NR * 0.9) : 1]
    printf "n=%d p50=%.3fms p90=%.3fms max=%.3fms\n", NR, p50, p90, v[NR] }'
}

scrape
overruns0=$(metric gpumem_poll_overruns_total)
echo "== idle: sampling the poll duration for 10 s"
sample_polls 10 "$WORK/idle.txt"
polls0=$(metric gpumem_polls_total)

echo "== load: wrk -t2 -c64 -d${SECS}s --latency $URL$TARGET"
wrk -t2 -c64 -d"${SECS}s" --timeout 10s --latency "$URL$TARGET" >"$WORK/wrk.txt" 2>&1 &
WRK=$!
sample_polls "$SECS" "$WORK/load.txt"
wait "$WRK" || { cat "$WORK/wrk.txt"; echo "load.sh: wrk failed" >&2; exit 1; }
scrape
polls1=$(metric gpumem_polls_total)
overruns1=$(metric gpumem_poll_overruns_total)
cat "$WORK/wrk.txt"

fail=0
if grep -q "Socket errors" "$WORK/wrk.txt"; then echo "FAIL: wrk saw socket errors"; fail=1; fi
if grep -q "Non-2xx" "$WORK/wrk.txt"; then echo "FAIL: non-2xx answers"; fail=1; fi
if [ "$overruns1" != "$overruns0" ]; then echo "FAIL: poll overruns went from $overruns0 to $overruns1"; fail=1; fi
# The demo polls once a second; sampling overlaps the run by a second or two.
advanced=$((polls1 - polls0))
if [ "$advanced" -lt $((SECS - 3)) ]; then echo "FAIL: only $advanced polls in ${SECS}+ s of load"; fail=1; fi

rps=$(awk '/^Requests\/sec:/ { print $2 }' "$WORK/wrk.txt")
lat() { awk -v p="$1" '$1 == p { print $2 }' "$WORK/wrk.txt"; }
echo
echo "== summary: $TARGET for ${SECS} s"
echo "requests/s: $rps"
echo "latency: p50 $(lat 50%), p75 $(lat 75%), p90 $(lat 90%), p99 $(lat 99%)"
echo "exposition: $(wc -c <"$WORK/m.txt") bytes"
echo "polls during load: $advanced (overruns $overruns0 -> $overruns1)"
echo "poll duration idle: $(stats "$WORK/idle.txt")"
echo "poll duration load: $(stats "$WORK/load.txt")"
if [ "$fail" -ne 0 ]; then
  echo "daemon log (last 20 lines):"; tail -20 "$WORK/daemon.log"
  exit 1
fi
echo "load.sh: PASS"
