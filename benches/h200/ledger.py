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
  4. cost: ns per cuMemAlloc_v2/cuMemFree_v2 call with and without the
     daemon (goal: under 2 us added), and steps/s of a small training loop
     with and without it (goal: under 1% slower), alternated A B B A.
"""

import json
import os
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
results, lines = {}, []


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
    raise SystemExit(f"timed out: {what}")


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
cfg = os.path.join(work, "gpumemd.toml")
with open(cfg, "w") as f:
    f.write(f'[server]\nlisten = "127.0.0.1:{PORT}"\n[poll]\ninterval = "1s"\n'
            f'[state]\ndir = "{work}/state"\n[ebpf]\nenabled = true\n')


def start_daemon():
    log = open(os.path.join(OUT, "gpumemd.log"), "a")
    d = subprocess.Popen([GM, "--config", cfg], stdout=log, stderr=log)
    wait(lambda: metric("gpumem_ebpf_up") is not None, 30, "daemon up")
    return d


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
        n = int(sys.argv[2]); t = time.perf_counter()
        for _ in range(n):
            cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)); cu.cuMemFree_v2(p)
        print(f"NS {(time.perf_counter() - t) * 1e9 / (2 * n):.1f}", flush=True)
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
    for _ in range(50): step()
    torch.cuda.synchronize(); t = time.perf_counter(); n = int(sys.argv[1])
    for _ in range(n): step()
    torch.cuda.synchronize(); print(f"SPS {n / (time.perf_counter() - t):.2f}", flush=True)
""")


def spawn(code, *args, env=None):
    path = os.path.join(work, f"job{len(os.listdir(work))}.py")
    with open(path, "w") as f:
        f.write(code)
    e = dict(os.environ, **(env or {}))
    e.pop("GPUMEMD_TORCH", None)
    return subprocess.Popen([PY, path, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=e)


def read_until(p, prefix):
    for line in p.stdout:
        if line.startswith(prefix):
            return line.split()
    raise SystemExit(f"job ended before {prefix}")


daemon = start_daemon()
# 1. A primer CUDA process makes the daemon probe the host's libcuda.
primer = spawn(TORCH_JOB)
read_until(primer, "MARK")
wait(lambda: (metric("gpumem_ebpf_libraries_probed") or 0) >= 1, 20, "libcuda probed")
verdict(metric("gpumem_ebpf_up") == 1, "up: gpumem_ebpf_up 1, libcuda probed")
primer.kill()

# 2. PyTorch without the reporter, from its start under the probes.
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
        except SystemExit:
            d = driver_of(job.pid) or {"live_bytes": -1}
        diff = d["live_bytes"] - reserved
        worst = max(worst, abs(diff))
        marks.append({"tag": tag, "reserved": reserved, "live_bytes": d["live_bytes"], "diff": diff,
                      "complete": d.get("complete"), "other_bytes": d.get("other_bytes")})
        job.stdin.write("\n"); job.stdin.flush()
    results[f"torch_expandable_{expandable}"] = marks
    verdict(worst <= 2 * MIB and all(m["complete"] for m in marks),
            f"torch (expandable_segments={expandable}): live_bytes = memory_reserved() within 2 MiB at "
            f"{len(marks)} steady states (worst {worst} bytes), complete")
    if expandable == "True":
        torch_job = job
    else:
        job.stdin.write("\n"); job.stdin.flush(); job.wait()

# 3. A non-PyTorch CUDA program, and its failed allocation.
drv = spawn(DRIVER_JOB, "ledger")
_, own_live, own_managed = read_until(drv, "OWN")
d = wait(lambda: driver_of(drv.pid), 10, "driver job booked")
verdict(d["live_bytes"] == int(own_live) + int(own_managed) and d["managed_bytes"] == int(own_managed),
        f"driver: ctypes program seen: live {d['live_bytes']} (own {own_live} + managed {own_managed})")
drv.stdin.write("\n"); drv.stdin.flush()
code = int(read_until(drv, "FAILED")[1])


def oom_event():
    for e in json.loads(get("/api/v1/events"))["events"]:
        if e.get("kind") == "oom" and e.get("pid") == drv.pid and e.get("source") == "ebpf":
            return e
    return None


ev = wait(oom_event, 10, "the OOM event")
holders = [r["pid"] for r in ev["gpu"]["processes"]]
results["oom_event"] = ev
verdict(code == 2 and ev["code"] == 2 and ev["requested_bytes"] == 1 << 40 and torch_job.pid in holders,
        f"oom: event with code 2, 1 TiB asked, holder table of {len(holders)} names the torch job")
for p in (drv, torch_job):
    p.stdin.write("\n"); p.stdin.flush(); p.wait()

# 4. The cost, alternated with and without the daemon.
def bench(n=200_000):
    return float(read_until(spawn(DRIVER_JOB, "bench", str(n)), "NS")[1])


def train(n=400):
    return float(read_until(spawn(TRAIN, str(n)), "SPS")[1])


on_ns, on_sps = [bench(), bench()], [train(), train()]
daemon.terminate(); daemon.wait()
off_ns, off_sps = [bench(), bench()], [train(), train()]
daemon = start_daemon()
wait(lambda: (metric("gpumem_ebpf_libraries_probed") or 0) >= 0, 5, "restart")
primer = spawn(TORCH_JOB); read_until(primer, "MARK")
wait(lambda: (metric("gpumem_ebpf_libraries_probed") or 0) >= 1, 20, "libcuda probed again")
primer.kill()
on_ns += [bench(), bench()]; on_sps += [train(), train()]
daemon.terminate(); daemon.wait()
added = sum(on_ns) / len(on_ns) - sum(off_ns) / len(off_ns)
slower = 1 - (sum(on_sps) / len(on_sps)) / (sum(off_sps) / len(off_sps))
results["cost"] = {"ns_on": on_ns, "ns_off": off_ns, "sps_on": on_sps, "sps_off": off_sps,
                   "added_ns_per_call": added, "training_slowdown": slower}
verdict(added < 2000, f"cost: {added:.0f} ns added per traced driver call (goal < 2000)")
verdict(slower < 0.01, f"cost: training loop {slower * 100:.2f}% slower with the ledger (goal < 1%)")

with open(os.path.join(OUT, "ledger.json"), "w") as f:
    json.dump(results, f, indent=1)
with open(os.path.join(OUT, "summary.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
sys.exit(0 if all(l.startswith("PASS") for l in lines) else 1)
