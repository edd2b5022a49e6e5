#!/usr/bin/env bash
# Issue 22 (B4): N clients that pipeline GET /api/v1/snapshot and never read,
# against `GPUMEMD --demo SCENARIO`; samples the daemon's VmRSS for 45 s and
# writes OUT_DIR/summary.txt (baseline, peak, end RSS in MiB, 503s seen).
# Usage: scripts/stuck-readers.sh GPUMEMD OUT_DIR [N=80] [SCENARIO=large]
# Self-contained, bounded (about 60 s), no network beyond 127.0.0.1.
set -euo pipefail
BIN=$1 OUT=$2 N=${3:-80} SCEN=${4:-large}
mkdir -p "$OUT"
PORT=$((20000 + RANDOM % 20000))
"$BIN" --demo "$SCEN" --web.listen-address "127.0.0.1:$PORT" 2>"$OUT/daemon.log" &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
timeout 120 python3 - "$PID" "$PORT" "$N" "$OUT/summary.txt" <<'PY'
import socket, sys, time, urllib.request, urllib.error
pid, port, n, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"):
            return int(l.split()[1]) / 1024
def status():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/snapshot", timeout=30) as r:
            r.read(); return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return None
deadline = time.time() + 60
while status() != 200:
    if time.time() > deadline: sys.exit("daemon never served a snapshot")
    time.sleep(0.5)
base = rss()
req = b"GET /api/v1/snapshot HTTP/1.1\r\nHost: x\r\n\r\n" * 64
socks = []
for _ in range(n):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port)); s.setblocking(False)
    try: s.send(req)
    except BlockingIOError: pass
    socks.append(s)
peak, codes, t0 = base, [], time.time()
while time.time() - t0 < 45:
    peak = max(peak, rss())
    if len(codes) < 10: codes.append(status())
    time.sleep(0.5)
end = rss()
with open(out, "w") as f:
    f.write(f"stuck_readers {n}\nrss_base_mib {base:.0f}\nrss_peak_mib {peak:.0f}\nrss_end_mib {end:.0f}\n")
    f.write(f"probe_statuses {codes}\n")
    f.write(("PASS" if peak - base < 200 else "FAIL") + f" rss_growth_mib {peak - base:.0f} (bound 200)\n")
print(open(out).read())
PY
