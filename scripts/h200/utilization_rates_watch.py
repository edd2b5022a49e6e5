#!/usr/bin/env python3
"""What nvmlDeviceGetUtilizationRates says on GPU 0 poll after poll while
the CUDA processes there sleep (issue 21: gpumemd's idle watch trusts a 0 %
reading). Reads it every INTERVAL seconds for SECONDS and prints how often
each (return code, gpu %, memory %) came back, and the longest run of
all-zero readings.

Usage: utilization_rates_watch.py [LIBRARY] [SECONDS] [INTERVAL]
       (libnvidia-ml.so.1, 20, 0.25)
"""
import collections
import ctypes as C
import sys
import time


class Rates(C.Structure):
    _fields_ = [("gpu", C.c_uint), ("memory", C.c_uint)]


def main():
    lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libnvidia-ml.so.1")
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    every = float(sys.argv[3]) if len(sys.argv) > 3 else 0.25
    assert lib.nvmlInit_v2() == 0
    dev = C.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(dev)) == 0
    seen, run, longest, trail = collections.Counter(), 0, 0, []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        r = Rates()
        rc = lib.nvmlDeviceGetUtilizationRates(dev, C.byref(r))
        key = (rc, r.gpu, r.memory)
        seen[key] += 1
        trail.append(key)
        run = run + 1 if key == (0, 0, 0) else 0
        longest = max(longest, run)
        time.sleep(every)
    print(f"utilization rates over {secs:.0f} s every {every} s: {dict(seen)}; longest all-zero run {longest}")
    print("first 40 readings:", trail[:40])
    lib.nvmlShutdown()


main()
