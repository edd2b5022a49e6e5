#!/usr/bin/env python3
"""What knowing the process list costs on GPU 0, with the CUDA processes
that are running (issue 21): the compute list's size query (count only)
against the whole list, and the process-utilisation samples as one call
into a buffer sized from the last call against a size query plus a fill.
Each is called once a second in turn, as a daemon calls them, and its
median and max wall time printed.

Usage: nvml_list_calls.py [LIBRARY] [ROUNDS]   (libnvidia-ml.so.1, 15)
"""
import ctypes as C
import statistics
import sys
import time


class ProcInfo(C.Structure):
    _fields_ = [("pid", C.c_uint), ("usedGpuMemory", C.c_ulonglong),
                ("gpuInstanceId", C.c_uint), ("computeInstanceId", C.c_uint)]


class UtilSample(C.Structure):
    _fields_ = [("pid", C.c_uint), ("timeStamp", C.c_ulonglong), ("smUtil", C.c_uint),
                ("memUtil", C.c_uint), ("encUtil", C.c_uint), ("decUtil", C.c_uint)]


def timed(times, name, fn):
    t = time.perf_counter()
    rc = fn()
    times.setdefault(name, []).append((time.perf_counter() - t) * 1e6)
    return rc


def main():
    lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libnvidia-ml.so.1")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    assert lib.nvmlInit_v2() == 0
    dev = C.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(dev)) == 0
    compute = lib.nvmlDeviceGetComputeRunningProcesses_v3
    util = lib.nvmlDeviceGetProcessUtilization
    times, counts = {}, {}
    last_util = 0
    for _ in range(rounds):
        n = C.c_uint(0)
        rc = timed(times, "compute size query (count 0)", lambda: compute(dev, C.byref(n), None))
        counts["compute size query rc"] = rc
        counts["processes"] = n.value
        time.sleep(0.3)
        buf = (ProcInfo * 64)()
        m = C.c_uint(64)
        timed(times, "compute whole list (buffer of 64)", lambda: compute(dev, C.byref(m), buf))
        time.sleep(0.3)
        k = C.c_uint(0)
        timed(times, "utilization size query", lambda: util(dev, None, C.byref(k), C.c_ulonglong(last_util)))
        counts["utilization samples"] = k.value
        time.sleep(0.3)
        samples = (UtilSample * 256)()
        s = C.c_uint(256)
        rc = timed(times, "utilization one call (buffer of 256)",
                   lambda: util(dev, samples, C.byref(s), C.c_ulonglong(last_util)))
        counts["utilization one call rc"] = rc
        if rc == 0 and s.value:
            last_util = max(samples[i].timeStamp for i in range(s.value))
        time.sleep(0.3)
    for name, ts in times.items():
        print(f"{name}: median {statistics.median(ts):.1f} us, max {max(ts):.1f} us, {len(ts)} calls")
    print(counts)
    lib.nvmlShutdown()


main()
