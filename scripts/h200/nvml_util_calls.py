#!/usr/bin/env python3
"""What knowing "was the GPU busy at all" costs on GPU 0, against the
per-process utilisation samples (issue 21: the per-process call costs about
1.5 ms; a device-level answer may say "nothing ran" for much less). Each
call is made once a second in turn, as a daemon makes it; prints medians,
maxima and what came back.

Usage: nvml_util_calls.py [LIBRARY] [ROUNDS]   (libnvidia-ml.so.1, 12)
"""
import ctypes as C
import statistics
import sys
import time


class Rates(C.Structure):
    _fields_ = [("gpu", C.c_uint), ("memory", C.c_uint)]


class Value(C.Union):
    _fields_ = [("d", C.c_double), ("ui", C.c_uint), ("ul", C.c_ulong), ("ull", C.c_ulonglong),
                ("sll", C.c_longlong), ("si", C.c_int), ("us", C.c_ushort)]


class Sample(C.Structure):
    _fields_ = [("timeStamp", C.c_ulonglong), ("sampleValue", Value)]


class UtilSample(C.Structure):
    _fields_ = [("pid", C.c_uint), ("timeStamp", C.c_ulonglong), ("smUtil", C.c_uint),
                ("memUtil", C.c_uint), ("encUtil", C.c_uint), ("decUtil", C.c_uint)]


GPU_UTILIZATION_SAMPLES = 1


def main():
    lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libnvidia-ml.so.1")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    assert lib.nvmlInit_v2() == 0
    dev = C.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(dev)) == 0
    times, seen = {}, {}
    last = 0
    for _ in range(rounds):
        r = Rates()
        t = time.perf_counter()
        rc = lib.nvmlDeviceGetUtilizationRates(dev, C.byref(r))
        times.setdefault("utilization rates", []).append((time.perf_counter() - t) * 1e6)
        seen["rates"] = (rc, r.gpu, r.memory)
        time.sleep(0.25)
        vt = C.c_int(0)
        n = C.c_uint(256)
        buf = (Sample * 256)()
        t = time.perf_counter()
        rc = lib.nvmlDeviceGetSamples(dev, GPU_UTILIZATION_SAMPLES, C.c_ulonglong(last), C.byref(vt), C.byref(n), buf)
        times.setdefault("samples (gpu util, since last, buffer 256)", []).append((time.perf_counter() - t) * 1e6)
        vals = [buf[i].sampleValue.ui for i in range(n.value)] if rc == 0 else []
        if rc == 0 and n.value:
            last = max(buf[i].timeStamp for i in range(n.value))
        seen["samples"] = (rc, n.value, max(vals) if vals else None)
        time.sleep(0.25)
        pn = C.c_uint(256)
        pbuf = (UtilSample * 256)()
        t = time.perf_counter()
        rc = lib.nvmlDeviceGetProcessUtilization(dev, pbuf, C.byref(pn), C.c_ulonglong(0))
        times.setdefault("process utilization (one call, since 0)", []).append((time.perf_counter() - t) * 1e6)
        seen["process"] = (rc, pn.value)
        time.sleep(0.5)
    for name, ts in times.items():
        print(f"{name}: median {statistics.median(ts):.1f} us, max {max(ts):.1f} us, {len(ts)} calls")
    print(seen)
    lib.nvmlShutdown()


main()
