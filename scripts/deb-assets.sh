#!/usr/bin/env bash
# Writes what the .deb ships beside the binary that is generated from it:
# the man pages (gzipped, as Debian policy wants) and the bash, zsh and fish
# completions, all from the CLI definition (`gpumemd generate ...`).
# Usage: scripts/deb-assets.sh [BIN] [OUT_DIR]
#   defaults: target/release/gpumemd, target/deb-assets (the paths
#   [package.metadata.deb] assets name). Then: cargo deb --no-build
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/gpumemd}
out=${2:-target/deb-assets}
mkdir -p "$out"
# One page per subcommand beside gpumemd.1 (gpumemd-check.1, ...).
rm -rf "$out/man" && mkdir -p "$out/man"
"$bin" generate man --dir "$out/man" >/dev/null
gzip -9n "$out/man"/*.1
"$bin" generate bash > "$out/gpumemd.bash"
"$bin" generate zsh > "$out/_gpumemd"
"$bin" generate fish > "$out/gpumemd.fish"
# A man page that does not render, or a completion that does not parse, fails here.
if command -v man >/dev/null; then
  for page in "$out/man"/*.1.gz; do
    MANWIDTH=80 man -l "$page" 2>&1 >/dev/null | grep . && { echo "man page warnings in $page"; exit 1; }
  done
fi
bash -n "$out/gpumemd.bash"
if command -v zsh >/dev/null; then zsh -n "$out/_gpumemd"; fi
if command -v fish >/dev/null; then fish -n "$out/gpumemd.fish"; fi
echo "deb assets in $out: $(ls "$out" "$out/man" | tr '\n' ' ')"
