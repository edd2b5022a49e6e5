"""PyTorch workloads for checking gpumemd on a real GPU (scripts/h200/verify.sh).

Usage: python3 workloads.py KIND SECONDS
  hold      allocate 4 GiB and hold it (compared with nvidia-smi)
  sawtooth  allocate 2 GiB, hold 2 s, free with empty_cache, 2 s, repeat
  leak      keep a reference to a new 16 MiB tensor every 0.25 s
  orphan    spawn a child that allocates 3 GiB, then exit after 8 s (the child stays)
  child     (used by orphan) allocate 3 GiB and hold it
  stopped   allocate 2 GiB, write its pid to a ready file, hold (verify.sh SIGSTOPs it)
 For scripts/h200/diagnosis.sh (issue: leaks the allocator quantises, D state, peaks):
  leak2     keep a reference to a new 2 MiB tensor every second (the allocator
            turns it into a 20 MiB step every 10 s)
  leakstop  as leak2 for LEAKSTOP_LEAK_S seconds (default 80), then hold
  warmup    an MLP training loop whose memory warms up to a plateau
  frag      allocations of random sizes freed in random order (a fragmenting cache)
  clones    clone a 1 GiB tensor every 5 s and drop the clone 2 s later
  busy      back-to-back matmuls (a process that sits in the driver, state D at times)
  spike     hold 1 GiB; at SPIKE_AT_S seconds after start add 4 GiB for 2 s, then free it
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
elif kind in ("leak2", "leakstop"):
    stop_at = time.time() + float(os.environ.get("LEAKSTOP_LEAK_S", "80")) if kind == "leakstop" else end
    keep = []
    ready()
    while time.time() < end:
        if time.time() < stop_at:
            t = torch.empty(2 << 20, dtype=torch.uint8, device="cuda")
            t.fill_(1)
            keep.append(t)
        time.sleep(1.0)
elif kind == "warmup":
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()
    opt = torch.optim.Adam(model.parameters())
    ready()
    while time.time() < end:
        x = torch.randn(512, 4096, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        time.sleep(0.05)
elif kind == "frag":
    import random
    rng = random.Random(7)
    live = []
    ready()
    while time.time() < end:
        live.append(torch.empty(rng.randint(1, 64) << 20, dtype=torch.uint8, device="cuda"))
        if len(live) > 40:
            live.pop(rng.randrange(len(live)))
        time.sleep(0.05)
elif kind == "clones":
    base = torch.ones(1 << 30, dtype=torch.uint8, device="cuda")
    ready()
    while time.time() < end:
        c = base.clone()
        torch.cuda.synchronize()
        time.sleep(2)
        del c
        torch.cuda.empty_cache()
        time.sleep(3)
elif kind == "busy":
    a = torch.randn(8192, 8192, device="cuda")
    ready()
    while time.time() < end:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
elif kind == "spike":
    spike_at = time.time() + float(os.environ.get("SPIKE_AT_S", "95"))
    base = torch.ones(1 << 30, dtype=torch.uint8, device="cuda")
    ready()
    while time.time() < end:
        if spike_at <= time.time():
            s = torch.ones(4 << 30, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            with open("/tmp/gpumemd-spike-at", "w") as f:
                f.write(str(time.time()))
            time.sleep(2)
            del s
            torch.cuda.empty_cache()
            spike_at = float("inf")
        time.sleep(0.1)
else:
    sys.exit(f"unknown workload {kind}")
