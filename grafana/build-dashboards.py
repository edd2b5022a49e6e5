#!/usr/bin/env python3
"""Generates grafana/dashboards/*.json, the gpumemd Grafana dashboards.

The JSON files are committed (Grafana provisioning reads them as they are);
this script is their source, so that six dashboards share one set of template
variables, units, links and conventions. After editing it, run

    python3 grafana/build-dashboards.py           # rewrite the JSON files
    python3 grafana/build-dashboards.py --check   # exit 1 if they are out of date

.ci/prometheus-check.sh runs --check, lints the JSON and runs every panel
query against a real Prometheus scraping the demo.

Conventions:
- every panel and target uses the `${datasource}` variable;
- `$job`, `$instance` and `$uuid` are label_values() query variables, so
  .ci/prom-dashboard-queries.py can resolve them the way Grafana does;
- every metric name is in tests/golden/demo.prom, a recording rule of
  deploy/prometheus/gpumemd.rules.yml, or one Prometheus makes (up, ALERTS,
  scrape_*);
- no panel query filters on a value that is legitimately absent most of the
  time without `or vector(0)` or a reason, so "no data" means broken.
"""

import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
TAG = "gpumemd"

# Selectors shared by the queries.
INST = 'job=~"$job", instance=~"$instance"'
DEV = INST + ', uuid=~"$uuid"'
# Joins that add the GPU index (and model name) to device series.
BY_DEV = "on (job, instance, uuid)"
BY_PROC = "on (job, instance, uuid, pid)"
IDX = f"* {BY_DEV} group_left (index) gpumem_device_info"
IDX_NAME = f"* {BY_DEV} group_left (index, name) gpumem_device_info"
INFO_ALL = f"* {BY_DEV} group_left (index, name, pci_bus_id, mig_profile, parent_uuid) gpumem_device_info"
LEAKY = f"{BY_PROC} (gpumem_process_leak_suspected == 1)"
# The memory-related Xid codes (docs/runbook.md#gpumemoryxid).
MEMORY_XIDS = 'xid=~"31|48|63|64|92|94|95"'


# ----------------------------------------------------------------- targets
def target(expr, legend="", ref="A", instant=False, table=False):
    t = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
        "refId": ref,
    }
    if table:
        t["format"] = "table"
    return t


def refs(exprs, instant=False, table=False):
    """[(expr, legend)] -> targets A, B, C..."""
    return [
        target(e, leg, chr(ord("A") + i), instant, table)
        for i, (e, leg) in enumerate(exprs)
    ]


# ------------------------------------------------------------------ panels
def thresholds(*steps):
    """steps: (value or None, color) ..."""
    return {
        "mode": "absolute",
        "steps": [{"color": c, "value": v} for v, c in steps],
    }


GREEN = thresholds((None, "green"))


def field_defaults(unit, **extra):
    d = {"unit": unit, "color": {"mode": "palette-classic"}, "thresholds": GREEN}
    d.update(extra)
    return d


def timeseries(title, desc, targets, unit, stack=False, min0=True, overrides=None,
               thresh=None, legend_calcs=("lastNotNull", "max"), fill=10):
    custom = {
        "drawStyle": "line",
        "lineWidth": 1,
        "fillOpacity": 70 if stack else fill,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "axisSoftMin": 0 if min0 else None,
        "thresholdsStyle": {"mode": "dashed" if thresh else "off"},
    }
    if not min0:
        del custom["axisSoftMin"]
    defaults = field_defaults(unit, custom=custom)
    if thresh:
        defaults["thresholds"] = thresh
    return {
        "type": "timeseries",
        "title": title,
        "description": desc,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {
                "showLegend": True,
                "displayMode": "table",
                "placement": "bottom",
                "calcs": list(legend_calcs),
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(title, desc, targets, unit, thresh=GREEN, color_mode="value", graph=False,
         decimals=None, mappings=None):
    defaults = {"unit": unit, "color": {"mode": "thresholds"}, "thresholds": thresh}
    if decimals is not None:
        defaults["decimals"] = decimals
    if mappings:
        defaults["mappings"] = mappings
    return {
        "type": "stat",
        "title": title,
        "description": desc,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": color_mode,
            "graphMode": "area" if graph else "none",
            "justifyMode": "auto",
            "textMode": "auto",
            "orientation": "auto",
            "wideLayout": True,
            "showPercentChange": False,
        },
    }


def bargauge(title, desc, targets, unit, thresh=GREEN, max_=None):
    defaults = {"unit": unit, "min": 0, "color": {"mode": "thresholds"}, "thresholds": thresh}
    if max_ is not None:
        defaults["max"] = max_
    return {
        "type": "bargauge",
        "title": title,
        "description": desc,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "horizontal",
            "displayMode": "gradient",
            "valueMode": "color",
            "showUnfilled": True,
            "namePlacement": "left",
            "sizing": "auto",
            "minVizHeight": 16,
            "maxVizHeight": 300,
        },
    }


def table(title, desc, targets, columns, units, hide=(), links=None, sort=None,
          merge=False, cell_thresholds=None):
    """columns: [(field, display name)] in order; units: {field: unit}."""
    exclude = {"Time": True, "__name__": True, "job": True}
    exclude.update({h: True for h in hide})
    rename = {f: d for f, d in columns}
    index = {f: i for i, (f, _) in enumerate(columns)}
    transformations = []
    if merge:
        transformations.append({"id": "merge", "options": {}})
    transformations.append({
        "id": "organize",
        "options": {"excludeByName": exclude, "indexByName": index, "renameByName": rename},
    })
    overrides = []
    for field, unit in units.items():
        props = [{"id": "unit", "value": unit}]
        if cell_thresholds and field in cell_thresholds:
            props += [
                {"id": "thresholds", "value": cell_thresholds[field]},
                {"id": "custom.cellOptions", "value": {"type": "color-text"}},
            ]
        overrides.append({"matcher": {"id": "byName", "options": field}, "properties": props})
    defaults = {
        "custom": {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True},
        "thresholds": GREEN,
        "color": {"mode": "thresholds"},
        "unit": "none",
    }
    if links:
        defaults["links"] = links
    options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "fields": ""}}
    if sort:
        options["sortBy"] = [{"displayName": sort, "desc": True}]
    return {
        "type": "table",
        "title": title,
        "description": desc,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": options,
        "transformations": transformations,
    }


UP_DOWN = [{
    "type": "value",
    "options": {
        "0": {"text": "down", "color": "red", "index": 0},
        "1": {"text": "up", "color": "green", "index": 1},
    },
}]


def state_timeline(title, desc, targets, mappings=UP_DOWN):
    return {
        "type": "state-timeline",
        "title": title,
        "description": desc,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {
            "defaults": {
                "color": {"mode": "thresholds"},
                "thresholds": thresholds((None, "red"), (1, "green")),
                "mappings": mappings,
                "unit": "none",
                "custom": {"fillOpacity": 80, "lineWidth": 0},
            },
            "overrides": [],
        },
        "options": {
            "showValue": "never",
            "mergeValues": True,
            "alignValue": "left",
            "rowHeight": 0.9,
            "legend": {"showLegend": False, "displayMode": "list", "placement": "bottom"},
            "tooltip": {"mode": "single", "sort": "none"},
        },
    }


def row(title):
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


def override(name, **props):
    """An override by series name; props: custom.x=..., unit=..., color=..."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": k.replace("__", "."), "value": v} for k, v in props.items()],
    }


def fixed(color):
    return {"mode": "fixed", "fixedColor": color}


# -------------------------------------------------------------- layout
class Layout:
    """Places panels left to right in rows of 24 units, rows of panels with
    their own heights; row headers take a full line."""

    def __init__(self):
        self.panels = []
        self.x = 0
        self.y = 0
        self.line_h = 0

    def _newline(self):
        if self.x:
            self.y += self.line_h
            self.x = 0
            self.line_h = 0

    def row(self, title):
        self._newline()
        p = row(title)
        p["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": self.y}
        self.panels.append(p)
        self.y += 1

    def add(self, panel, w, h):
        if self.x + w > 24:
            self._newline()
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(panel)
        self.x += w
        self.line_h = max(self.line_h, h)
        return panel

    def numbered(self):
        for i, p in enumerate(self.panels, 1):
            p["id"] = i
        return self.panels


# ---------------------------------------------------------- variables
def datasource_var():
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def query_var(name, label, query, multi=True, include_all=True, all_value=None):
    v = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "current": {},
        "hide": 0,
        "includeAll": include_all,
        "multi": multi,
        "options": [],
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "skipUrlSync": False,
    }
    if include_all and all_value is not None:
        v["allValue"] = all_value
    return v


def variables(uuid=True, instance_multi=True):
    vs = [
        datasource_var(),
        # No allValue: "All" expands to the jobs that export gpumemd metrics,
        # so up{job=~"$job"} never picks up other exporters' targets.
        query_var("job", "Job", "label_values(gpumem_build_info, job)", include_all=True),
        # From `up`, so a daemon that is down still appears.
        query_var("instance", "Host", 'label_values(up{job=~"$job"}, instance)',
                  multi=instance_multi, include_all=instance_multi, all_value=".*"),
    ]
    if uuid:
        vs.append(query_var(
            "uuid", "GPU (UUID)",
            'label_values(gpumem_device_info{job=~"$job", instance=~"$instance"}, uuid)',
            all_value=".*",
        ))
    return vs


def dashboard(uid, title, description, panels, uuid=True, instance_multi=True):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": [TAG],
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "annotations": {"list": [{
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        }]},
        "links": [{
            "title": "gpumemd dashboards",
            "type": "dashboards",
            "tags": [TAG],
            "asDropdown": True,
            "includeVars": True,
            "keepTime": True,
            "targetBlank": False,
            "icon": "external link",
            "tooltip": "",
            "url": "",
        }],
        "templating": {"list": variables(uuid, instance_multi)},
        "panels": panels,
    }


GPU_LINK = [{
    "title": "Per-GPU memory for ${__data.fields.uuid}",
    # Fields by their query names (the organize transformation only renames
    # them for display); job comes from this dashboard's variable.
    "url": "/d/gpumemd-gpu/gpumemd-per-gpu-memory?${job:queryparam}"
           "&var-instance=${__data.fields.instance}&var-uuid=${__data.fields.uuid}&${__url_time_range}",
}]

PCT_THRESH = thresholds((None, "green"), (0.8, "orange"), (0.9, "red"))
COUNT_BAD = thresholds((None, "green"), (1, "red"))


# ------------------------------------------------------------ dashboards
def fleet():
    L = Layout()
    top = 'parent_uuid=""'
    L.row("Fleet")
    L.add(stat("GPUs", "Physical GPUs reporting (MIG instances not counted).",
               refs([(f"count(gpumem_device_info{{{INST}, {top}}})", "")]), "none"), 3, 4)
    L.add(stat("GPUs lost", "GPUs whose latest poll failed (gpumem_device_up == 0).",
               refs([(f"count(gpumem_device_up{{{INST}}} == 0) or vector(0)", "")]),
               "none", COUNT_BAD, "background"), 3, 4)
    L.add(stat("Daemons down", "gpumemd targets Prometheus cannot scrape (up == 0).",
               refs([(f"count(up{{{INST}}} == 0) or vector(0)", "")]),
               "none", COUNT_BAD, "background"), 3, 4)
    L.add(stat("Memory used", "Used memory of all GPUs; MIG instances are inside their GPU.",
               refs([(f"sum(instance:gpumem_device_memory_used_bytes:sum{{{INST}}})", "")]),
               "bytes"), 4, 4)
    L.add(stat("Fleet used", "Used / total over all GPUs.",
               refs([(f"sum(instance:gpumem_device_memory_used_bytes:sum{{{INST}}})"
                      f" / sum(instance:gpumem_device_memory_total_bytes:sum{{{INST}}})", "")]),
               "percentunit", PCT_THRESH, graph=True), 3, 4)
    L.add(stat("Held by exited / zombie", "Memory held by processes that are gone from /proc "
               "or are zombies: usually reclaimable.",
               refs([(f'sum(instance_holder:gpumem_device_memory_held_bytes:sum{{{INST}, holder=~"exited|zombie"}})', "")]),
               "bytes", thresholds((None, "green"), (1, "orange"))), 4, 4)
    L.add(stat("Firing alerts", "Firing gpumemd alerts, as evaluated by Prometheus (ALERTS) "
               "and by the daemons themselves (gpumem_alerts).",
               refs([(f'count(ALERTS{{alertstate="firing", alertname=~"Gpu.*", {INST}}}) or vector(0)', "Prometheus"),
                     (f'count(gpumem_alerts{{alertstate="firing", {INST}}}) or vector(0)', "gpumemd")]),
               "none", thresholds((None, "green"), (1, "orange"))), 4, 4)

    L.row("Usage")
    L.add(timeseries("Used memory per host", "Used / total of each host's GPUs.",
                     refs([(f"instance:gpumem_device_memory_used_bytes:sum{{{INST}}}"
                            f" / instance:gpumem_device_memory_total_bytes:sum{{{INST}}}", "{{instance}}")]),
                     "percentunit", thresh=PCT_THRESH), 12, 8)
    L.add(timeseries("Used memory by holder", "live: running processes; zombie: state Z or D; "
                     "exited: listed by NVML but gone from /proc; unattributed: used memory no listed "
                     "process accounts for. The four add up to used.",
                     refs([(f"sum by (holder) (instance_holder:gpumem_device_memory_held_bytes:sum{{{INST}}})", "{{holder}}")]),
                     "bytes", stack=True, overrides=HOLDER_COLORS), 12, 8)
    per_gpu = table(
        "GPUs", "One row per GPU or MIG instance. Click a row for the per-GPU dashboard.",
        refs([
            (f"gpumem:device_memory_used:ratio{{{DEV}}} {IDX_NAME}", ""),
            (f"gpumem_device_memory_used_bytes{{{DEV}}} {IDX_NAME}", ""),
            (f"gpumem_device_memory_free_bytes{{{DEV}}} {IDX_NAME}", ""),
            (f'sum without (holder) (gpumem_device_memory_held_bytes{{{DEV}, holder=~"exited|zombie"}}) {IDX_NAME}', ""),
            (f"gpumem_device_memory_unreleased_bytes{{{DEV}}} {IDX_NAME}", ""),
            (f"gpumem_device_processes{{{DEV}}} {IDX_NAME}", ""),
        ], instant=True, table=True),
        [("instance", "Host"), ("index", "GPU"), ("name", "Model"), ("uuid", "UUID"),
         ("Value #A", "Used"), ("Value #B", "Used bytes"), ("Value #C", "Free"),
         ("Value #D", "Exited / zombie"), ("Value #E", "Not released"), ("Value #F", "Processes")],
        {"Value #A": "percentunit", "Value #B": "bytes", "Value #C": "bytes",
         "Value #D": "bytes", "Value #E": "bytes", "Value #F": "none"},
        links=GPU_LINK, sort="Used", merge=True, cell_thresholds={"Value #A": PCT_THRESH},
    )
    L.add(per_gpu, 24, 9)

    L.row("Who holds the memory (summed over each host's GPUs)")
    owners = [("user", "user", "Per user"), ("container_id", "container_id", "Per container (ID)"),
              ("slurm_job", "slurm_job", "Per Slurm job"), ("pod_uid", "pod_uid", "Per Kubernetes pod (UID)")]
    for level, label, title in owners:
        L.add(bargauge(title, f"From the recording rule instance_{level}:gpumem_memory_used_bytes:sum: "
                       "the daemon's group totals where [processes] group_by exports them, else the "
                       "sum of per-process series. Top 15.",
                       refs([(f"topk(15, sum by ({label}) (instance_{level}:gpumem_memory_used_bytes:sum{{{INST}}}))",
                              f"{{{{{label}}}}}")], instant=True),
                       "bytes"), 6, 9)
    L.row("Memory health")
    L.add(stat("GPUs with uncorrected ECC errors", "GPUs whose volatile uncorrected ECC count is above 0 "
               "(since the driver loaded): GpuUncorrectedEccErrors. Drain and reset them.",
               refs([(f'count(sum by (instance, uuid) (gpumem_device_ecc_errors_total{{{INST}, '
                      f'severity="uncorrected", counter="volatile"}}) > 0) or vector(0)', "")]),
               "none", COUNT_BAD, "background"), 4, 4)
    L.add(stat("Row remap pending", "GPUs that remapped a row and need a reset to use the spare: GpuRowRemapPending.",
               refs([(f"count(gpumem_device_row_remap_pending{{{INST}}} == 1) or vector(0)", "")]),
               "none", thresholds((None, "green"), (1, "orange")), "background"), 4, 4)
    L.add(stat("Row remap failed", "GPUs with no spare row left: replace them (GpuRowRemapFailed).",
               refs([(f"count(gpumem_device_row_remap_failed{{{INST}}} == 1) or vector(0)", "")]),
               "none", COUNT_BAD, "background"), 4, 4)
    L.add(stat("Memory Xid events (1h)", "Memory-related Xid events (31, 48, 63, 64, 92, 94, 95) over the "
               "last hour, all hosts: GpuMemoryXid.",
               refs([(f"sum(increase(gpumem_device_xid_errors_total{{{INST}, {MEMORY_XIDS}}}[1h])) or vector(0)", "")]),
               "none", thresholds((None, "green"), (1, "orange")), decimals=0), 4, 4)
    L.add(timeseries("Corrected ECC errors per host", "Rate of corrected (single-bit) ECC errors per host: "
                     "harmless alone, the early sign of a failing GPU when it keeps rising.",
                     refs([(f'sum by (instance) (rate(gpumem_device_ecc_errors_total{{{INST}, '
                            f'severity="corrected", counter="volatile"}}[5m]))', "{{instance}}")]),
                     "cps"), 8, 8)
    L.add(timeseries("Hottest memory per host", "Highest memory (HBM) temperature of each host's GPUs.",
                     refs([(f"max by (instance) (gpumem_device_memory_temperature_celsius{{{INST}}})", "{{instance}}")]),
                     "celsius", min0=False), 8, 8)
    L.add(table("GPUs with memory problems", "GPUs with uncorrected ECC errors, a pending or failed row "
                "remap: what the runbook says to drain, reset or replace.",
                refs([
                    (f'sum by (job, instance, uuid) (gpumem_device_ecc_errors_total{{{INST}, severity="uncorrected", '
                     f'counter="volatile"}}) {IDX}', ""),
                    (f"gpumem_device_row_remap_pending{{{INST}}} {IDX}", ""),
                    (f"gpumem_device_row_remap_failed{{{INST}}} {IDX}", ""),
                ], instant=True, table=True),
                [("instance", "Host"), ("index", "GPU"), ("uuid", "UUID"), ("Value #A", "Uncorrected ECC"),
                 ("Value #B", "Remap pending"), ("Value #C", "Remap failed")],
                {"Value #A": "none", "Value #B": "none", "Value #C": "none"},
                links=GPU_LINK, merge=True), 8, 8)

    return dashboard("gpumemd-fleet", "gpumemd / Fleet overview",
                     "GPU memory across every host running gpumemd.", L.numbered())


HOLDER_COLORS = [
    override("live", color=fixed("green")),
    override("zombie", color=fixed("purple")),
    override("exited", color=fixed("orange")),
    override("unattributed", color=fixed("red")),
]


def per_gpu():
    L = Layout()
    L.row("Memory by holder")
    holder = timeseries(
        "GPU $uuid",
        "Used memory split by holder, stacked: live (running processes), zombie (state Z or D), "
        "exited (listed by NVML, gone from /proc) and unattributed (used memory no listed process "
        "accounts for). The stack adds up to the dashed 'used' line; 'total' is the GPU's memory.",
        refs([
            (f"gpumem_device_memory_held_bytes{{{DEV}}}", "{{holder}}"),
            (f"gpumem_device_memory_used_bytes{{{DEV}}}", "used"),
            (f"gpumem_device_memory_total_bytes{{{DEV}}}", "total"),
        ]),
        "bytes", stack=True,
        overrides=HOLDER_COLORS + [
            override("used", custom__stacking={"mode": "none", "group": "A"}, custom__fillOpacity=0,
                     custom__lineStyle={"fill": "dash", "dash": [10, 10]}, custom__lineWidth=2,
                     color=fixed("text")),
            override("total", custom__stacking={"mode": "none", "group": "A"}, custom__fillOpacity=0,
                     custom__lineWidth=2, color=fixed("dark-red")),
        ],
    )
    holder["repeat"] = "uuid"
    holder["repeatDirection"] = "h"
    holder["maxPerRow"] = 2
    L.add(holder, 12, 9)

    L.row("All selected GPUs")
    L.add(timeseries("Used", "Used / total per GPU. The GpuMemoryHigh alert (info) fires above 90 % for an hour: "
                     "normal where a server or job reserves its memory up front.",
                     refs([(f"gpumem:device_memory_used:ratio{{{DEV}}} {IDX}", "GPU {{index}} {{uuid}}")]),
                     "percentunit", thresh=PCT_THRESH), 12, 8)
    L.add(timeseries("Free", "Free memory per GPU. The GpuMemoryHeadroomLow alert (info) fires below 2 GiB for 30 "
                     "minutes; GpuMemoryFillingUp (critical) when it runs out within 30 minutes.",
                     refs([(f"gpumem_device_memory_free_bytes{{{DEV}}} {IDX}", "GPU {{index}} {{uuid}}")]),
                     "bytes", thresh=thresholds((None, "red"), (2147483648, "green"))), 12, 8)
    L.add(timeseries("Not released after exit", "Memory still used late_release_after its holder left "
                     "the process list (the driver has not given it back).",
                     refs([(f"gpumem_device_memory_unreleased_bytes{{{DEV}}} {IDX}", "GPU {{index}} {{uuid}}")]),
                     "bytes"), 8, 8)
    L.add(timeseries("Processes", "Processes with a context on each GPU, and those left out of the "
                     "per-process series by top_n / min_bytes (their memory still counts in the holder split).",
                     refs([(f"gpumem_device_processes{{{DEV}}} {IDX}", "GPU {{index}} processes"),
                           (f"gpumem_processes_not_exported{{{DEV}}} {IDX}", "GPU {{index}} not exported")]),
                     "none", fill=0), 8, 8)
    L.add(state_timeline("Device up", "0 when the GPU failed the poll (lost, driver error): GpuLost.",
                         refs([(f"gpumem_device_up{{{DEV}}} {IDX}", "GPU {{index}} {{uuid}}")])), 8, 8)

    L.row("Memory health")
    L.add(timeseries("ECC errors", "ECC errors since the driver loaded (NVML's volatile counters), by "
                     "severity. Uncorrected errors fire GpuUncorrectedEccErrors; a reset sets them back to 0.",
                     refs([(f'gpumem_device_ecc_errors_total{{{DEV}, counter="volatile"}} {IDX}',
                            "GPU {{index}} {{severity}}")]),
                     "none", fill=0), 8, 8)
    L.add(timeseries("Remapped rows / retired pages", "Memory repairs: rows remapped to spares by the "
                     "severity of the errors behind them (Ampere and newer), or pages retired by cause (older "
                     "GPUs). pending (1) needs a GPU reset (GpuRowRemapPending), failed (1) means replace the "
                     "GPU (GpuRowRemapFailed).",
                     refs([(f"(gpumem_device_remapped_rows{{{DEV}}} or gpumem_device_retired_pages{{{DEV}}}) {IDX}",
                            "GPU {{index}} {{severity}}{{cause}}"),
                           (f"(gpumem_device_row_remap_pending{{{DEV}}} or gpumem_device_retired_pages_pending{{{DEV}}}) {IDX}",
                            "GPU {{index}} pending"),
                           (f"gpumem_device_row_remap_failed{{{DEV}}} {IDX}", "GPU {{index}} failed")]),
                     "none", fill=0), 8, 8)
    L.add(timeseries("Memory temperature", "Memory (HBM) temperature per GPU, where the GPU reports it.",
                     refs([(f"gpumem_device_memory_temperature_celsius{{{DEV}}} {IDX}", "GPU {{index}} {{uuid}}")]),
                     "celsius", min0=False), 8, 8)
    L.add(timeseries("Xid events", "Critical Xid events per 5 minutes by code; the memory-related ones "
                     "(31, 48, 63, 64, 92, 94, 95) fire GpuMemoryXid. docs/runbook.md says what each asks for.",
                     refs([(f"increase(gpumem_device_xid_errors_total{{{DEV}}}[5m]) {IDX}", "GPU {{index}} Xid {{xid}}")]),
                     "none", fill=0), 24, 8)
    L.row("Inventory")
    L.add(table("Devices", "Identity of each GPU and MIG instance.",
                refs([(f"gpumem_device_memory_total_bytes{{{DEV}}} {INFO_ALL}", ""),
                      (f"gpumem_device_memory_reserved_bytes{{{DEV}}} {INFO_ALL}", "")], instant=True, table=True),
                [("instance", "Host"), ("index", "GPU"), ("name", "Model"), ("uuid", "UUID"),
                 ("pci_bus_id", "PCI bus"), ("mig_profile", "MIG profile"), ("parent_uuid", "Parent GPU"),
                 ("Value #A", "Total"), ("Value #B", "Reserved")],
                {"Value #A": "bytes", "Value #B": "bytes"}, merge=True), 16, 7)
    L.add(table("Driver", "NVML, driver and CUDA versions per host.",
                refs([(f"gpumem_driver_info{{{INST}}}", "")], instant=True, table=True),
                [("instance", "Host"), ("driver_version", "Driver"), ("nvml_version", "NVML"),
                 ("cuda_version", "CUDA")], {}, hide=["Value"]), 8, 7)
    return dashboard("gpumemd-gpu", "gpumemd / Per-GPU memory",
                     "One host's GPUs: used memory split by holder, free memory, processes.",
                     L.numbered(), instance_multi=False)


def _with_owner(expr):
    """Adds GPU index and process state to a per-process expression."""
    return (f"{expr}\n{IDX}\n"
            f"* {BY_PROC} group_left (state) gpumem_process_info")


def processes():
    L = Layout()
    L.row("Top processes")
    L.add(table(
        "Top 25 processes by GPU memory",
        "Per-process series (the daemon exports the top_n largest per GPU); 'Slurm job' is the "
        "slurm_job label.",
        refs([(_with_owner(f"topk(25, gpumem_process_memory_used_bytes{{{DEV}}})"), "")], instant=True, table=True),
        [("instance", "Host"), ("index", "GPU"), ("pid", "PID"), ("comm", "Command"), ("user", "User"),
         ("state", "State"), ("container_id", "Container ID"), ("pod_uid", "Pod UID"), ("unit", "Unit"),
         ("slurm_job", "Slurm job"), ("Value", "Memory"), ("uuid", "UUID")],
        {"Value": "bytes"}, sort="Memory", links=GPU_LINK,
    ), 24, 10)
    L.add(timeseries("Top 10 processes over time", "The 10 largest processes at each instant.",
                     refs([(f"topk(10, gpumem_process_memory_used_bytes{{{DEV}}})",
                            "{{instance}} pid {{pid}} {{comm}} ({{user}})")]),
                     "bytes", fill=0), 24, 9)

    L.row("Idle holders")
    L.add(table(
        "Processes holding memory with no SM activity",
        "gpumem_process_idle_seconds: time since the process last ran a kernel, for live holders on "
        "GPUs that sample utilisation. Long idle times with large memory are reclaim candidates.",
        refs([
            (f"topk(25, gpumem_process_idle_seconds{{{DEV}}}) * {BY_PROC} group_left (comm, user) gpumem_process_info {IDX}", ""),
            (f"(\n  max by (job, instance, uuid, pid) (gpumem_process_memory_used_bytes{{{DEV}}})\n"
             f"  and {BY_PROC} topk(25, gpumem_process_idle_seconds{{{DEV}}})\n)\n"
             f"* {BY_PROC} group_left (comm, user) gpumem_process_info {IDX}", ""),
        ], instant=True, table=True),
        [("instance", "Host"), ("index", "GPU"), ("pid", "PID"), ("comm", "Command"), ("user", "User"),
         ("Value #A", "Idle for"), ("Value #B", "Memory"), ("uuid", "UUID")],
        {"Value #A": "s", "Value #B": "bytes"}, sort="Idle for", merge=True,
    ), 24, 8)

    L.row("Totals per owner (each host's GPUs summed)")
    owners = [("user", "user", "Per user"), ("container_id", "container_id", "Per container (ID)"),
              ("slurm_job", "slurm_job", "Per Slurm job"), ("pod_uid", "pod_uid", "Per pod")]
    for level, label, title in owners:
        L.add(timeseries(title, f"instance_{level}:gpumem_memory_used_bytes:sum (recording rule). "
                         "Not filtered by GPU.",
                         refs([(f"instance_{level}:gpumem_memory_used_bytes:sum{{{INST}}}",
                                f"{{{{{label}}}}} on {{{{instance}}}}")]),
                         "bytes", fill=0, legend_calcs=("lastNotNull",)), 12, 8)
    return dashboard("gpumemd-processes", "gpumemd / Top processes",
                     "Who holds GPU memory: processes with their user, container, pod, unit and Slurm job.",
                     L.numbered())


def leaks():
    L = Layout()
    grow = f"gpumem_process_memory_growth_bytes_per_second{{{DEV}}}"
    names = f"* {BY_PROC} group_left (comm, user) gpumem_process_info {IDX}"
    L.row("Suspected leaks")
    L.add(stat("Suspected leaks", "Processes whose memory grows steadily over the leak window "
               "(gpumem_process_leak_suspected == 1).",
               refs([(f"count(gpumem_process_leak_suspected{{{DEV}}} == 1) or vector(0)", "")]),
               "none", thresholds((None, "green"), (1, "orange")), "background"), 4, 8)
    L.add(table(
        "Leak candidates",
        "Suspected leaks, their growth rate (a robust trend over leak_window), current memory, and "
        "how long until the GPU is full if the growth continues.",
        refs([
            (f"({grow} and {LEAKY})\n{names}", ""),
            (f"(max by (job, instance, uuid, pid) (gpumem_process_memory_used_bytes{{{DEV}}}) and {LEAKY})\n{names}", ""),
            (f"(gpumem_device_memory_free_bytes{{{DEV}}} / {BY_DEV} group_right () ({grow} > 0 and {LEAKY}))\n{names}", ""),
        ], instant=True, table=True),
        [("instance", "Host"), ("index", "GPU"), ("pid", "PID"), ("comm", "Command"), ("user", "User"),
         ("Value #A", "Growth"), ("Value #B", "Memory"), ("Value #C", "GPU full in"), ("uuid", "UUID")],
        {"Value #A": "binBps", "Value #B": "bytes", "Value #C": "s"}, sort="Growth", merge=True,
        cell_thresholds={"Value #C": thresholds((None, "red"), (3600, "orange"), (86400, "green"))},
    ), 20, 8)
    L.add(timeseries("Memory of suspected leakers", "Memory of the processes while they are flagged.",
                     refs([(f"gpumem_process_memory_used_bytes{{{DEV}}} and {LEAKY}",
                            "{{instance}} pid {{pid}} {{comm}} ({{user}})")]),
                     "bytes", fill=0), 12, 9)
    L.add(timeseries("Growth rate, top 10 processes", "gpumem_process_memory_growth_bytes_per_second "
                     "of the 10 fastest-growing processes, flagged or not. A caching allocator warming up "
                     "grows fast and then stops; a leak keeps going.",
                     refs([(f"topk(10, {grow})", "{{instance}} pid {{pid}}")]),
                     "binBps", min0=False, fill=0), 12, 9)

    L.row("Memory nobody releases")
    L.add(timeseries("Held by exited and zombie processes", "exited: NVML still lists the process but it "
                     "is gone from /proc; zombie: state Z or D. GpuMemoryHeldByExitedProcess fires after 2 minutes.",
                     refs([(f'gpumem_device_memory_held_bytes{{{DEV}, holder=~"exited|zombie"}} {IDX}',
                            "GPU {{index}} {{holder}} ({{instance}})")]),
                     "bytes", fill=0), 12, 8)
    L.add(timeseries("Not released after exit / unattributed",
                     "unreleased: still used late_release_after its holder left the list; unattributed: "
                     "used memory that no listed process accounts for.",
                     refs([(f"gpumem_device_memory_unreleased_bytes{{{DEV}}} {IDX}", "GPU {{index}} not released ({{instance}})"),
                           (f'gpumem_device_memory_held_bytes{{{DEV}, holder="unattributed"}} {IDX}',
                            "GPU {{index}} unattributed ({{instance}})")]),
                     "bytes", fill=0), 12, 8)
    return dashboard("gpumemd-leaks", "gpumemd / Leak candidates",
                     "Processes whose GPU memory keeps growing, and memory that is not given back.",
                     L.numbered())


def alerts():
    L = Layout()
    prom = f'ALERTS{{alertname=~"Gpu.*", {INST}}}'
    own = f"gpumem_alerts{{{INST}}}"
    L.row("Now")
    L.add(stat("Firing (Prometheus)", "Firing alerts from deploy/prometheus/gpumemd.rules.yml.",
               refs([(f'count({prom[:-1]}, alertstate="firing"}}) or vector(0)', "")]),
               "none", thresholds((None, "green"), (1, "red")), "background"), 6, 4)
    L.add(stat("Pending (Prometheus)", "Alerts whose condition holds but whose `for` has not elapsed.",
               refs([(f'count({prom[:-1]}, alertstate="pending"}}) or vector(0)', "")]),
               "none", thresholds((None, "green"), (1, "orange")), "background"), 6, 4)
    L.add(stat("Firing (gpumemd)", "Firing alerts of the daemons' own rules (gpumem_alerts).",
               refs([(f'count({own[:-1]}, alertstate="firing"}}) or vector(0)', "")]),
               "none", thresholds((None, "green"), (1, "red")), "background"), 6, 4)
    L.add(stat("Pending (gpumemd)", "Pending alerts of the daemons' own rules.",
               refs([(f'count({own[:-1]}, alertstate="pending"}}) or vector(0)', "")]),
               "none", thresholds((None, "green"), (1, "orange")), "background"), 6, 4)
    L.add(table("Alerts evaluated by Prometheus", "ALERTS for the gpumemd rules.",
                refs([(prom, "")], instant=True, table=True),
                [("alertname", "Alert"), ("alertstate", "State"), ("severity", "Severity"),
                 ("instance", "Host"), ("index", "GPU"), ("pid", "PID"), ("comm", "Command"),
                 ("user", "User"), ("uuid", "UUID")],
                {}, hide=["Value", "holder"], sort="Severity"), 24, 8)
    L.add(table("Alerts evaluated by gpumemd", "gpumem_alerts: the daemons' own rules "
                "(src/judge/rules/defaults.toml plus the site's [[rule]]s). Quota rules have no GPU.",
                refs([(own, "")], instant=True, table=True),
                [("alertname", "Alert"), ("alertstate", "State"), ("severity", "Severity"),
                 ("instance", "Host"), ("gpu", "GPU"), ("pid", "PID"), ("comm", "Command"),
                 ("user", "User"), ("group_by", "Group by"), ("group", "Group"), ("uuid", "UUID")],
                {}, hide=["Value", "holder"], sort="Severity"), 24, 8)
    L.row("History")
    L.add(timeseries("Prometheus alerts by name and state", "",
                     refs([(f"count by (alertname, alertstate) ({prom})", "{{alertname}} {{alertstate}}")]),
                     "none", fill=0, legend_calcs=("max",)), 12, 8)
    L.add(timeseries("gpumemd alerts by name and state", "",
                     refs([(f"count by (alertname, alertstate) ({own})", "{{alertname}} {{alertstate}}")]),
                     "none", fill=0, legend_calcs=("max",)), 12, 8)
    return dashboard("gpumemd-alerts", "gpumemd / Alerts",
                     "Pending and firing GPU memory alerts, from Prometheus' rules and from the daemons' own.",
                     L.numbered(), uuid=False)


def exporter():
    L = Layout()
    L.row("Targets")
    L.add(state_timeline("Scrape up", "Prometheus' up for each gpumemd target: GpumemdDown after 2 minutes down.",
                         refs([(f"up{{{INST}}}", "{{instance}}")])), 12, 6)
    L.add(state_timeline("NVML up", "gpumem_nvml_up: 0 while the driver library is missing or not "
                         "answering; GpumemdNvmlDown after 5 minutes.",
                         refs([(f"gpumem_nvml_up{{{INST}}}", "{{instance}}")])), 12, 6)
    L.add(state_timeline("Poll success", "gpumem_poll_success of the latest poll: GpumemdPollFailing after 1 minute of 0.",
                         refs([(f"gpumem_poll_success{{{INST}}}", "{{instance}}")]),
                         mappings=[{"type": "value", "options": {
                             "0": {"text": "failed", "color": "red", "index": 0},
                             "1": {"text": "ok", "color": "green", "index": 1}}}]), 12, 6)
    L.add(timeseries("Data age", "Seconds since the latest successful poll, as Prometheus sees it "
                     "(includes clock skew between the hosts). GpumemdStale fires above 60 s for 2 minutes.",
                     refs([(f"time() - gpumem_last_poll_timestamp_seconds{{{INST}}}", "{{instance}}")]),
                     "s", thresh=thresholds((None, "green"), (60, "red")), fill=0), 12, 6)

    L.row("Polls")
    L.add(timeseries("Poll duration", "gpumem_poll_duration_seconds is the latest poll's duration; "
                     "max over the interval catches slow polls between scrapes. The NVML part is the time "
                     "inside the driver; the rest is gpumemd's own work.",
                     refs([(f"max_over_time(gpumem_poll_duration_seconds{{{INST}}}[$__rate_interval])", "{{instance}} max"),
                           (f"gpumem_poll_duration_seconds{{{INST}}}", "{{instance}} latest"),
                           (f"gpumem_poll_source_duration_seconds{{{INST}}}", "{{instance}} in NVML")]),
                     "s", fill=0), 8, 8)
    L.add(timeseries("Polls per second", "Should equal 1 / [poll] interval.",
                     refs([(f"rate(gpumem_polls_total{{{INST}}}[$__rate_interval])", "{{instance}}")]),
                     "ops", fill=0), 8, 8)
    L.add(timeseries("Poll errors and overruns", "Errors by reason (timeout, nvml_unavailable, failed, "
                     "device, panic) and overruns (ticks skipped while a poll was still running), per second.",
                     refs([(f"sum by (instance, reason) (rate(gpumem_poll_errors_total{{{INST}}}[$__rate_interval]))",
                            "{{instance}} {{reason}}"),
                           (f"rate(gpumem_poll_overruns_total{{{INST}}}[$__rate_interval])", "{{instance}} overruns")]),
                     "ops", fill=0), 8, 8)

    L.row("Scrapes")
    L.add(timeseries("Samples per scrape", "Series gpumemd exports: grows with GPUs x processes "
                     "(bounded by [processes] top_n).",
                     refs([(f"scrape_samples_scraped{{{INST}}}", "{{instance}}")]),
                     "none", fill=0), 12, 7)
    L.add(timeseries("Scrape duration", "How long Prometheus takes to scrape gpumemd; a scrape never "
                     "waits for NVML.",
                     refs([(f"scrape_duration_seconds{{{INST}}}", "{{instance}}")]),
                     "s", fill=0), 12, 7)

    L.row("Versions and config")
    build = f"on (job, instance) group_left (version, revision) gpumem_build_info"
    L.add(table("gpumemd build and config", "gpumemd's version, and whether its latest config (re)load succeeded.",
                refs([(f"gpumem_build_info{{{INST}}}", ""),
                      (f"gpumem_config_last_reload_successful{{{INST}}} * {build}", ""),
                      (f"gpumem_config_last_reload_success_timestamp_seconds{{{INST}}} * 1000 * {build}", "")],
                     instant=True, table=True),
                [("instance", "Host"), ("version", "Version"), ("revision", "Revision"),
                 ("Value #B", "Config loaded"), ("Value #C", "Last good config load")],
                {"Value #B": "bool_yes_no", "Value #C": "dateTimeAsIso"},
                hide=["Value #A"], merge=True), 14, 6)
    L.add(table("Driver", "NVML, driver and CUDA versions per host (absent while NVML is down).",
                refs([(f"gpumem_driver_info{{{INST}}}", "")], instant=True, table=True),
                [("instance", "Host"), ("driver_version", "Driver"), ("nvml_version", "NVML"),
                 ("cuda_version", "CUDA")], {}, hide=["Value"]), 10, 6)
    return dashboard("gpumemd-exporter", "gpumemd / Exporter health",
                     "Is gpumemd itself healthy: scrapes, NVML, polls, errors and versions.",
                     L.numbered(), uuid=False)


DASHBOARDS = {
    "gpumemd-fleet.json": fleet,
    "gpumemd-gpu.json": per_gpu,
    "gpumemd-processes.json": processes,
    "gpumemd-leaks.json": leaks,
    "gpumemd-alerts.json": alerts,
    "gpumemd-exporter.json": exporter,
}


def render():
    return {name: json.dumps(build(), indent=2) + "\n" for name, build in DASHBOARDS.items()}


def main(argv):
    check = "--check" in argv
    stale = []
    OUT.mkdir(exist_ok=True)
    for name, text in render().items():
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
    if check:
        known = set(DASHBOARDS)
        extra = [p.name for p in OUT.glob("*.json") if p.name not in known]
        if stale or extra:
            print("grafana dashboards are out of date; run python3 grafana/build-dashboards.py")
            for s in stale + extra:
                print("  " + s)
            return 1
        print(f"{len(DASHBOARDS)} dashboards up to date")
    else:
        print(f"wrote {len(DASHBOARDS)} dashboards to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
