"""PyTorch workloads for scripts/h200/allocator.sh (issue 17: the allocator
view). Each opts in with gpumemd_torch (PYTHONPATH=python) and writes JSON
lines to stdout. Usage: python3 allocator_workloads.py KIND SECONDS

  leak   keeps a reference to a new 4 MiB tensor every 0.5 s (tensors grow)
  cache  each second allocates and frees a tensor 2 MiB larger than the last:
         the caching allocator keeps every block, so reserved (and NVML's
         figure) grows while allocated stays flat: not a leak
  oom    holds 2 GiB, at OOM_AT_S seconds asks for 1 TiB (an out-of-memory
         error, caught), holds 10 s more, exits
  oomstart  starts CUDA while the others hold memory and, OOMSTART_AFTER_S
         (1.3 s) later, asks for more than is free, without catching the
         error: the process dies of it. Its first report is the OOM's (the
         reporter's interval is 60 s), sent by the OOM observer or at exit;
         one poll (1 s) has listed it by then, none reported for it before
  bench  the package's overhead: a training-like step timed in alternating
         blocks with and without the reporter, and the cost of one report

Every MARK_EVERY_S seconds leak and cache print a mark: torch.cuda.
memory_allocated()/memory_reserved() and, at the same moment (nothing
allocates in between), a report sent with the same figures; then they pause
3 s so the daemon's snapshots show exactly that report.
"""
import json, os, sys, time

kind, secs = sys.argv[1], float(sys.argv[2])
start = time.time()
end = start + secs

import torch  # noqa: E402
import gpumemd_torch  # noqa: E402

MiB = 1 << 20


def out(**kw):
    kw.setdefault("t", time.time())
    print(json.dumps(kw), flush=True)


def mark(n):
    """The process's own view and a report of the same figures, together."""
    torch.cuda.synchronize()
    a, r = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    sent = gpumemd_torch._reporter.report_once() if gpumemd_torch._reporter else False
    out(mark=n, allocated=a, reserved=r, sent=bool(sent))
    time.sleep(3)


def main():
    if kind == "bench":
        return bench()
    rep = gpumemd_torch.start()
    torch.cuda.init()
    x = torch.ones(64 * MiB, dtype=torch.uint8, device="cuda")  # a context and a first block
    out(ready=os.getpid(), reporter=rep is not None)
    every = float(os.environ.get("MARK_EVERY_S", "10"))
    next_mark, n, k = time.time() + every, 0, 0
    keep = []
    oom_at = start + float(os.environ.get("OOM_AT_S", "60"))
    oom_done = False
    while time.time() < end:
        if kind == "leak":
            keep.append(torch.ones(4 * MiB, dtype=torch.uint8, device="cuda"))
            time.sleep(0.5)
        elif kind == "cache":
            k += 1
            t = torch.ones((k + 1) * 2 * MiB, dtype=torch.uint8, device="cuda")
            del t
            time.sleep(1.0)
        elif kind == "oom":
            if not oom_done and time.time() >= oom_at:
                hold = torch.ones(2 << 30, dtype=torch.uint8, device="cuda")
                time.sleep(2)  # a poll sees it holding 2 GiB
                try:
                    torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
                    out(oom=False)
                except torch.cuda.OutOfMemoryError as e:
                    out(oom=True, ooms=torch.cuda.memory_stats()["num_ooms"], error=str(e)[:200])
                oom_done = True
                time.sleep(10)
                del hold
                return
            time.sleep(0.2)
        if kind in ("leak", "cache") and time.time() >= next_mark:
            n += 1
            mark(n)
            next_mark = time.time() + every
    del x


def oomstart():
    """Dies of an uncaught OOM about a second after CUDA starts."""
    gpumemd_torch.start(interval=60.0)
    out(ready=os.getpid())
    torch.cuda.init()
    x = torch.ones(64 * MiB, dtype=torch.uint8, device="cuda")  # the context
    torch.cuda.synchronize()
    t0 = time.time()
    out(cuda_at=t0)
    time.sleep(max(0.0, t0 + float(os.environ.get("OOMSTART_AFTER_S", "1.3")) - time.time()))
    free, total = torch.cuda.mem_get_info()
    out(oom_at=time.time(), free=free, total=total, asking=free + (1 << 30))
    torch.empty(free + (1 << 30), dtype=torch.uint8, device="cuda")  # raises, uncaught
    out(oom=False, x=int(x.numel()))


def bench():
    """Step time with and without the reporter, in alternating blocks (the
    GPU's clocks drift; alternating spreads it), and one report's cost."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def step():
        h = a
        for _ in range(8):
            h = torch.relu(h @ w)  # fresh activations each step: allocator traffic
        return h.sum()

    def block(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / n

    for _ in range(20):
        step()
    # Blocks of about 3 s, so each "on" block holds a report or two at the
    # real 2 s interval.
    n = max(10, int(3.0 / block(20)))
    off, on = [], []
    for i in range(int(os.environ.get("BENCH_BLOCKS", "6"))):
        gpumemd_torch.stop()
        off.append(block(n))
        r = gpumemd_torch.start(interval=2.0)
        on.append(block(n))
    gpumemd_torch.stop()
    r = gpumemd_torch._Reporter(os.environ.get("GPUMEMD_SOCKET", gpumemd_torch.DEFAULT_SOCKET), 2.0)
    n = 500
    t = time.perf_counter()
    for _ in range(n):
        r.report_once()
    per_report = (time.perf_counter() - t) / n
    off_s, on_s = sorted(off)[len(off) // 2], sorted(on)[len(on) // 2]
    out(
        bench=True,
        step_s_off=off_s,
        step_s_on=on_s,
        step_delta_pct=100.0 * (on_s - off_s) / off_s,
        report_s=per_report,
        report_share_pct=100.0 * per_report / 2.0,
        reports_sent=r.sent,
        blocks=len(off),
        steps_per_block=n,
    )


if kind == "oomstart":
    oomstart()  # its OOM must reach the interpreter's exit uncaught
    sys.exit(0)
try:
    main()
except Exception as e:  # a workload failure is a finding, not a hang
    out(error=repr(e))
    sys.exit(1)
