#!/usr/bin/env bash
# Loads the status page of a live demo daemon in headless Chromium and checks
# what a person would see: both demo GPUs (by UUID), the firing
# GpuMemoryLeakSuspected alert (waited for, at most 90 s after start), poll
# health "ok", and no script error (neither in the page's own #jserrors box
# nor on Chromium's console). Saves a desktop and a phone-width screenshot.
# Needs /usr/bin/chromium (Debian package chromium); installs nothing.
# Usage: .ci/statuspage-check.sh BIN [SCREENSHOT.png]   (default target/statuspage.png;
#        the phone-width one goes next to it as *-mobile.png)
set -euo pipefail
bin=${1:?usage: statuspage-check.sh path/to/gpumemd [screenshot.png]}
png=${2:-target/statuspage.png}
png_mobile=${png%.png}-mobile.png
chromium=/usr/bin/chromium
[ -x "$chromium" ] || { echo "statuspage-check: $chromium not found; install it with: apt-get install -y chromium"; exit 1; }
"$chromium" --version 2>/dev/null | head -1
mkdir -p "$(dirname "$png")"

tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
"$bin" --demo --web.listen-address "127.0.0.1:$port" >"$tmp/daemon.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT

# Wait on the condition, bounded by a deadline: firing alerts, among them the
# demo's headline GpuMemoryLeakSuspected (it fires within about 40 s), so
# that the page and the screenshot show the leak.
want=GpuMemoryLeakSuspected
deadline=$((SECONDS + 90))
firing() {
  curl -fsS "$base/api/v1/alerts" 2>/dev/null |
    python3 -c 'import json, sys; a = json.load(sys.stdin)["alerts"]; n = sorted({x["rule"] for x in a if x["state"] == "firing"}); print(" ".join(n)); sys.exit(0 if sys.argv[1] in n else 1)' "$want"
}
until names=$(firing); do
  if ! kill -0 "$pid" 2>/dev/null; then echo "daemon exited early:"; cat "$tmp/daemon.log"; exit 1; fi
  if ((SECONDS > deadline)); then echo "$want not firing within 90 s:"; curl -sS "$base/api/v1/alerts" | head -c 2000; exit 1; fi
  sleep 0.5
done
uuids=$(curl -fsS "$base/api/v1/snapshot" | python3 -c 'import json, sys; print(" ".join(d["uuid"] for d in json.load(sys.stdin)["devices"]))')
echo "firing: $names"
echo "GPUs: $uuids"
[ "$(wc -w <<<"$uuids")" -eq 2 ] || { echo "the default demo should have 2 GPUs, got: $uuids"; exit 1; }

# One headless Chromium run: a fresh profile, no network beyond the daemon,
# virtual time so the page's fetches and first render finish before the dump.
chrome() {
  local ud rc=0
  ud=$(mktemp -d "$tmp/profile.XXXX")
  timeout 90 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$ud" --hide-scrollbars --virtual-time-budget=5000 \
    --enable-logging=stderr --v=0 "$@" || rc=$?
  rm -rf "$ud"
  return "$rc"
}
chrome --window-size=1280,1000 --dump-dom "$base/" >"$tmp/dom.html" 2>"$tmp/console.log" ||
  { echo "chromium --dump-dom failed:"; cat "$tmp/console.log"; exit 1; }
chrome --window-size=1280,1000 --screenshot="$(realpath "$png")" "$base/" >/dev/null 2>>"$tmp/console.log" ||
  { echo "chromium --screenshot failed:"; cat "$tmp/console.log"; exit 1; }
chrome --window-size=390,1200 --screenshot="$(realpath "$png_mobile")" "$base/" >/dev/null 2>>"$tmp/console.log" ||
  { echo "chromium --screenshot (phone width) failed:"; cat "$tmp/console.log"; exit 1; }

fail=0
for u in $uuids; do
  grep -qF "$u" "$tmp/dom.html" || { echo "GPU $u is not on the page"; fail=1; }
done
grep -qF "data-rule=\"$want\" data-state=\"firing\"" "$tmp/dom.html" || { echo "the firing alert $want is not on the page"; fail=1; }
grep -qF '>poll ok<' "$tmp/dom.html" || { echo "poll health does not say 'poll ok'"; fail=1; }
grep -qF 'DEMO: simulated fleet' "$tmp/dom.html" || { echo "the page does not say it is a demo"; fail=1; }
# The page's window.onerror / unhandledrejection handlers write into #jserrors.
jserrors=$(python3 -c 'import re, sys; m = re.search(r"<pre id=\"jserrors\"[^>]*>(.*?)</pre>", open(sys.argv[1]).read(), re.S); print(m.group(1).strip() if m else "#jserrors is missing from the page")' "$tmp/dom.html")
[ -z "$jserrors" ] || { echo "the page reported script errors:"; echo "$jserrors"; fail=1; }
# The page logs nothing: any console message (Uncaught ..., a failed fetch,
# console.error) is a failure.
if grep -E ':CONSOLE[:(]|Uncaught' "$tmp/console.log"; then echo "console messages above"; fail=1; fi
for f in "$png" "$png_mobile"; do
  [ -s "$f" ] || { echo "no screenshot at $f"; fail=1; }
done
if [ "$fail" -ne 0 ]; then echo "--- DOM"; head -c 4000 "$tmp/dom.html"; echo; exit 1; fi

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
trap - EXIT
rm -rf "$tmp"
[ "$rc" -eq 0 ] || { echo "SIGTERM exit code $rc, want 0"; exit 1; }
echo "status page check passed: 2 GPUs, firing $want shown, poll ok, no script errors; screenshots $png, $png_mobile"
