#!/usr/bin/env bash
# The declared MSRV (rust-version in Cargo.toml) must be true: no package in
# the locked dependency graph may need a newer rustc, and the container
# image's build stage must use exactly that toolchain. Only one toolchain is
# installed in CI, so this reads the graph rather than building with the MSRV
# compiler; the code's own use of newer std APIs is caught by clippy's
# incompatible_msrv lint, which reads the same rust-version.
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean clone has no target/ yet; the check leaves its finding there.
mkdir -p target

cargo metadata --format-version 1 --locked | python3 -c '
import json, sys

def ver(v):
    parts = [int(x) for x in v.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))

meta = json.load(sys.stdin)
members = set(meta["workspace_members"])
ours = {p["name"]: p["rust_version"] for p in meta["packages"] if p["id"] in members}
declared = ours.get("gpumemd")
if not declared:
    sys.exit("msrv: Cargo.toml declares no rust-version for gpumemd")
bad = [f"workspace member {n} declares rust-version {v}, gpumemd {declared}"
       for n, v in ours.items() if v != declared]
deps = [(p["rust_version"], p["name"], p["version"]) for p in meta["packages"]
        if p["id"] not in members and p["rust_version"]]
need = max(deps, key=lambda d: ver(d[0]))
for rv, name, version in sorted(deps, key=lambda d: ver(d[0])):
    if ver(rv) > ver(declared):
        bad.append(f"{name} {version} needs rustc {rv}, above rust-version {declared}")
if ver(need[0]) < ver(declared):
    bad.append(f"rust-version {declared} is above what the locked graph needs "
               f"({need[0]}, {need[1]} {need[2]}): lower it or say in Cargo.toml which language feature needs it")
for b in bad:
    print("msrv:", b, file=sys.stderr)
if bad:
    sys.exit(1)
print(f"msrv: rust-version {declared}; newest need in Cargo.lock: {need[1]} {need[2]} ({need[0]}); {len(deps)} packages checked")
with open("target/msrv.txt", "w") as f:
    f.write(declared + "\n")
'
msrv=$(cat target/msrv.txt)
# The image builds with --locked, so its toolchain must be the MSRV itself.
from=$(sed -n 's/^FROM rust:\([0-9.]*\)-.* AS build$/\1/p' deploy/kubernetes/Dockerfile)
if [ "$from" != "$msrv" ]; then
  echo "msrv: deploy/kubernetes/Dockerfile builds with rust:$from, rust-version is $msrv" >&2
  exit 1
fi
echo "msrv: deploy/kubernetes/Dockerfile builds with rust:$from"
