#!/usr/bin/env bash
# Writes what the .deb ships beside the binary that is generated from it:
# the man page (gzipped, as Debian policy wants) and the bash, zsh and fish
# completions, all from the CLI definition (`gpumemd generate ...`).
# Usage: scripts/deb-assets.sh [BIN] [OUT_DIR]
#   defaults: target/release/gpumemd, target/deb-assets (the paths
#   [package.metadata.deb] assets name). Then: cargo deb --no-build
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/gpumemd}
out=${2:-target/deb-assets}
mkdir -p "$out"
"$bin" generate man | gzip -9n > "$out/gpumemd.1.gz"
"$bin" generate bash > "$out/gpumemd.bash"
"$bin" generate zsh > "$out/_gpumemd"
"$bin" generate fish > "$out/gpumemd.fish"
# A man page that does not render, or a completion that does not parse, fails here.
if command -v man >/dev/null; then
  MANWIDTH=80 man -l "$out/gpumemd.1.gz" 2>&1 >/dev/null | grep . && { echo "man page warnings"; exit 1; }
fi
bash -n "$out/gpumemd.bash"
if command -v zsh >/dev/null; then zsh -n "$out/_gpumemd"; fi
if command -v fish >/dev/null; then fish -n "$out/gpumemd.fish"; fi
echo "deb assets in $out: $(ls "$out" | tr '\n' ' ')"
