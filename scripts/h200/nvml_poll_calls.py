#!/usr/bin/env python3
"""What each NVML call of gpumemd's poll costs on GPU 0, with whatever CUDA
processes are running: mean wall time over ROUNDS calls through ctypes, one
JSON line per call (issue 21: where the idle poll's NVML time goes).

Usage: nvml_poll_calls.py [LIBRARY] [ROUNDS] [COLD_SECONDS]
       (libnvidia-ml.so.1, 300, 0)
With COLD_SECONDS > 0 it also runs the poll's sequence once a second, as
the daemon does, and prints each call's median over those seconds: a call
made once a second finds cold caches, and can cost more than in a loop.
The sequence before issue 21 and the one since (no count/handle/UUID, the
compute list in one pre-sized call) take turns, a second each; lines of
the latter start "cold 1/s: after: ".
Runs against tests/fake-nvml's libfake_nvml.so too (set FAKE_NVML_SCENARIO).
"""
import ctypes as C
import json
import sys
import time

CODES = {0: "SUCCESS", 1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED",
         4: "NO_PERMISSION", 6: "NOT_FOUND", 7: "INSUFFICIENT_SIZE", 13: "FUNCTION_NOT_FOUND"}


class ProcInfo(C.Structure):
    # nvmlProcessInfo_t (v2/v3 layout): pid, usedGpuMemory, gpuInstanceId, computeInstanceId.
    _fields_ = [("pid", C.c_uint), ("usedGpuMemory", C.c_ulonglong),
                ("gpuInstanceId", C.c_uint), ("computeInstanceId", C.c_uint)]


class UtilSample(C.Structure):
    _fields_ = [("pid", C.c_uint), ("timeStamp", C.c_ulonglong), ("smUtil", C.c_uint),
                ("memUtil", C.c_uint), ("encUtil", C.c_uint), ("decUtil", C.c_uint)]


class MemV2(C.Structure):
    _fields_ = [("version", C.c_uint), ("total", C.c_ulonglong), ("reserved", C.c_ulonglong),
                ("free", C.c_ulonglong), ("used", C.c_ulonglong)]


def emit(**kw):
    print(json.dumps(kw), flush=True)


def timed(label, fn, rounds):
    rc = fn()
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn()
    us = (time.perf_counter() - t0) / rounds * 1e6
    emit(call=label, rc=rc, rc_name=CODES.get(rc, str(rc)), us=round(us, 2), rounds=rounds)
    return rc


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "libnvidia-ml.so.1"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    lib = C.CDLL(path)
    if lib.nvmlInit_v2() != 0:
        emit(call="nvmlInit_v2", rc=-1)
        return 1
    h = C.c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(h))
    n = C.c_uint(0)
    timed("nvmlDeviceGetCount_v2", lambda: lib.nvmlDeviceGetCount_v2(C.byref(n)), rounds)
    timed("nvmlDeviceGetHandleByIndex_v2", lambda: lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(C.c_void_p())), rounds)
    buf = C.create_string_buffer(96)
    timed("nvmlDeviceGetUUID", lambda: lib.nvmlDeviceGetUUID(h, buf, 96), rounds)
    mem = MemV2()
    mem.version = C.sizeof(MemV2) | (2 << 24)
    timed("nvmlDeviceGetMemoryInfo_v2", lambda: lib.nvmlDeviceGetMemoryInfo_v2(h, C.byref(mem)), rounds)
    cur, pend = C.c_uint(0), C.c_uint(0)
    timed("nvmlDeviceGetMigMode", lambda: lib.nvmlDeviceGetMigMode(h, C.byref(cur), C.byref(pend)), rounds)
    for kind in ("Compute", "Graphics", "MPSCompute"):
        name = f"nvmlDeviceGet{kind}RunningProcesses_v3"
        fn = getattr(lib, name)
        cnt = C.c_uint(0)
        timed(f"{name} (size query, count=0)", lambda: fn(h, C.byref(C.c_uint(0)), None), rounds)
        fn(h, C.byref(cnt), None)
        cap = cnt.value + 8
        arr = (ProcInfo * cap)()

        def fill():
            c = C.c_uint(cap)
            return fn(h, C.byref(c), arr)
        rc = timed(f"{name} (one call, buffer of {cap})", fill, rounds)
        emit(call=f"{name} processes", count=cnt.value, rc=rc)
    samples = C.c_uint(0)
    rc = lib.nvmlDeviceGetProcessUtilization(h, None, C.byref(samples), C.c_ulonglong(0))
    emit(call="nvmlDeviceGetProcessUtilization (size)", rc=rc, count=samples.value)
    cap = max(samples.value, 1) + 8
    arr = (UtilSample * cap)()
    last = int(time.time() * 1e6) - 10_000_000

    def util():
        c = C.c_uint(cap)
        return lib.nvmlDeviceGetProcessUtilization(h, arr, C.byref(c), C.c_ulonglong(last))
    timed("nvmlDeviceGetProcessUtilization (buffer, last 10 s)", util, max(rounds // 30, 5))
    cold = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if cold > 0:
        cold_sequence(lib, h, cold)
    lib.nvmlShutdown()
    return 0


SYMBOLS = {"ecc counter": ("nvmlDeviceGetTotalEccErrors",), "remapped rows": ("nvmlDeviceGetRemappedRows",)}


def cold_sequence(lib, h, seconds):
    """The poll's calls once a second for `seconds`; medians per call.

    Two sequences take turns, one a second: "before" is the poll before
    issue 21 (count, handle, UUID, memory, the compute list as a size query
    then a fill, two health reads), "after" is the poll since (memory, the
    compute list in one call into a buffer sized from the last count as
    gpumemd sizes it: max(8, n*5/4+4), the same health reads); the count,
    handle and UUID are read every 30th poll only, which is left out here.
    """
    mem = MemV2()
    mem.version = C.sizeof(MemV2) | (2 << 24)
    arr = (ProcInfo * 64)()
    u64 = C.c_ulonglong(0)
    last = C.c_uint(0)
    lib.nvmlDeviceGetComputeRunningProcesses_v3(h, C.byref(last), None)
    room = max(8, last.value * 5 // 4 + 4)
    presized = (ProcInfo * room)()
    health = [
        ("ecc counter", lambda: lib.nvmlDeviceGetTotalEccErrors(h, 0, 0, C.byref(u64))),
        ("remapped rows", lambda: lib.nvmlDeviceGetRemappedRows(
            h, C.byref(C.c_uint()), C.byref(C.c_uint()), C.byref(C.c_uint()), C.byref(C.c_uint()))),
    ]
    before = [
        ("count", lambda: lib.nvmlDeviceGetCount_v2(C.byref(C.c_uint(0)))),
        ("handle", lambda: lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(C.c_void_p()))),
        ("uuid", lambda: lib.nvmlDeviceGetUUID(h, C.create_string_buffer(96), 96)),
        ("memory_v2", lambda: lib.nvmlDeviceGetMemoryInfo_v2(h, C.byref(mem))),
        ("compute size query", lambda: lib.nvmlDeviceGetComputeRunningProcesses_v3(h, C.byref(C.c_uint(0)), None)),
        ("compute fill", lambda: lib.nvmlDeviceGetComputeRunningProcesses_v3(h, C.byref(C.c_uint(64)), arr)),
    ] + health
    after = [
        ("memory_v2", lambda: lib.nvmlDeviceGetMemoryInfo_v2(h, C.byref(mem))),
        (f"compute one call (buffer of {room})",
         lambda: lib.nvmlDeviceGetComputeRunningProcesses_v3(h, C.byref(C.c_uint(room)), presized)),
    ] + health
    # A library without a symbol (an old stand-in) skips that call.
    usable = lambda calls: [(n, f) for n, f in calls if all(hasattr(lib, s) for s in SYMBOLS.get(n, ()))]
    seqs = {"": usable(before), "after: ": usable(after)}
    times = {(tag, name): [] for tag, calls in seqs.items() for name, _ in calls}
    total = {tag: [] for tag in seqs}
    for second in range(seconds):
        tag = "" if second % 2 == 0 else "after: "
        t_start = time.perf_counter()
        for name, fn in seqs[tag]:
            t0 = time.perf_counter()
            fn()
            times[(tag, name)].append((time.perf_counter() - t0) * 1e6)
        total[tag].append((time.perf_counter() - t_start) * 1e6)
        time.sleep(max(0.0, 1.0 - (time.perf_counter() - t_start)))
    med = lambda v: sorted(v)[len(v) // 2]
    for (tag, name), v in times.items():
        if v:
            emit(call=f"cold 1/s: {tag}{name}", us_median=round(med(v), 1), us_max=round(max(v), 1), rounds=len(v))
    for tag, v in total.items():
        if v:
            emit(call=f"cold 1/s: {tag}whole sequence", us_median=round(med(v), 1), rounds=len(v))


if __name__ == "__main__":
    sys.exit(main())
