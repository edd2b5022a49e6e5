"""PyTorch processes for scripts/h200/suspend.sh (issue 16: suspend/resume).

Usage: python3 suspend_workload.py KIND GIB SECONDS WORKDIR
  idle  fill GIB GiB (1 GiB chunks) with seeded random numbers, print
        "CHECKSUM-BEFORE <sum>", then make no CUDA call at all (idle) until
        WORKDIR/idle.check exists; then recompute and print
        "CHECKSUM-AFTER <sum>" (a CUDA call made while checkpointed would
        simply block until the restore), and exit.
  busy  hold GIB GiB and run back-to-back matmuls until SECONDS pass,
        writing the iteration count to WORKDIR/busy.iters every second.
Each writes its pid to WORKDIR/KIND.pid once its memory is allocated.
"""
import os, sys, time

import torch

kind, gib, secs, work = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
end = time.time() + secs
CHUNK = 1 << 28  # float32 elements in 1 GiB


def checksum(chunks):
    total = 0.0
    for c in chunks:
        total += torch.sum(c, dtype=torch.float64).item()
        total += torch.sum(c[::4097] * c[::4097], dtype=torch.float64).item()
    torch.cuda.synchronize()
    return repr(total)


def say(line):
    print(line, flush=True)


if kind == "idle":
    g = torch.Generator(device="cuda").manual_seed(20261203)
    chunks = [torch.randn(CHUNK, device="cuda", generator=g) for _ in range(gib)]
    say(f"CHECKSUM-BEFORE {checksum(chunks)}")
    with open(f"{work}/idle.pid", "w") as f:
        f.write(str(os.getpid()))
    while not os.path.exists(f"{work}/idle.check") and time.time() < end:
        time.sleep(0.2)
    t = time.time()
    after = checksum(chunks)
    say(f"CHECKSUM-AFTER {after} ({time.time() - t:.2f}s)")
elif kind == "busy":
    hold = [torch.empty(CHUNK, device="cuda") for _ in range(max(gib - 1, 0))]
    a = torch.randn(4096, 4096, device="cuda")
    with open(f"{work}/busy.pid", "w") as f:
        f.write(str(os.getpid()))
    n, last = 0, 0.0
    while time.time() < end:
        a = torch.tanh(a @ a)
        n += 1
        if time.time() - last >= 1.0:
            torch.cuda.synchronize()
            with open(f"{work}/busy.iters.tmp", "w") as f:
                f.write(str(n))
            os.replace(f"{work}/busy.iters.tmp", f"{work}/busy.iters")
            last = time.time()
else:
    sys.exit(f"unknown kind {kind}")
