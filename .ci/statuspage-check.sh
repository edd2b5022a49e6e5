#!/usr/bin/env bash
# The status page in headless Chromium for the demo scenarios default,
# gpu-lost, mig and large: see .ci/statuspage-check.py (the checks, the
# screenshots under OUT_DIR, and the measured refresh at large).
# Usage: .ci/statuspage-check.sh BIN [OUT_DIR] [SCENARIO...]   (default target/statuspage)
set -euo pipefail
exec python3 "$(dirname "$0")/statuspage-check.py" "$@"
