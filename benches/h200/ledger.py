"""The driver-call ledger ([ebpf]) on a real GPU, in one run (~4 minutes).

Usage: python3 benches/h200/ledger.py GPUMEMD OUT_DIR
  (as root, or with CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE; torch installed)

Judges, writing OUT_DIR/summary.txt (PASS/FAIL lines and figures) and
OUT_DIR/ledger.json:
  1. up: gpumem_ebpf_up 1 once a primer CUDA process made the daemon probe
     the host's libcuda (jobs started after that are `complete`);
  2. torch: a PyTorch job WITHOUT the reporter goes through steady states
     (allocate, free, empty_cache, expandable segments off and on); at each,
     the ledger's live_bytes equals torch.cuda.memory_reserved() within
     2 MiB;
  3. driver: a non-PyTorch program (ctypes on libcuda: cuInit, cuCtxCreate,
     cuMemAlloc_v2, cuMemAllocManaged, cuMemCreate) is seen with its own
     figures; then it asks for 1 TiB: an OOM event (kind oom, source ebpf,
     code 2) with the GPU's holder table naming the torch job;
  4. cost: ns per cuMemAlloc_v2/cuMemFree_v2 call (ctypes on libcuda, 1 MiB)
     with and without the daemon (goal: under 2 us added), and steps/s of a
     small training loop with and without it (goal: under 1% slower),
     alternated A B B A (LEDGER_COST_ROUNDS times, 1 by default; each
     round's training figure is printed too). Each measured job starts
     after the daemon is ready and waits, before timing, until the daemon
     probed libcuda (gpumem_ebpf_libraries_probed >= 1) and books the job
     itself (its `driver` object in /api/v1/snapshot); an attached run that
     cannot show both is reported as not traced, not timed as if it were.
Each phase that fails is reported and the next one still runs; the whole
run is bounded (LEDGER_BUDGET_S, 345 s by default) and writes what it has.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

GM, OUT = sys.argv[1], sys.argv[2]
os.makedirs(OUT, exist_ok=True)
PORT = 19951
BASE = f"http://127.0.0.1:{PORT}"
MIB = 1 << 20
results, lines, notes = {}, [], []
children = []


class OutOfTime(BaseException):
    """The run's time bound passed: write what was measured and stop (a
    BaseException, so that no `except Exception` on the way swallows it)."""


def out_of_time(*_):
    raise OutOfTime("the run's time bound passed")


signal.signal(signal.SIGALRM, out_of_time)
signal.alarm(int(os.environ.get("LEDGER_BUDGET_S", "345")))


def note(text):
    notes.append(text)
    print(text, flush=True)


def verdict(ok, what):
    lines.append(f"{'PASS' if ok else 'FAIL'} {what}")
    print(lines[-1], flush=True)


def get(path):
    with urllib.request.urlopen(BASE + path, timeout=5) as r:
        return r.read().decode()


def wait(cond, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = cond()
            if v:
                return v
        except Exception:  # noqa: BLE001 (daemon not up yet)
            pass
        time.sleep(0.5)
    raise TimeoutError(f"timed out: {what}")


def metric(name):
    for line in get("/metrics").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def driver_of(pid):
    snap = json.loads(get("/api/v1/snapshot"))
    for d in snap.get("devices", []):
        for p in d.get("processes", []):
            if p.get("pid") == pid and p.get("driver"):
                return p["driver"]
    return None


work = tempfile.mkdtemp()
starts = 0


def log_tail(n=12):
    """The daemon log's lines about the ledger, for a failure's note."""
    try:
        with open(os.path.join(OUT, "gpumemd.log"), errors="replace") as f:
            keep = []
            for l in f:
                if l.startswith("---- gpumemd start"):
                    keep = []  # only the latest daemon's lines
                if "ledger" in l or "ebpf" in l or "error" in l or "warn" in l or l.startswith("----"):
                    keep.append(l.rstrip())
        return " | ".join(keep[-n:])
    except OSError as e:
        return f"(no log: {e})"


def start_daemon(ebpf=True, demo=False):
    """A fresh daemon (own port and state directory, so nothing carries over
    from the one before); returns once /metrics answers and, with [ebpf],
    once gpumem_ebpf_up is 1."""
    global BASE, starts
    starts += 1
    port = PORT + starts
    BASE = f"http://127.0.0.1:{port}"
    cfg = os.path.join(work, f"gpumemd{starts}.toml")
    with open(cfg, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{port}"\n[poll]\ninterval = "1s"\n'
                f'[state]\ndir = "{work}/state{starts}"\n')
        if ebpf:
            f.write("[ebpf]\nenabled = true\n")
    log = open(os.path.join(OUT, "gpumemd.log"), "a")
    log.write(f"---- gpumemd start {starts} (ebpf={ebpf}) at {time.time():.3f}\n")
    log.flush()
    args = [GM, "--config", cfg] + (["--demo"] if demo else [])
    d = subprocess.Popen(args, stdout=log, stderr=log)
    try:
        wait(lambda: get("/-/ready") is not None, 30, f"daemon up (start {starts})")
        if ebpf and not demo:
            wait(lambda: metric("gpumem_ebpf_up") == 1, 10, "gpumem_ebpf_up 1")
    except TimeoutError as e:
        stop_daemon(d)
        raise TimeoutError(f"{e} after start {starts}: {log_tail()}") from None
    return d


def stop_daemon(d):
    if d is None or d.poll() is not None:
        return
    d.terminate()
    try:
        d.wait(timeout=15)
    except subprocess.TimeoutExpired:
        d.kill()
        d.wait()


PY = sys.executable
TORCH_JOB = textwrap.dedent("""
    import os, sys, torch
    x = []
    def mark(tag):
        torch.cuda.synchronize()
        print(f"MARK {tag} {torch.cuda.memory_reserved()} {torch.cuda.memory_allocated()}", flush=True)
        sys.stdin.readline()
    torch.zeros(1, device="cuda")
    mark("init")
    for i in range(4):
        x.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    mark("1GiB")
    x.append(torch.empty(3 << 30, dtype=torch.uint8, device="cuda"))
    mark("4GiB")
    del x[:2]
    mark("freed-cached")
    torch.cuda.empty_cache()
    mark("empty_cache")
    x += [torch.empty(n << 20, dtype=torch.uint8, device="cuda") for n in (1, 3, 7, 21, 100)]
    mark("small")
    print("DONE", flush=True)
    sys.stdin.readline()
""")

DRIVER_JOB = textwrap.dedent("""
    import ctypes, sys, time
    cu = ctypes.CDLL("libcuda.so.1")
    def ok(rc, what):
        if rc != 0: raise SystemExit(f"{what}: CUresult {rc}")
    ok(cu.cuInit(0), "cuInit")
    dev = ctypes.c_int(); ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p(); ok(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    p = ctypes.c_uint64()
    mode = sys.argv[1]
    if mode == "bench":
        # READY: context made, nothing allocated; the script waits for the
        # daemon to probe libcuda. WARM: one allocation kept, so the
        # daemon books this PID before the timed loop.
        print("READY", flush=True); sys.stdin.readline()
        marker = ctypes.c_uint64()
        ok(cu.cuMemAlloc_v2(ctypes.byref(marker), ctypes.c_size_t(2 << 20)), "marker cuMemAlloc_v2")
        print("WARM", flush=True); sys.stdin.readline()
        n, cap = int(sys.argv[2]), float(sys.argv[3])
        alloc, free, ref, size = cu.cuMemAlloc_v2, cu.cuMemFree_v2, ctypes.byref(p), ctypes.c_size_t(1 << 20)
        ok(alloc(ref, size), "cuMemAlloc_v2"); ok(free(p), "cuMemFree_v2")
        for _ in range(1000):
            alloc(ref, size); free(p)
        done, t = 0, time.perf_counter()
        while done < n:
            for _ in range(1000):
                alloc(ref, size); free(p)
            done += 1000
            if time.perf_counter() - t > cap:
                break
        el = time.perf_counter() - t
        print(f"NS {el * 1e9 / (2 * done):.1f} {done + 1001}", flush=True)
        sys.stdin.readline()
        raise SystemExit(0)
    keep = []
    for size in (256 << 20, 64 << 20):
        ok(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)), "cuMemAlloc_v2"); keep.append(p.value)
    ok(cu.cuMemAllocManaged(ctypes.byref(p), ctypes.c_size_t(32 << 20), 1), "cuMemAllocManaged")
    ok(cu.cuMemFree_v2(ctypes.c_uint64(keep.pop())), "cuMemFree_v2")
    print(f"OWN {256 << 20} {32 << 20}", flush=True)
    sys.stdin.readline()
    rc = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 40))
    print(f"FAILED {rc}", flush=True)
    sys.stdin.readline()
""")

TRAIN = textwrap.dedent("""
    import sys, time, torch
    m = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(6)]).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x = torch.randn(256, 2048, device="cuda")
    def step():
        opt.zero_grad(); m(x).square().mean().backward(); opt.step()
    for _ in range(30): step()
    torch.cuda.synchronize()
    print("READY", flush=True); sys.stdin.readline()
    # A fresh cudaMalloc after the probes are in: the daemon books this PID.
    torch.cuda.empty_cache()
    marker = torch.empty(24 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("WARM", flush=True); sys.stdin.readline()
    for _ in range(50): step()
    n, reps = int(sys.argv[1]), int(sys.argv[2])
    for _ in range(reps):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(n): step()
        torch.cuda.synchronize(); print(f"SPS {n / (time.perf_counter() - t):.2f}", flush=True)
    print("DONE", flush=True)
""")


def spawn(code, *args, env=None):
    path = os.path.join(work, f"job{len(os.listdir(work))}.py")
    with open(path, "w") as f:
        f.write(code)
    e = dict(os.environ, **(env or {}))
    e.pop("GPUMEMD_TORCH", None)
    p = subprocess.Popen([PY, path, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=e)
    children.append(p)
    return p


def read_until(p, prefix):
    for line in p.stdout:
        if line.startswith(prefix):
            return line.split()
    raise RuntimeError(f"job {p.pid} ended before {prefix}")


def go(p):
    p.stdin.write("\n")
    p.stdin.flush()


def end(p):
    """Lets a job finish (it reads stdin to end), else kills it."""
    try:
        p.stdin.close()
    except OSError:
        pass
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


state = {"daemon": None, "torch_job": None}


def phase_up():
    """1. A primer CUDA process makes the daemon probe the host's libcuda."""
    primer = spawn(TORCH_JOB)
    read_until(primer, "MARK")
    wait(lambda: (metric("gpumem_ebpf_libraries_probed") or 0) >= 1, 20, "libcuda probed")
    verdict(metric("gpumem_ebpf_up") == 1, "up: gpumem_ebpf_up 1, libcuda probed")
    primer.kill()
    primer.wait()


def phase_torch():
    """2. PyTorch without the reporter, from its start under the probes."""
    for expandable in ("False", "True"):
        job = spawn(TORCH_JOB, env={"PYTORCH_CUDA_ALLOC_CONF": f"expandable_segments:{expandable}"})
        worst, marks = 0, []
        while True:
            line = job.stdout.readline()
            if not line or line.startswith("DONE"):
                break
            _, tag, reserved, _allocated = line.split()
            reserved = int(reserved)

            def settled():
                d = driver_of(job.pid)
                return d if d and abs(d["live_bytes"] - reserved) <= 2 * MIB else None
            try:
                d = wait(settled, 10, f"ledger at {tag}")
            except TimeoutError:
                d = driver_of(job.pid) or {"live_bytes": -1}
            diff = d["live_bytes"] - reserved
            worst = max(worst, abs(diff))
            marks.append({"tag": tag, "reserved": reserved, "live_bytes": d["live_bytes"], "diff": diff,
                          "complete": d.get("complete"), "other_bytes": d.get("other_bytes")})
            go(job)
        results[f"torch_expandable_{expandable}"] = marks
        verdict(bool(marks) and worst <= 2 * MIB and all(m["complete"] for m in marks),
                f"torch (expandable_segments={expandable}): live_bytes = memory_reserved() within 2 MiB at "
                f"{len(marks)} steady states (worst {worst} bytes), complete")
        if expandable == "True":
            state["torch_job"] = job
        else:
            end(job)


def phase_driver():
    """3. A non-PyTorch CUDA program, and its failed allocation."""
    drv = spawn(DRIVER_JOB, "ledger")
    _, own_live, own_managed = read_until(drv, "OWN")
    d = wait(lambda: driver_of(drv.pid), 10, "driver job booked")
    verdict(d["live_bytes"] == int(own_live) + int(own_managed) and d["managed_bytes"] == int(own_managed),
            f"driver: ctypes program seen: live {d['live_bytes']} (own {own_live} + managed {own_managed})")
    go(drv)
    code = int(read_until(drv, "FAILED")[1])

    def oom_event():
        for e in json.loads(get("/api/v1/events"))["events"]:
            if e.get("kind") == "oom" and e.get("pid") == drv.pid and e.get("source") == "ebpf":
                return e
        return None

    ev = wait(oom_event, 10, "the OOM event")
    holders = [r["pid"] for r in ev["gpu"]["processes"]]
    results["oom_event"] = ev
    tj = state["torch_job"]
    verdict(code == 2 and ev["code"] == 2 and ev["requested_bytes"] == 1 << 40 and tj is not None
            and tj.pid in holders,
            f"oom: event with code 2, 1 TiB asked, holder table of {len(holders)} names the torch job")
    end(drv)


def traced(p, attached, run):
    """Walks a cost job through READY and WARM. With the ledger attached,
    waits there for what the daemon really does: it probes the libcuda of
    PIDs that NVML newly lists (gpumem_ebpf_libraries_probed >= 1), then
    books this job's calls (its `driver` object in the snapshot)."""
    read_until(p, "READY")
    if attached:
        run["probed"] = wait(lambda: metric("gpumem_ebpf_libraries_probed") or None, 20, "libcuda probed")
    go(p)
    read_until(p, "WARM")
    if attached:
        d = wait(lambda: driver_of(p.pid), 10, f"job {p.pid} booked")
        run["booked_allocations"] = d.get("allocations")
        run["events_before"] = metric("gpumem_ebpf_events_total")
    go(p)


def bench_run(attached, n=100_000, cap=4.0):
    run = {"kind": "ns_per_call", "ledger": attached, "traced": None}
    p = spawn(DRIVER_JOB, "bench", str(n), str(cap))
    try:
        traced(p, attached, run)
        _, ns, calls = read_until(p, "NS")
        run["ns"], run["pairs"] = float(ns), int(calls)
        if attached:
            # The job waits after its loop so its books can be read: the
            # reader drains the ring buffer every 100 ms.
            # Informative: how many of its calls the books hold (the probes
            # fired before timing, checked at WARM, is what `traced` means).
            try:
                d = wait(lambda: (lambda d: d if d and d["allocations"] >= run["pairs"] else None)(driver_of(p.pid)),
                         5, f"job {p.pid}'s {run['pairs']} allocations booked")
            except TimeoutError:
                d = driver_of(p.pid) or {}
            run["booked_allocations"], run["booked_frees"] = d.get("allocations"), d.get("frees")
            run["events_lost"] = metric("gpumem_ebpf_events_lost_total")
            run["traced"] = True
    except (TimeoutError, RuntimeError) as e:
        run["error"] = str(e)
        run["traced"] = False if attached else None
    finally:
        end(p)
    return run


def train_run(attached, n=1000, reps=3):
    run = {"kind": "steps_per_second", "ledger": attached, "traced": None}
    p = spawn(TRAIN, str(n), str(reps))
    try:
        traced(p, attached, run)
        sps = [float(read_until(p, "SPS")[1]) for _ in range(reps)]
        run["sps_each"], run["sps"] = sps, statistics.median(sps)
        run["traced"] = True if attached else None
    except (TimeoutError, RuntimeError) as e:
        run["error"] = str(e)
        run["traced"] = False if attached else None
    finally:
        end(p)
    return run


def phase_cost():
    """4. The cost, alternated with the daemon (ledger on) and without it."""
    runs = []
    results["cost_runs"] = runs
    # LEDGER_COST_ROUNDS repeats A B B A: one round cannot tell a 1 %
    # training-loop cost from run-to-run noise.
    rounds = max(1, int(os.environ.get("LEDGER_COST_ROUNDS", "1")))
    for block, attached in enumerate((True, False, False, True) * rounds):
        if attached and (state["daemon"] is None or state["daemon"].poll() is not None):
            try:
                state["daemon"] = start_daemon()
            except TimeoutError as e:
                for kind in ("ns_per_call", "steps_per_second"):
                    runs.append({"kind": kind, "ledger": True, "traced": False, "block": "ABBA"[block % 4],
                                 "error": f"daemon start: {e}"})
                continue
        if not attached:
            stop_daemon(state["daemon"])
            state["daemon"] = None
        for r in (bench_run(attached), train_run(attached)):
            r["block"] = "ABBA"[block % 4]
            r["round"] = block // 4
            runs.append(r)
            note(f"cost run {r}")
    stop_daemon(state["daemon"])
    state["daemon"] = None

    def mean(kind, attached, field):
        v = [r[field] for r in runs if r["kind"] == kind and r["ledger"] == attached and field in r
             and (r["traced"] is not False)]
        return (sum(v) / len(v), len(v)) if v else (None, 0)

    untraced = [r for r in runs if r["ledger"] and not r.get("traced")]
    verdict(not untraced, f"cost: every ledger-on run had libcuda probed and its PID booked before timing "
            f"({len(untraced)} not: {[r.get('error') for r in untraced]})")
    (on_ns, k1), (off_ns, k2) = mean("ns_per_call", True, "ns"), mean("ns_per_call", False, "ns")
    (on_sps, k3), (off_sps, k4) = mean("steps_per_second", True, "sps"), mean("steps_per_second", False, "sps")
    cost = {"ns_on": on_ns, "ns_off": off_ns, "sps_on": on_sps, "sps_off": off_sps}
    results["cost"] = cost
    if on_ns is not None and off_ns is not None:
        added = on_ns - off_ns
        cost["added_ns_per_call"] = added
        verdict(added < 2000, f"cost: {added:.0f} ns added per traced driver call (on {on_ns:.0f} ns over "
                f"{k1} runs, off {off_ns:.0f} ns over {k2}; goal < 2000)")
    else:
        verdict(False, "cost: ns per call not measured both ways")
    if on_sps is not None and off_sps is not None:
        slower = 1 - on_sps / off_sps
        cost["training_slowdown"] = slower
        # Each round's own figure shows how far one A B B A strays.
        each = []
        for rnd in range(rounds):
            r_on = [r["sps"] for r in runs if r.get("round") == rnd and r["kind"] == "steps_per_second"
                    and r["ledger"] and r.get("traced") and "sps" in r]
            r_off = [r["sps"] for r in runs if r.get("round") == rnd and r["kind"] == "steps_per_second"
                     and not r["ledger"] and "sps" in r]
            if r_on and r_off:
                each.append(1 - statistics.mean(r_on) / statistics.mean(r_off))
        cost["training_slowdown_each_round"] = each
        spread = ", ".join(f"{e * 100:.2f}" for e in each)
        verdict(slower < 0.01, f"cost: training loop {slower * 100:.2f}% slower with the ledger (on {on_sps:.1f} "
                f"over {k3} runs, off {off_sps:.1f} over {k4}, {rounds} x A B B A, each round: {spread} %; "
                f"goal < 1%)")
    else:
        verdict(False, "cost: steps/s not measured both ways")


def dry_run():
    """LEDGER_DRYRUN=1: no GPU. The daemon on --demo, to check the HTTP
    paths and the JSON the phases read."""
    d = start_daemon(ebpf=False, demo=True)
    try:
        snap = json.loads(get("/api/v1/snapshot"))
        pid = snap["devices"][0]["processes"][0]["pid"]
        note(f"dry run: snapshot pid {pid}, driver_of -> {driver_of(pid)}, "
             f"gpumem_ebpf_up {metric('gpumem_ebpf_up')}, events {len(json.loads(get('/api/v1/events'))['events'])}")
        verdict(get("/-/ready") is not None, "dry run: daemon answered on a fresh port and state dir")
    finally:
        stop_daemon(d)


try:
    if os.environ.get("LEDGER_DRYRUN"):
        dry_run()
    else:
        phases = (phase_up, phase_torch, phase_driver)
        try:
            state["daemon"] = start_daemon()
        except TimeoutError as e:
            verdict(False, f"start: {e}")
            phases = ()
        for phase in phases:
            try:
                phase()
            except (TimeoutError, RuntimeError, KeyError, ValueError) as e:
                verdict(False, f"{phase.__name__}: {e} (log: {log_tail(4)})")
        if state["torch_job"] is not None:
            end(state["torch_job"])
        phase_cost()
except OutOfTime as e:
    verdict(False, f"bounded: {e}; figures so far are in ledger.json")
finally:
    signal.alarm(0)
    for c in children:
        if c.poll() is None:
            c.kill()
            c.wait()
    stop_daemon(state["daemon"])
    with open(os.path.join(OUT, "ledger.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(OUT, "summary.txt"), "w") as f:
        f.write("\n".join(lines + notes) + "\n")
sys.exit(0 if lines and all(l.startswith("PASS") for l in lines) else 1)
