#!/usr/bin/env bash
# The Prometheus and Grafana deploy kit against the real tools:
#   a) promtool check rules / test rules / check config on deploy/prometheus;
#      the dashboards are up to date with grafana/build-dashboards.py and lint
#      clean (.ci/grafana-lint.py);
#   b) BIN --demo on a free loopback port, scraped every second by a real
#      Prometheus (the Debian package's binary) that loads gpumemd.rules.yml;
#   c) every dashboard panel query returns data, and every metric name in the
#      rules and dashboards is in tests/golden/demo.prom;
#   d) every rule group evaluates with health "ok", every recording rule
#      returns data, and a gpumemd alert is pending or firing; the scrape
#      carries the Prometheus Operator's target labels (container="gpumemd"
#      and the rest) and the per-container view still names the workloads
#      (c and d: .ci/prom-live-check.py).
# Needs promtool and prometheus (apt-get install prometheus), curl, python3.
# Every wait is bounded; both processes are stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: prometheus-check.sh path/to/gpumemd}
bin=$(realpath "$bin")

for tool in promtool prometheus curl python3; do
  command -v "$tool" >/dev/null || { echo "prometheus-check: $tool not found (apt-get install prometheus curl python3)"; exit 1; }
done

echo "-- promtool"
promtool check rules deploy/prometheus/gpumemd.rules.yml
(cd deploy/prometheus && promtool test rules gpumemd.rules.test.yml)
(cd deploy/prometheus && promtool check config scrape.yml)

echo "-- grafana dashboards"
python3 grafana/build-dashboards.py --check
python3 .ci/grafana-lint.py

tmp=$(mktemp -d)
demo_pid=
prom_pid=
cleanup() {
  for p in $prom_pid $demo_pid; do
    kill "$p" 2>/dev/null || true
  done
  for p in $prom_pid $demo_pid; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for DESCRIPTION SECONDS PID LOG COMMAND...: run COMMAND until it
# succeeds, failing when PID dies or the deadline passes.
wait_for() {
  local what=$1 secs=$2 pid=$3 log=$4
  shift 4
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "prometheus-check: $what: process exited; its log:"; tail -n 40 "$log"; exit 1
    fi
    if ((SECONDS > deadline)); then
      echo "prometheus-check: $what: not within ${secs}s; log:"; tail -n 40 "$log"; exit 1
    fi
    sleep 0.2
  done
}

echo "-- demo daemon and Prometheus"
demo_port=$(free_port)
"$bin" --demo --web.listen-address "127.0.0.1:$demo_port" >"$tmp/demo.log" 2>&1 &
demo_pid=$!
wait_for "demo daemon ready on :$demo_port" 30 "$demo_pid" "$tmp/demo.log" \
  curl -fsS "http://127.0.0.1:$demo_port/-/ready"

prom_port=$(free_port)
cp deploy/prometheus/gpumemd.rules.yml "$tmp/"
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - gpumemd.rules.yml
scrape_configs:
  - job_name: gpumemd
    static_configs:
      - targets: ["127.0.0.1:$demo_port"]
        # The target labels the Prometheus Operator adds from a
        # ServiceMonitor: the rules and dashboards must not mistake them
        # for the processes' own (issue 19: container="gpumemd").
        labels:
          namespace: monitoring
          pod: gpumemd-x7k2p
          container: gpumemd
          service: gpumemd
          endpoint: metrics
EOF
promtool check config "$tmp/prometheus.yml" >/dev/null
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!
prom=http://127.0.0.1:$prom_port
wait_for "Prometheus ready on :$prom_port" 60 "$prom_pid" "$tmp/prometheus.log" \
  curl -fsS "$prom/-/ready"

scraped() {
  curl -fsS "$prom/api/v1/query" --data-urlencode 'query=up{job="gpumemd"} == 1' \
    | python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'
}
wait_for "Prometheus scraping the demo" 30 "$prom_pid" "$tmp/prometheus.log" scraped
echo "Prometheus $(prometheus --version 2>&1 | awk 'NR == 1 {print $3}') on :$prom_port scrapes the demo on :$demo_port"

echo "-- rules, alerts and dashboard queries against the live Prometheus"
# The demo shows every diagnosis within 60 s of start; 100 s bounds the wait.
if ! python3 .ci/prom-live-check.py --prom "$prom" --deadline 100; then
  echo "prometheus-check: failed; the demo's log:"; tail -n 20 "$tmp/demo.log"
  echo "Prometheus' log:"; tail -n 20 "$tmp/prometheus.log"
  exit 1
fi
echo "prometheus-check passed"
