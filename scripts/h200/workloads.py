"""PyTorch workloads for checking gpumemd on a real GPU (scripts/h200/verify.sh).

Usage: python3 workloads.py KIND SECONDS
  hold      allocate 4 GiB and hold it (compared with nvidia-smi)
  sawtooth  allocate 2 GiB, hold 2 s, free with empty_cache, 2 s, repeat
  leak      keep a reference to a new 16 MiB tensor every 0.25 s
  orphan    spawn a child that allocates 3 GiB, then exit after 8 s (the child stays)
  child     (used by orphan) allocate 3 GiB and hold it
  stopped   allocate 2 GiB, write its pid to a ready file, hold (verify.sh SIGSTOPs it)
"""
import os, subprocess, sys, time

kind, secs = sys.argv[1], float(sys.argv[2])
end = time.time() + secs


def ready():
    with open(f"/tmp/gpumemd-ready-{kind}", "w") as f:
        f.write(str(os.getpid()))


if kind == "orphan":
    # The parent never touches CUDA: only the child holds memory.
    subprocess.Popen([sys.executable, __file__, "child", str(secs)], start_new_session=True)
    ready()
    time.sleep(8)
    sys.exit(0)

import torch  # noqa: E402  (the orphan parent must not load CUDA)

if kind in ("hold", "child", "stopped"):
    size = {"hold": 4, "child": 3, "stopped": 2}[kind] << 30
    x = torch.empty(size, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    ready()
    while time.time() < end:
        time.sleep(0.5)
elif kind == "sawtooth":
    ready()
    while time.time() < end:
        x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        time.sleep(2)
        del x
        torch.cuda.empty_cache()
        time.sleep(2)
elif kind == "leak":
    keep = []
    ready()
    while time.time() < end:
        t = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        keep.append(t)
        time.sleep(0.25)
else:
    sys.exit(f"unknown workload {kind}")
