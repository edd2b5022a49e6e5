#!/usr/bin/env bash
# Dry run of allocator.sh's new parts without a GPU: the `oomstart` workload
# against a fake torch (its OOM raised uncaught) and a stand-in socket, which
# must receive the OOM's report; then allocator_check.py's OOM-at-start
# verdict on a synthesised run directory (PASS, then FAIL without the table).
# Usage: scripts/h200/allocator_dryrun.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/fake"
cat >"$work/fake/torch.py" <<'PY'
"""Just what allocator_workloads.py oomstart and gpumemd_torch touch."""
import types
uint8 = "uint8"
_stats = {"num_ooms": 0, "allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0,
          "reserved_bytes.all.peak": 0}
_observers = []
_C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=_observers.append)
class _OOM(RuntimeError):
    pass
class _Tensor:
    def __init__(self, n):
        self.n = n
    def numel(self):
        return self.n
def _alloc(n, free=8 << 30):
    if n > free:
        _stats["num_ooms"] += 1
        for o in _observers:
            o(0, n, 80 << 30, free)
        raise _OOM(f"CUDA out of memory. Tried to allocate {n} bytes")
    _stats["allocated_bytes.all.current"] += n
    _stats["reserved_bytes.all.current"] += n
    _stats["reserved_bytes.all.peak"] = max(_stats["reserved_bytes.all.peak"], _stats["reserved_bytes.all.current"])
    return _Tensor(n)
class cuda:
    OutOfMemoryError = _OOM
    _init = False
    @staticmethod
    def init(): cuda._init = True
    @staticmethod
    def is_initialized(): return cuda._init
    @staticmethod
    def device_count(): return 1
    @staticmethod
    def memory_stats(i=0): return dict(_stats)
    @staticmethod
    def get_device_properties(i): return types.SimpleNamespace(uuid="3a8f2c41-7b9e-4d05-a6c3-1e2f3a4b5c6d")
    @staticmethod
    def synchronize(): pass
    @staticmethod
    def mem_get_info(): return (8 << 30, 80 << 30)
def ones(n, dtype=None, device=None):
    return _alloc(n)
def empty(n, dtype=None, device=None):
    return _alloc(n)
PY
python3 - "$here" "$repo" "$work" <<'PY'
import json, os, socket, subprocess, sys
here, repo, work = sys.argv[1:]
path = os.path.join(work, "a.sock")
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
env = dict(os.environ, PYTHONPATH=f"{work}/fake:{repo}/python", GPUMEMD_SOCKET=path, OOMSTART_AFTER_S="0.2")
p = subprocess.run([sys.executable, f"{here}/allocator_workloads.py", "oomstart", "0"], env=env,
                   capture_output=True, text=True, timeout=60)
s.setblocking(False)
got = []
try:
    while True:
        got.append(json.loads(s.recv(65536)))
except BlockingIOError:
    pass
ooms = [m["devices"][0]["ooms"] for m in got]
lines = [json.loads(l) for l in p.stdout.splitlines()]
ok = p.returncode == 1 and "out of memory" in p.stderr and ooms and ooms[0] == 1
print(f"{'PASS' if ok else 'FAIL'} oomstart dies of its OOM (rc {p.returncode}) and its first report carries it: reports {ooms}")
print("  log:", [sorted(l) for l in lines], "| stderr:", p.stderr.strip().splitlines()[-1:])
# The check, on a synthesised run directory.
run = os.path.join(work, "run")
os.mkdir(run)
t = 1000.0
w = lambda n, text: open(os.path.join(run, n), "w").write(text)
w("start", str(t))
for k, pid in (("leak", 11), ("cache", 12), ("oom", 13)):
    w(f"{k}.log", json.dumps({"ready": pid}) + "\n")
w("oomstart.log", "\n".join(json.dumps(l) for l in [{"ready": 14}, {"cuda_at": t + 95.5}, {"oom_at": t + 96.8}]) + "\n")
w("oomstart.rc", "1\n")
table = {"polled_at": t + 97.2, "processes": [{"pid": 11, "used_bytes": 900 << 20}, {"pid": 12, "used_bytes": 700 << 20},
                                               {"pid": 14, "used_bytes": 600 << 20}]}
ev = {"kind": "oom", "time": t + 96.81, "pid": 14, "comm": "python3", "allocator": {"ooms": 1}, "gpu": table}
for verdict, procs in (("PASS", table["processes"]), ("FAIL", [])):
    ev["gpu"] = dict(table, processes=procs)
    w("events.json", json.dumps({"events": [ev]}))
    r = subprocess.run([sys.executable, f"{here}/allocator_check.py", run], capture_output=True, text=True, timeout=60)
    line = next((l for l in r.stdout.splitlines() if "OOM at start" in l), r.stderr.strip()[-300:])
    good = line.startswith(verdict)
    ok = ok and good
    print(f"{'PASS' if good else 'FAIL'} the check says {verdict} here: {line}")
sys.exit(0 if ok else 1)
PY
