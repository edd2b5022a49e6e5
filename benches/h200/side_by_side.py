"""Side-by-side footprint of GPU memory exporters on one GPU machine.

Called by side-by-side.sh (which documents the usage); runs every step
itself so that one device call is enough:

1. starts N PyTorch processes that each hold some GPU memory and sleep;
2. for each exporter present (gpumemd, nvitop-exporter, all-smi), one at a
   time: starts it, waits until it serves, lets it settle, then measures
   - idle CPU over IDLE seconds (utime+stime deltas from /proc/PID/stat of
     the exporter and its descendants; no scrapes meanwhile),
   - RSS (VmRSS, VmHWM, summed over the process tree),
   - scrape latency over SCRAPES sequential scrapes (new TCP connection per
     scrape, Python http.client, time.perf_counter), p50/p99,
   - CPU per scrape (CPU delta over the scrapes / count, raw and less the
     idle rate over the same time), series count and body size;
3. a baseline: `nvidia-smi --query-gpu ... --format=csv` plus
   `--query-compute-apps` per "scrape" (what a shell-out exporter costs);
4. writes OUT/side-by-side.json (raw), OUT/side-by-side.md (a table with
   ratios against gpumemd, and the targets) and OUT/NAME.prom (each
   exporter's last scrape).

Environment overrides (for trying it without a GPU): SBS_IDLE (seconds),
SBS_SCRAPES, SBS_PROCS, SBS_WORKLOAD (a shell command run per workload
process, with READY set to the file it must create once it holds memory),
SBS_GPUMEMD_ARGS (extra gpumemd arguments, e.g. --demo), SBS_NVIDIA_SMI
(the nvidia-smi to run), SBS_BUDGET (seconds the whole run may take),
SBS_SCRAPE_CLIENT (the `scrape` example's binary; default BIN_DIR/scrape,
else Python's http.client).
"""

import http.client
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time

BIN, OUT = sys.argv[1], sys.argv[2]
IDLE = float(os.environ.get("SBS_IDLE", "60"))
SCRAPES = int(os.environ.get("SBS_SCRAPES", "1000"))
PROCS = int(os.environ.get("SBS_PROCS", "8"))
BUDGET = float(os.environ.get("SBS_BUDGET", "540"))
NVSMI = os.environ.get("SBS_NVIDIA_SMI", "nvidia-smi")
# Time to let an exporter finish its first polls before the idle window.
SETTLE = float(os.environ.get("SBS_SETTLE", "5"))
# Scrapes stop early after this long, so a slow exporter cannot eat the budget.
SCRAPE_CAP_S = float(os.environ.get("SBS_SCRAPE_CAP", "60"))
# (GPUs, processes per GPU) of the simulated scrape-latency sweep.
SWEEP = [(8, 1), (8, 8), (8, 32), (8, 64), (8, 128), (8, 256), (8, 1000), (64, 1000)]
SWEEP_SCRAPES = int(os.environ.get("SBS_SWEEP_SCRAPES", "300"))
HZ = os.sysconf("SC_CLK_TCK")
T0 = time.monotonic()
TMP = "/tmp/sbs"
os.makedirs(TMP, exist_ok=True)
os.makedirs(OUT, exist_ok=True)


def log(*a):
    print(f"[{time.monotonic() - T0:6.1f}s]", *a, flush=True)


def tree(root):
    """The pid and all its descendants (from /proc/*/stat ppid)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
                parent[int(d)] = int(s[s.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError):
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(c for c, pp in parent.items() if pp == p)
    return out


def cpu_seconds(root):
    """utime+stime (all threads, exited ones too) of the tree, seconds."""
    total = 0
    for p in tree(root):
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
            fields = s[s.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            pass
    return total / HZ


def sched(root):
    """Scheduler figures of the tree's live threads, from
    /proc/PID/task/TID/schedstat: nanoseconds on a CPU, nanoseconds waiting
    on a run queue, and times scheduled in. Nanoseconds where the tick
    count of `cpu_seconds` has 10 ms steps; threads that exited between two
    readings are missing from the second, so this is for short windows."""
    on = wait = slices = 0
    for p in tree(root):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    a, b, c = (int(x) for x in f.read().split()[:3])
            except (OSError, ValueError):
                continue
            on, wait, slices = on + a, wait + b, slices + c
    return on, wait, slices


def per(n, before, after):
    """`sched` deltas over `n` events: microseconds on CPU and waiting on a
    run queue, and times scheduled in, each per event."""
    d = [y - x for x, y in zip(before, after)]
    return {"cpu_us": round(d[0] / 1e3 / n, 2), "runq_us": round(d[1] / 1e3 / n, 2),
            "switches": round(d[2] / n, 2)}


def memory(root):
    """VmRSS and VmHWM (KiB) summed over the tree, and its thread count."""
    rss = hwm = threads = 0
    for p in tree(root):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    if k == "VmRSS":
                        rss += int(v.split()[0])
                    elif k == "VmHWM":
                        hwm += int(v.split()[0])
                    elif k == "Threads":
                        threads += int(v.split()[0])
        except (OSError, ValueError):
            pass
    return rss, hwm, threads


def get(port, path="/metrics", timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def wait_ready(port, path, proc, limit=45):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        try:
            st, body = get(port, path, timeout=2)
            if st == 200 and body:
                return None
        except OSError:
            pass
        time.sleep(0.2)
    return f"not serving {path} after {limit} s"


def pct(sorted_vals, q):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, int(round(q * len(sorted_vals))) - 1))
    return sorted_vals[i]


def series(body):
    return sum(1 for line in body.decode("utf-8", "replace").splitlines() if line and not line.startswith("#"))


def stop(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()[-n:]
    except OSError:
        return []


def measure(name, cmd, port, env=None, ready_path="/metrics", version=None, idle=True, keep_body=True,
            scrapes=SCRAPES, cap=SCRAPE_CAP_S, settle=SETTLE, poll_timing=0):
    """Starts one exporter and measures it; returns its record. Without
    `idle`, only the scrapes are measured (the idle fields are zero).
    `poll_timing` > 0: afterwards, that many seconds of gpumemd's own poll
    timing (total and time inside the source), read once a second."""
    rec = {"name": name, "version": version, "command": cmd, "port": port}
    logf = f"{TMP}/{name}.log"
    log(f"{name}: starting: {' '.join(cmd)}")
    t = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=open(logf, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        err = wait_ready(port, ready_path, proc)
        if err:
            rec["error"] = err
            rec["log_tail"] = tail(logf)
            log(f"{name}: {err}")
            for line in rec["log_tail"]:
                log(f"{name}:   {line}")
            return rec
        rec["ready_s"] = round(time.monotonic() - t, 2)
        time.sleep(settle)
        # Idle: no scrapes at all, the exporter's own interval work only.
        c0, w0, s0 = cpu_seconds(proc.pid), time.monotonic(), sched(proc.pid)
        time.sleep(IDLE if idle else 0.01)
        c1, w1, s1 = cpu_seconds(proc.pid), time.monotonic(), sched(proc.pid)
        idle_rate = (c1 - c0) / (w1 - w0) if idle else 0.0
        rss, hwm, threads = memory(proc.pid)
        rec["idle"] = {
            "seconds": round(w1 - w0, 2),
            "cpu_seconds": round(c1 - c0, 4),
            "cpu_percent": round(100 * idle_rate, 4),
            "tick_resolution_percent": round(100 / HZ / (w1 - w0), 4),
            "sched_cpu_percent": round(100 * (s1[0] - s0[0]) / 1e9 / (w1 - w0), 4),
        }
        rec["rss_kib"], rec["hwm_kib"], rec["threads"] = rss, hwm, threads
        log(f"{name}: idle {rec['idle']['cpu_percent']}% of a core, RSS {rss} KiB, {threads} threads")
        # Scrapes, sequential, one connection each: with BIN/scrape (the
        # `scrape` example, a Rust client) when present, so the client's
        # own cost stays out of sub-millisecond figures; else Python.
        c0, w0, s0 = cpu_seconds(proc.pid), time.monotonic(), sched(proc.pid)
        client = os.environ.get("SBS_SCRAPE_CLIENT") or os.path.join(BIN, "scrape")
        if os.access(client, os.X_OK):
            r = subprocess.run([client, f"127.0.0.1:{port}", "/metrics", str(scrapes), "--cap-s", str(cap)],
                               capture_output=True, text=True)
            c1, w1, s1 = cpu_seconds(proc.pid), time.monotonic(), sched(proc.pid)
            try:
                sc = json.loads(r.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                sc = {"count": 0, "errors": 1, "p50_ms": None, "p99_ms": None, "mean_ms": None, "max_ms": None}
                log(f"{name}: scrape client failed: {r.stderr.strip()[-300:]}")
            n = max(1, sc["count"])
            st, body = get(port)
            rec["client"] = "rust (examples/scrape.rs)"
        else:
            lat, errors, body = [], 0, b""
            for _ in range(scrapes):
                s = time.perf_counter()
                try:
                    st, b = get(port)
                    if st != 200:
                        errors += 1
                    else:
                        body = b
                except OSError:
                    errors += 1
                lat.append(time.perf_counter() - s)
                if time.monotonic() - w0 > cap:
                    break
            c1, w1, s1 = cpu_seconds(proc.pid), time.monotonic(), sched(proc.pid)
            lat.sort()
            n = len(lat)
            sc = {"count": n, "errors": errors, "p50_ms": round(1e3 * pct(lat, 0.50), 3),
                  "p99_ms": round(1e3 * pct(lat, 0.99), 3), "mean_ms": round(1e3 * statistics.fmean(lat), 3),
                  "max_ms": round(1e3 * lat[-1], 3)}
            rec["client"] = "python http.client"
        rss2, hwm2, _ = memory(proc.pid)
        rec["scrapes"] = {
            "count": sc["count"],
            "errors": sc["errors"],
            "p50_ms": sc["p50_ms"],
            "p99_ms": sc["p99_ms"],
            "mean_ms": sc["mean_ms"],
            "max_ms": sc["max_ms"],
            "seconds": round(w1 - w0, 2),
            "cpu_ms_per_scrape_raw": round(1e3 * (c1 - c0) / n, 4),
            # Less the exporter's own background work over the same time.
            "cpu_ms_per_scrape": round(1e3 * max(0.0, (c1 - c0) - idle_rate * (w1 - w0)) / n, 4),
            # The same from the scheduler, in microseconds (idle work
            # included), with the run-queue wait and switches per scrape.
            "sched_per_scrape": per(n, s0, s1),
        }
        rec["rss_after_scrapes_kib"], rec["hwm_after_scrapes_kib"] = rss2, hwm2
        rec["series"] = series(body)
        rec["body_bytes"] = len(body)
        # The last body, for reading the series themselves (one file each:
        # the device run returns at most 8 files).
        if keep_body:
            with open(os.path.join(OUT, f"{name}.prom"), "wb") as f:
                f.write(body)
        log(f"{name}: scrapes p50 {rec['scrapes']['p50_ms']} ms p99 {rec['scrapes']['p99_ms']} ms, {rec['series']} series, "
            f"{len(body)} bytes, per scrape {rec['scrapes']['sched_per_scrape']}")
        if name == "gpumemd":
            for line in body.decode().splitlines():
                if line.startswith(("gpumem_poll_duration_seconds", "gpumem_poll_source_duration_seconds",
                                    "gpumem_device_processes", "gpumem_nvml_up")):
                    rec.setdefault("self_metrics", []).append(line)
        if poll_timing > 0:
            rec["poll_timing"] = read_poll_timing(port, poll_timing)
            log(f"{name}: poll timing {rec['poll_timing']}")
    finally:
        stop(proc)
        rec.setdefault("log_tail", tail(logf, 5))
    return rec


def gauge(body, name):
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def read_poll_timing(port, seconds):
    """gpumemd's latest-poll gauges read once a second: the medians of the
    poll's duration, the part inside the source (NVML) and the rest."""
    seen = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            st, body = get(port)
        except OSError:
            st = 0
        if st == 200:
            n = gauge(body, "gpumem_polls_total")
            d = gauge(body, "gpumem_poll_duration_seconds")
            src = gauge(body, "gpumem_poll_source_duration_seconds")
            if None not in (n, d, src):
                seen[n] = (d, src)
        time.sleep(1.0)
    if not seen:
        return {"polls": 0}
    total = statistics.median(d for d, _ in seen.values())
    src = statistics.median(s for _, s in seen.values())
    own = statistics.median(d - s for d, s in seen.values())
    return {"polls": len(seen), "poll_ms": round(1e3 * total, 3), "source_ms": round(1e3 * src, 3),
            "own_ms": round(1e3 * own, 3)}


def nvidia_smi_baseline():
    """What an exporter that shells out to nvidia-smi per scrape costs."""
    queries = [
        [NVSMI, "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free,utilization.gpu",
         "--format=csv,noheader,nounits"],
        [NVSMI, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"],
    ]
    rec = {"name": "nvidia-smi (per scrape)", "command": [" ".join(q) for q in queries]}
    lat, cpu, maxrss, lines, errors = [], 0.0, 0, 0, 0
    start = time.monotonic()
    cap = min(SCRAPE_CAP_S, 45.0)
    n_target = min(SCRAPES, 300)
    while len(lat) < n_target and time.monotonic() - start < cap:
        s = time.perf_counter()
        out = 0
        for q in queries:
            try:
                p = subprocess.Popen(q, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            except OSError as e:
                rec["error"] = str(e)
                return rec
            data = p.stdout.read()
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = status
            errors += status != 0
            cpu += ru.ru_utime + ru.ru_stime
            maxrss = max(maxrss, ru.ru_maxrss)
            out += data.count(b"\n")
        lat.append(time.perf_counter() - s)
        lines = out
    lat.sort()
    n = len(lat)
    if not n:
        rec["error"] = "no run finished"
        return rec
    rec["scrapes"] = {
        "count": n,
        "errors": errors,
        "p50_ms": round(1e3 * pct(lat, 0.50), 3),
        "p99_ms": round(1e3 * pct(lat, 0.99), 3),
        "mean_ms": round(1e3 * statistics.fmean(lat), 3),
        "max_ms": round(1e3 * lat[-1], 3),
        "cpu_ms_per_scrape": round(1e3 * cpu / n, 3),
        "cpu_ms_per_scrape_raw": round(1e3 * cpu / n, 3),
    }
    # Polled once a second, like the daemons' interval.
    rec["idle"] = {"cpu_percent": round(100 * cpu / n, 4), "derived": "CPU of one query set per second"}
    rec["rss_kib"] = maxrss
    rec["series"] = lines
    rec["body_bytes"] = None
    log(f"nvidia-smi: {n} runs, p50 {rec['scrapes']['p50_ms']} ms, {rec['scrapes']['cpu_ms_per_scrape']} ms CPU each")
    return rec


def fleet_toml(gpus, per_gpu):
    """A scenario like `scenario::large(gpus, per_gpu)` (src/collect/source/scenario.rs)."""
    out = [f'name = "{gpus}x{per_gpu}"', "seed = 8", 'granularity = "1MiB"', ""]
    for _ in range(gpus):
        out += ["[[gpu]]", 'name = "NVIDIA H200"', 'memory = "141GiB"', 'reserved = "600MiB"', ""]
    for g in range(gpus):
        for i in range(per_gpu):
            out += ["[[process]]", f"gpu = {g}", f"pid = {100000 + g * per_gpu + i}", f'comm = "worker-{i % 16}"',
                    f'user = "user{i % 8}"', f"uid = {2000 + i % 8}", f'job = "{9000 + i % 32}"',
                    f'memory = "{64 + (i * 37) % 128}MiB"', 'jitter = "1MiB"', f"sm_util = {(i % 5) * 20}", ""]
    return "\n".join(out)


def start_workload():
    """PROCS processes holding GPU memory (1 GiB + 128 MiB x i) and sleeping."""
    code = (
        "import os,sys,time,torch\n"
        "i=int(sys.argv[1]); n=(1<<30)+(i<<27)\n"
        "x=torch.empty(n,dtype=torch.uint8,device='cuda'); x.fill_(1); torch.cuda.synchronize()\n"
        "open(os.environ['READY'],'w').write(str(os.getpid()))\n"
        "time.sleep(900)\n"
    )
    custom = os.environ.get("SBS_WORKLOAD")
    procs = []
    for i in range(PROCS):
        ready = f"{TMP}/ready-{i}"
        if os.path.exists(ready):
            os.remove(ready)
        env = dict(os.environ, READY=ready)
        cmd = ["bash", "-c", custom] if custom else [sys.executable, "-c", code, str(i)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(f"{TMP}/workload-{i}.log", "w"), start_new_session=True))
    end = time.monotonic() + 120
    while time.monotonic() < end:
        ready = sum(os.path.exists(f"{TMP}/ready-{i}") for i in range(PROCS))
        if ready == PROCS or all(p.poll() is not None for p in procs):
            break
        time.sleep(0.5)
    ready = sum(os.path.exists(f"{TMP}/ready-{i}") for i in range(PROCS))
    log(f"workload: {ready}/{PROCS} processes hold memory")
    return procs, ready


def version(cmd, env=None):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (r.stdout or r.stderr).strip()
    return text.splitlines()[0] if r.returncode == 0 and text else None


def table(doc):
    ex = doc["exporters"]
    base = next((e for e in ex if e["name"] == "gpumemd" and "idle" in e), None)

    def idle_of(x):
        # Below one clock tick over the window: use the tick as an upper
        # bound, so a ratio against it is a lower bound (shown as ">=").
        i = x["idle"]
        return i["cpu_percent"] or i.get("tick_resolution_percent")

    def ratio(e, get):
        try:
            if get is idle_of and e is not base and e["idle"].get("cpu_seconds") == 0:
                return "-"  # neither is above one tick: no ratio
            a, b = get(e), get(base)
            bound = get is idle_of and base["idle"]["cpu_seconds"] == 0 and e is not base
            return (">=" if bound else "") + f"{a / b:.1f}x"
        except (TypeError, KeyError, ZeroDivisionError):
            return "-"

    def f(v, spec):
        return "-" if v is None else format(v, spec)

    rows = [
        "| exporter | version | idle CPU, % of a core | vs gpumemd | RSS MiB | vs gpumemd | scrape p50 ms | p99 ms | vs gpumemd (p50) | CPU ms per scrape | series | body KiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in ex:
        if "error" in e:
            rows.append(f"| {e['name']} | {e.get('version') or '-'} | failed: {e['error']} | | | | | | | | | |")
            continue
        idle = idle_of
        rss = lambda x: x["rss_kib"]  # noqa: E731
        p50 = lambda x: x["scrapes"]["p50_ms"]  # noqa: E731
        rows.append(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                e["name"], e.get("version") or "-",
                f(e["idle"]["cpu_percent"], ".3f") + (" (derived)" if e["idle"].get("derived") else ""),
                ratio(e, idle), f(e["rss_kib"] / 1024, ".1f"), ratio(e, rss),
                f(e["scrapes"]["p50_ms"], ".3f"), f(e["scrapes"]["p99_ms"], ".3f"), ratio(e, p50),
                f(e["scrapes"]["cpu_ms_per_scrape"], ".3f"), e.get("series"),
                "-" if e.get("body_bytes") is None else f(e["body_bytes"] / 1024, ".1f"),
            )
        )
    lines = [
        "# Side-by-side: GPU memory exporters on one machine",
        "",
        f"Date (UTC): {doc['date']}. Machine: {doc['machine']}. Workload: {doc['workload']}.",
        f"Idle window {IDLE:.0f} s per exporter, no scrapes; then up to {SCRAPES} sequential scrapes "
        f"({(base or {}).get('client', 'python http.client')}, a new connection each, no compression). CPU from /proc/PID/stat "
        f"utime+stime of the process tree (resolution 1/{HZ} s); RSS is VmRSS of the tree after the idle window. "
        "CPU per scrape is the CPU over the scrapes less the idle rate, per scrape. Ratios are the peer's "
        "value over gpumemd's (higher = gpumemd better).",
        "",
        *rows,
        "",
    ]
    if base:
        lines.append("## Targets")
        lines.append("")
        lines.append(f"- RSS with one GPU <= 10 MiB: {base['rss_kib'] / 1024:.1f} MiB -> "
                     f"{'met' if base['rss_kib'] <= 10 * 1024 else 'NOT met'}")
        for e in ex:
            if e is base or "error" in e or e["name"].startswith("nvidia-smi"):
                continue
            if e["idle"].get("cpu_seconds") == 0:
                lines.append(f"- idle CPU vs {e['name']}: both below one clock tick; lengthen SBS_IDLE")
                rs = e["scrapes"]["p50_ms"] / base["scrapes"]["p50_ms"]
                lines.append(f"- scrape >= 10x faster than {e['name']} (p50): {rs:.1f}x -> "
                             f"{'met' if rs >= 10 else 'NOT met'}")
                continue
            ri = idle_of(e) / idle_of(base)
            rs = e["scrapes"]["p50_ms"] / base["scrapes"]["p50_ms"]
            below = base["idle"]["cpu_seconds"] == 0
            lines.append(f"- idle CPU >= 20x less than {e['name']}: {'>=' if below else ''}{ri:.1f}x -> "
                         + ("met" if ri >= 20 else "not shown (gpumemd below one tick; lengthen SBS_IDLE)" if below
                            else "NOT met"))
            lines.append(f"- scrape >= 10x faster than {e['name']} (p50): {rs:.1f}x -> {'met' if rs >= 10 else 'NOT met'}")
        s = base["scrapes"]
        lines.append(f"- gpumemd scrape p50 {s['p50_ms']} ms / p99 {s['p99_ms']} ms at this size "
                     "(the < 0.3 / < 1 ms target is for 8 GPUs x 64 processes; see BENCHMARKS.md)")
        lines.append("")
    sim = doc.get("simulated_8x64")
    if sim and "scrapes" in sim:
        sc = sim["scrapes"]
        ok = sc["p50_ms"] < 0.3 and sc["p99_ms"] < 1.0
        lines.append(f"Simulated 8 GPUs x 64 processes (`gpumemd --demo`, same client): scrape p50 {sc['p50_ms']} ms, "
                     f"p99 {sc['p99_ms']} ms over {sc['count']} scrapes, {sim['series']} series, "
                     f"{sim['body_bytes'] / 1024:.1f} KiB -> target p50 < 0.3 / p99 < 1 ms {'met' if ok else 'NOT met'}.")
        lines.append("")
    elif sim:
        lines.append(f"Simulated 8 GPUs x 64 processes: failed: {sim.get('error')}")
        lines.append("")
    if base and base.get("poll_timing", {}).get("polls"):
        pt = base["poll_timing"]
        ok = pt["own_ms"] <= pt["source_ms"]
        lines.append(f"gpumemd poll (median of {pt['polls']} polls): {pt['poll_ms']} ms, of which {pt['source_ms']} ms "
                     f"inside NVML and {pt['own_ms']} ms its own work -> target own work <= NVML time "
                     f"{'met' if ok else 'NOT met'}.")
        lines.append("")
    if doc.get("sweep"):
        lines += ["## Simulated fleets (`gpumemd --demo FILE`, scrapes only)", "",
                  "| GPUs x processes | processes | scrape p50 ms | p99 ms | CPU ms per scrape | series | body KiB "
                  "| poll ms (own / source) | RSS MiB |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in doc["sweep"]:
            if "error" in r:
                lines.append(f"| {r['gpus']} x {r['per_gpu']} | {r['gpus'] * r['per_gpu']} | failed: {r['error']} "
                             "| | | | | | |")
                continue
            pt = r.get("poll_timing", {})
            poll = (f"{pt['poll_ms']} ({pt['own_ms']} / {pt['source_ms']})" if pt.get("polls") else "-")
            lines.append(f"| {r['gpus']} x {r['per_gpu']} | {r['gpus'] * r['per_gpu']} | {r['scrapes']['p50_ms']} "
                         f"| {r['scrapes']['p99_ms']} | {r['scrapes']['cpu_ms_per_scrape']} | {r['series']} "
                         f"| {r['body_bytes'] / 1024:.1f} | {poll} | {r['rss_after_scrapes_kib'] / 1024:.1f} |")
        lines.append("")
    if doc.get("skipped"):
        lines.append("Skipped: " + "; ".join(doc["skipped"]))
        lines.append("")
    return "\n".join(lines)


def main():
    doc = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "exporters": [], "skipped": []}
    smi = version([NVSMI, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    doc["machine"] = f"{smi or 'no nvidia-smi'}, {os.cpu_count()} CPUs"
    procs, ready = start_workload()
    doc["workload"] = f"{ready} of {PROCS} PyTorch processes holding 1-2 GiB each"
    try:
        gm = os.path.join(BIN, "gpumemd")
        cfg = f"{TMP}/gpumemd.toml"
        with open(cfg, "w") as f:
            f.write('[poll]\ninterval = "1s"\n\n[state]\ndir = "/tmp/sbs/gpumemd-state"\n')
        extra = shlex.split(os.environ.get("SBS_GPUMEMD_ARGS", ""))
        doc["exporters"].append(measure(
            "gpumemd", [gm, "--config", cfg, "--web.listen-address", "127.0.0.1:9947", *extra], 9947,
            ready_path="/-/ready", version=version([gm, "--version"]), poll_timing=15))

        wheels = os.path.join(BIN, "wheels")
        peers = []
        if os.path.isdir(wheels) and any(w.endswith(".whl") for w in os.listdir(wheels)):
            peers.append("nvitop-exporter")
        else:
            doc["skipped"].append("nvitop-exporter (no wheels in BIN_DIR/wheels)")
        if os.access(os.path.join(BIN, "all-smi"), os.X_OK):
            peers.append("all-smi")
        else:
            doc["skipped"].append("all-smi (no BIN_DIR/all-smi)")
        per_exporter = IDLE + SETTLE + 25
        for peer in peers:
            if time.monotonic() - T0 + per_exporter > BUDGET:
                doc["skipped"].append(f"{peer} (time budget)")
                continue
            if peer == "nvitop-exporter":
                site = f"{TMP}/site"
                whl = sorted(os.path.join(wheels, w) for w in os.listdir(wheels) if w.endswith(".whl"))
                r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                    "--no-compile", "--no-cache-dir", "--upgrade", "--target", site, *whl],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    doc["exporters"].append({"name": peer, "error": "pip install failed",
                                             "log_tail": r.stderr.splitlines()[-5:]})
                    continue
                env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
                cmd = [sys.executable, "-m", "nvitop_exporter", "--bind-address", "127.0.0.1",
                       "--port", "9948", "--interval", "1"]
                doc["exporters"].append(measure(peer, cmd, 9948, env=env,
                                                version=version([*cmd[:3], "--version"], env=env)))
            else:
                lib = os.path.join(BIN, "lib")
                env = dict(os.environ, LD_LIBRARY_PATH=lib + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
                a = os.path.join(BIN, "all-smi")
                cmd = [a, "api", "--processes=true", "--port", "9949", "--interval", "1"]
                doc["exporters"].append(measure(peer, cmd, 9949, env=env, version=version([a, "--version"], env=env)))
        if time.monotonic() - T0 + 50 <= BUDGET:
            doc["exporters"].append(nvidia_smi_baseline())
        else:
            doc["skipped"].append("nvidia-smi baseline (time budget)")
        # The scrape target's size, 8 GPUs x 64 processes, exists here only
        # simulated: gpumemd --demo on a generated fleet, scrapes only.
        if time.monotonic() - T0 + 30 <= BUDGET:
            scen = f"{TMP}/8x64.toml"
            with open(scen, "w") as f:
                f.write(fleet_toml(8, 64))
            rec = measure("gpumemd-demo-8x64", [gm, "--demo", scen, "--web.listen-address", "127.0.0.1:9950"],
                          9950, ready_path="/-/ready", version=version([gm, "--version"]), idle=False,
                          poll_timing=5)
            doc["simulated_8x64"] = rec
        else:
            doc["skipped"].append("gpumemd --demo 8 x 64 scrapes (time budget)")
        # Scrape latency against the process count: simulated fleets of
        # growing size (the plot in BENCHMARKS.md), and the 64 x 1000 scale
        # target (poll, scrape and RSS with the default cardinality limits).
        doc["sweep"] = []
        for gpus, per_gpu in SWEEP:
            cost = 25 if gpus * per_gpu < 10000 else 60
            if time.monotonic() - T0 + cost > BUDGET:
                doc["skipped"].append(f"sweep {gpus} x {per_gpu} (time budget)")
                continue
            if (gpus, per_gpu) == (64, 1000):
                # A generated 64 x 1000 file is over the 8 MiB cap on
                # scenario files; the built-in `large` fleet is that size.
                scen = "large"
            else:
                scen = f"{TMP}/{gpus}x{per_gpu}.toml"
                with open(scen, "w") as f:
                    f.write(fleet_toml(gpus, per_gpu))
            rec = measure(f"gpumemd-demo-{gpus}x{per_gpu}",
                          [gm, "--demo", scen, "--web.listen-address", "127.0.0.1:9950"], 9950,
                          ready_path="/-/ready", idle=False, keep_body=False, scrapes=SWEEP_SCRAPES, cap=15,
                          settle=2, poll_timing=5)
            rec["gpus"], rec["per_gpu"] = gpus, per_gpu
            doc["sweep"].append(rec)
    finally:
        for p in procs:
            stop(p)
    doc["total_seconds"] = round(time.monotonic() - T0, 1)
    with open(os.path.join(OUT, "side-by-side.json"), "w") as f:
        json.dump(doc, f, indent=2)
    md = table(doc)
    with open(os.path.join(OUT, "side-by-side.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    log("done")


if __name__ == "__main__":
    main()
