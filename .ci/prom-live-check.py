#!/usr/bin/env python3
"""Checks the rules and dashboards against a real Prometheus scraping the demo.

Run by .ci/prometheus-check.sh once Prometheus has scraped the daemon:

    prom-live-check.py --prom URL --deadline SECONDS [--repo DIR]

It checks, failing with a list of every problem found:
1. every rule group Prometheus loaded from deploy/prometheus/gpumemd.rules.yml
   evaluates with health "ok", every recording rule returns data (but those
   joining another exporter's series, FOREIGN, absent from the demo), and every
   rule of the daemon's src/judge/rules/defaults.toml has a Prometheus mirror;
2. at least one gpumemd alert is pending or firing (/api/v1/alerts) and the
   daemon's own gpumem_alerts series is there;
3. every runbook_url is absolute and its anchor exists in docs/runbook.md, and every alert has a
   `promtool test rules` case that fires and one that does not;
4. every metric name in the rules and dashboards is in tests/golden/demo.prom,
   is a recording rule, or is one Prometheus makes itself;
5. every panel query of every dashboard in grafana/dashboards returns data,
   with the template variables resolved as Grafana would (label_values()
   against this Prometheus, all values selected).

The demo shows its diagnoses over its first minute, so queries that return
nothing are retried until the deadline; a broken query stays empty and fails.
Uses only the standard library.
"""

import argparse
import json
import pathlib
import re
import sys
import time
import urllib.parse
import urllib.request

# Series of other exporters the rules join with; the demo has none, so rules
# using them must evaluate cleanly but need not return data (their
# `promtool test rules` cases feed synthetic series).
FOREIGN = {"kube_pod_info"}
PROMETHEUS_MADE = {
    "up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds", "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling", "scrape_series_added",
}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "atan2", "inf", "nan"}
BUILTINS = {
    "__rate_interval": "1m", "__interval": "15s", "__interval_ms": "15000",
    "__range": "1h", "__range_s": "3600", "__range_ms": "3600000",
}


class Prom:
    def __init__(self, url):
        self.url = url.rstrip("/")

    def get(self, path, **params):
        q = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}{path}?{q}", timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"{path}: {body}")
        return body["data"]

    def query(self, expr):
        """-> (result list, error string or None)"""
        try:
            data = self.get("/api/v1/query", query=expr)
        except urllib.error.HTTPError as e:
            return [], f"HTTP {e.code}: {e.read().decode(errors='replace').strip()}"
        except Exception as e:  # noqa: BLE001 - report any failure as the query's error
            return [], str(e)
        res = data["result"]
        if data["resultType"] == "scalar":
            res = [res]
        return res, None


# ------------------------------------------------------------ PromQL names
def metric_names(expr):
    """Metric names an expression selects (a tokenizer, not a parser: good
    enough for the expressions in this repository)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![A-Za-z0-9_:.$])[A-Za-z_:][A-Za-z0-9_:]*", s):
        tok = m.group(0)
        if s[m.end():].lstrip().startswith("(") or tok.lower() in KEYWORDS:
            continue
        names.add(tok)
    return names


def golden_names(path):
    names = set()
    for line in path.read_text().splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


# ------------------------------------------------------------- dashboards
def panels_of(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])  # collapsed rows keep their panels inside


def regex_escape(value):
    # Grafana's prometheusSpecialRegexEscape, for multi-value / include-all variables.
    return re.sub(r"([$^*{}\[\]'+?.()|])", r"\\\\\1", value.replace("\\", "\\\\\\\\"))


def interpolate(text, values):
    def sub(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in values:
            return values[name]
        return m.group(0)
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", sub, text)


def resolve_variables(prom, dash):
    """Resolves the dashboard's variables the way Grafana would with every
    value selected. -> ({name: text to substitute}, [problems])"""
    values = dict(BUILTINS)
    problems = []
    for v in dash.get("templating", {}).get("list", []):
        name, kind = v["name"], v.get("type")
        if kind == "datasource":
            values[name] = "prometheus"
            continue
        if kind in ("custom", "constant", "textbox", "interval"):
            cur = v.get("current", {}).get("value") or v.get("query", "").split(",")[0]
            values[name] = cur if isinstance(cur, str) else cur[0]
            continue
        if kind != "query":
            problems.append(f"variable {name}: type {kind} not handled by the check")
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        q = interpolate(q, values)
        m = re.fullmatch(r"\s*label_values\(\s*(?:(.*),\s*)?(\w+)\s*\)\s*", q)
        if not m:
            problems.append(f"variable {name}: only label_values() queries are checked, got {q}")
            continue
        selector, label = m.group(1), m.group(2)
        params = {"match[]": selector} if selector else {}
        try:
            found = prom.get(f"/api/v1/label/{label}/values", **params)
        except Exception as e:  # noqa: BLE001
            problems.append(f"variable {name}: {q}: {e}")
            continue
        if not found:
            problems.append(f"variable {name}: {q} has no values")
            values[name] = "NO_VALUES"
            continue
        if v.get("multi") or v.get("includeAll"):
            esc = [regex_escape(x) for x in found]
            values[name] = esc[0] if len(esc) == 1 else "(" + "|".join(esc) + ")"
        else:
            values[name] = found[0].replace("\\", "\\\\").replace("'", "\\'")
    return values, problems


def dashboard_queries(prom, dash_dir):
    """-> [(label, expr)], [problems], [raw exprs]"""
    queries, problems, raw = [], [], []
    for path in sorted(dash_dir.glob("*.json")):
        dash = json.loads(path.read_text())
        values, probs = resolve_variables(prom, dash)
        problems += [f"{path.name}: {p}" for p in probs]
        for p in panels_of(dash):
            for t in p.get("targets", []):
                if "expr" not in t:
                    continue
                raw.append(t["expr"])
                expr = interpolate(t["expr"], values)
                where = f"{path.name} / {p.get('title')} / {t.get('refId')}"
                if "$" in expr:
                    problems.append(f"{where}: unresolved variable in {expr}")
                    continue
                queries.append((where, expr))
    return queries, problems, raw


# ------------------------------------------------------------------ rules
def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def runbook_anchors(path):
    """GitHub-style anchors of the Markdown headings outside code fences."""
    anchors, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)
        if m:
            anchors.add(slug(m.group(1)))
    return anchors


def test_cases(path):
    """-> {alertname: {"fires", "silent"}} from a promtool test file."""
    cases = {}
    for block in re.split(r"\n\s*- eval_time:", path.read_text())[1:]:
        m = re.search(r"alertname:\s*(\S+)", block)
        if not m:
            continue
        silent = re.search(r"exp_alerts:\s*\[\s*\]", block) is not None
        cases.setdefault(m.group(1), set()).add("silent" if silent else "fires")
    return cases


def wait_rules_evaluated(prom, deadline):
    while True:
        groups = prom.get("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r.get("health") != "unknown" for r in rules):
            return groups
        if time.monotonic() > deadline:
            return groups
        time.sleep(0.5)


def check_rules(prom, repo, deadline, problems):
    groups = wait_rules_evaluated(prom, deadline)
    if not groups:
        problems.append("Prometheus loaded no rule groups")
        return set(), []
    alerts, recorded, exprs = {}, set(), []
    for g in groups:
        for r in g["rules"]:
            exprs.append(r["query"])
            if r.get("health") != "ok":
                problems.append(f"rule {g['name']}/{r['name']}: health {r.get('health')} {r.get('lastError', '')}")
            if r["type"] == "recording":
                recorded.add(r["name"])
            else:
                alerts[r["name"]] = r
    print(f"  {len(groups)} rule groups loaded: {len(recorded)} recording and {len(alerts)} alerting rules")

    anchors = runbook_anchors(repo / "docs/runbook.md")
    for name, r in alerts.items():
        ann = r.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                problems.append(f"alert {name}: no {key} annotation")
        if "severity" not in r.get("labels", {}):
            problems.append(f"alert {name}: no severity label")
        url = ann.get("runbook_url", "")
        if url and not url.startswith(("https://", "http://")):
            problems.append(f"alert {name}: runbook_url {url!r} is relative; receivers (Alertmanager, "
                            "chat, mail) know nothing of our docs: make it absolute")
        if "#" in url and url.split("#", 1)[1] not in anchors:
            problems.append(f"alert {name}: runbook anchor #{url.split('#', 1)[1]} not in docs/runbook.md")

    daemon_rules = re.findall(r'^name\s*=\s*"([^"]+)"', (repo / "src/judge/rules/defaults.toml").read_text(), re.M)
    for name in daemon_rules:
        if name not in alerts:
            problems.append(f"daemon default rule {name} has no mirror in gpumemd.rules.yml")

    cases = test_cases(repo / "deploy/prometheus/gpumemd.rules.test.yml")
    for name in alerts:
        have = cases.get(name, set())
        for kind, what in (("fires", "case where it fires"), ("silent", "case where it does not fire")):
            if kind not in have:
                problems.append(f"alert {name}: gpumemd.rules.test.yml has no {what}")
    return recorded, exprs


def foreign_recordings(prom):
    """Recording rules that read a FOREIGN series, directly or through
    another such rule (rules come in evaluation order)."""
    fed = set()
    for g in prom.get("/api/v1/rules")["groups"]:
        for r in g["rules"]:
            if r["type"] == "recording" and metric_names(r["query"]) & (FOREIGN | fed):
                fed.add(r["name"])
    return fed


def check_alerts(prom, names, deadline, problems):
    while True:
        active = [a for a in prom.get("/api/v1/alerts")["alerts"]
                  if a["labels"].get("alertname") in names and a["state"] in ("pending", "firing")]
        own, _ = prom.query("gpumem_alerts")
        if active and own:
            break
        if time.monotonic() > deadline:
            if not active:
                problems.append("no gpumemd alert is pending or firing in Prometheus")
            if not own:
                problems.append("the daemon exports no gpumem_alerts series")
            return
        time.sleep(0.5)
    summary = sorted({f"{a['labels']['alertname']} ({a['state']})" for a in active})
    print(f"  Prometheus alerts: {', '.join(summary)}; daemon alerts: {len(own)} series")


def run_queries(prom, queries, deadline):
    pending = list(queries)
    errors = {}
    while True:
        still = []
        for where, expr in pending:
            res, err = prom.query(expr)
            if err:
                errors[where] = (expr, err)
            elif not res:
                still.append((where, expr))
        pending = still
        if not pending or time.monotonic() > deadline:
            return pending, errors
        time.sleep(1)


def check_operator_labels(prom, deadline, problems):
    """Under the Prometheus Operator every series gets the target labels
    namespace, pod, service, endpoint and container="gpumemd" (the pod's
    container). prometheus-check.sh sets them the same way; the per-container
    view must still name the workloads' containers, never "gpumemd"."""
    rule = "instance_container_id:gpumem_memory_used_bytes:sum"
    while True:
        summed, err = prom.query(rule)
        raw, err2 = prom.query('gpumem_process_memory_used_bytes{container_id!=""}')
        if (summed and raw) or time.monotonic() > deadline:
            break
        time.sleep(1)
    if err or err2 or not summed or not raw:
        problems.append(f"operator labels: no data for {rule} or the process series ({err or err2})")
        return
    if any(r["metric"].get("container") != "gpumemd" for r in raw):
        problems.append("operator labels: the scrape did not carry the target label container=\"gpumemd\"")
    if any("exported_container" in r["metric"] for r in raw):
        problems.append("operator labels: a process series collides with the target label (exported_container)")
    want = {r["metric"]["container_id"] for r in raw}
    got = {r["metric"].get("container_id", "") for r in summed}
    if "gpumemd" in got or not want <= got:
        problems.append(f"operator labels: {rule} shows containers {sorted(got)}, the processes run in {sorted(want)}")
    else:
        print(f"operator labels: {len(want)} workload container(s) shown by {rule}, none named after gpumemd's own")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prom", required=True)
    ap.add_argument("--deadline", type=float, default=90, help="seconds from now")
    ap.add_argument("--repo", default=str(pathlib.Path(__file__).resolve().parent.parent))
    args = ap.parse_args()
    repo = pathlib.Path(args.repo)
    prom = Prom(args.prom)
    deadline = time.monotonic() + args.deadline
    problems = []

    recorded, rule_exprs = check_rules(prom, repo, deadline, problems)
    check_operator_labels(prom, deadline, problems)
    check_alerts(prom, {r for r in re.findall(r"^\s*- alert:\s*(\S+)",
                 (repo / "deploy/prometheus/gpumemd.rules.yml").read_text(), re.M)}, deadline, problems)

    queries, probs, raw = dashboard_queries(prom, repo / "grafana/dashboards")
    problems += probs

    known = golden_names(repo / "tests/golden/demo.prom") | recorded | PROMETHEUS_MADE | FOREIGN
    foreign_fed = foreign_recordings(prom)
    for where, exprs in (("rules", rule_exprs), ("dashboards", raw)):
        for e in exprs:
            for n in sorted(metric_names(e) - known):
                problems.append(f"{where}: metric {n} is not in tests/golden/demo.prom ({e.strip()[:80]})")

    # A rule's first evaluation may come before the first scrape, so the
    # recording rules are retried like the panels.
    rule_queries = [(f"recording rule {name}", name) for name in sorted(recorded - foreign_fed)]
    empty, errors = run_queries(prom, rule_queries + queries, deadline)
    # Join errors (many-to-many matching) only show once there is data, so
    # health is checked again now that every query has returned some.
    for g in prom.get("/api/v1/rules")["groups"]:
        for r in g["rules"]:
            if r.get("health") != "ok":
                problems.append(f"rule {g['name']}/{r['name']} after data arrived: health "
                                f"{r.get('health')} {r.get('lastError', '')}")
    for where, (expr, err) in errors.items():
        problems.append(f"query error: {where}: {err}\n      {expr}")
    for where, expr in empty:
        problems.append(f"no data: {where}\n      {expr}")

    if problems:
        print(f"FAILED: {len(problems)} problem(s):")
        for p in problems:
            print("  - " + p)
        return 1
    ndash = len(list((repo / "grafana/dashboards").glob("*.json")))
    print(f"  every rule group evaluates with health ok; {len(recorded - foreign_fed)} recording rules return data"
          f" ({len(foreign_fed)} more read other exporters' series the demo lacks)")
    print(f"{len(queries)} dashboard queries checked, all returned data ({ndash} dashboards)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
