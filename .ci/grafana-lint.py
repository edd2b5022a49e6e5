#!/usr/bin/env python3
"""Lints grafana/dashboards/*.json and grafana/provisioning without a Grafana.

    grafana-lint.py [REPO]

Checks what a Grafana would reject or show wrongly, and this project's
conventions: schemaVersion >= 39; unique dashboard uids and titles; a
`datasource` variable of type datasource (prometheus) and an `instance`
variable; every `$var` a query uses is defined; every panel and target uses
${datasource}; unique panel ids and refIds; panels inside the 24-column grid
and not overlapping; a unit on every panel; repeat variables exist; links to
/d/<uid> name a dashboard of this set; the provisioning files point at the
dashboards folder. Prints one line per problem; exit 1 if any.
"""

import json
import pathlib
import re
import sys

DS = {"type": "prometheus", "uid": "${datasource}"}
BUILTIN = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms",
           "__url_time_range", "__data", "__field", "__series", "__value", "__from", "__to", "__name"}


def panels_of(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])


def lint_dashboard(name, dash, problems, uids):
    def bad(msg):
        problems.append(f"{name}: {msg}")

    if dash.get("schemaVersion", 0) < 39:
        bad(f"schemaVersion {dash.get('schemaVersion')} < 39")
    for key in ("uid", "title"):
        if not dash.get(key):
            bad(f"no {key}")
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        bad("no `datasource` variable of type datasource for prometheus")
    if "instance" not in variables:
        bad("no `instance` variable")
    for vname, v in variables.items():
        if v.get("type") == "query" and v.get("datasource") != DS:
            bad(f"variable {vname} does not use ${{datasource}}")

    def used_vars(text):
        return {a or b or c for a, b, c in re.findall(r"\$\{(\w+)[^}]*\}|\[\[(\w+)\]\]|\$(\w+)", text)}

    for vname, v in variables.items():
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        for u in used_vars(q) - set(variables) - BUILTIN:
            bad(f"variable {vname} uses undefined ${u}")

    ids, cells = set(), {}
    for p in panels_of(dash):
        title = p.get("title", "?")
        pid = p.get("id")
        if pid in ids:
            bad(f"duplicate panel id {pid}")
        ids.add(pid)
        g = p.get("gridPos", {})
        if not all(k in g for k in "hwxy"):
            bad(f"panel {title!r}: no gridPos")
            continue
        if g["x"] < 0 or g["x"] + g["w"] > 24 or g["w"] <= 0 or g["h"] <= 0:
            bad(f"panel {title!r}: gridPos {g} outside the 24-column grid")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    bad(f"panel {title!r} overlaps {cells[(x, y)]!r}")
                    break
                cells[(x, y)] = title
            else:
                continue
            break
        if p.get("type") == "row":
            continue
        if p.get("datasource") != DS:
            bad(f"panel {title!r}: datasource is not ${{datasource}}")
        if not p.get("description"):
            pass  # descriptions are encouraged, not required
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if not unit:
            bad(f"panel {title!r}: no unit")
        rep = p.get("repeat")
        if rep and rep not in variables:
            bad(f"panel {title!r}: repeats over undefined variable {rep}")
        targets = p.get("targets", [])
        if not targets:
            bad(f"panel {title!r}: no targets")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            bad(f"panel {title!r}: refIds {refs} not unique")
        for t in targets:
            if t.get("datasource") != DS:
                bad(f"panel {title!r} target {t.get('refId')}: datasource is not ${{datasource}}")
            expr = t.get("expr", "")
            if not expr.strip():
                bad(f"panel {title!r} target {t.get('refId')}: empty expr")
            if "${datasource}" in expr:
                bad(f"panel {title!r}: ${{datasource}} inside a query")
            for u in used_vars(expr) - set(variables) - BUILTIN:
                bad(f"panel {title!r} target {t.get('refId')}: undefined variable ${u}")
        text = json.dumps(p)
        for uid in re.findall(r"/d/([\w-]+)", text):
            if uid not in uids:
                bad(f"panel {title!r}: links to unknown dashboard uid {uid}")


def lint_provisioning(repo, problems):
    ds = repo / "grafana/provisioning/datasources/prometheus.yml"
    db = repo / "grafana/provisioning/dashboards/gpumemd.yml"
    for f in (ds, db):
        if not f.exists():
            problems.append(f"missing {f.relative_to(repo)}")
    if ds.exists() and not re.search(r"^\s*type:\s*prometheus\s*$", ds.read_text(), re.M):
        problems.append(f"{ds.relative_to(repo)}: no datasource of type prometheus")
    if db.exists() and not re.search(r"^\s*path:\s*\S+", db.read_text(), re.M):
        problems.append(f"{db.relative_to(repo)}: no options.path")


def main(argv):
    repo = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    files = sorted((repo / "grafana/dashboards").glob("*.json"))
    problems = []
    if not files:
        problems.append("no dashboards in grafana/dashboards")
    dashes = {}
    for f in files:
        try:
            dashes[f.name] = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            problems.append(f"{f.name}: invalid JSON: {e}")
    uids = [d.get("uid") for d in dashes.values()]
    titles = [d.get("title") for d in dashes.values()]
    if len(set(uids)) != len(uids):
        problems.append(f"duplicate dashboard uids: {uids}")
    if len(set(titles)) != len(titles):
        problems.append(f"duplicate dashboard titles: {titles}")
    for name, d in dashes.items():
        lint_dashboard(name, d, problems, set(uids))
    lint_provisioning(repo, problems)
    for p in problems:
        print("grafana-lint: " + p)
    if problems:
        return 1
    npanels = sum(1 for d in dashes.values() for p in panels_of(d) if p.get("type") != "row")
    print(f"grafana-lint: {len(dashes)} dashboards, {npanels} panels, clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
