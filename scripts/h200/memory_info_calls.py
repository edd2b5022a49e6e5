#!/usr/bin/env python3
"""nvmlDeviceGetMemoryInfo (v1) against _v2 on GPU 0, once a second each in
turn, as a daemon calls them (issue 21: v2's `reserved` figure may cost more
than the poll can spare). Prints each call's median and max wall time.

Usage: memory_info_calls.py [LIBRARY] [ROUNDS]   (libnvidia-ml.so.1, 15)
"""
import ctypes as C
import statistics
import sys
import time


class MemV1(C.Structure):
    _fields_ = [("total", C.c_ulonglong), ("free", C.c_ulonglong), ("used", C.c_ulonglong)]


class MemV2(C.Structure):
    _fields_ = [("version", C.c_uint), ("total", C.c_ulonglong), ("reserved", C.c_ulonglong),
                ("free", C.c_ulonglong), ("used", C.c_ulonglong)]


def main():
    lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libnvidia-ml.so.1")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    assert lib.nvmlInit_v2() == 0
    dev = C.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(dev)) == 0
    v1, v2 = MemV1(), MemV2()
    v2.version = C.sizeof(MemV2) | (2 << 24)
    times = {"v1": [], "v2": []}
    for _ in range(rounds):
        for name, fn, arg in (("v1", lib.nvmlDeviceGetMemoryInfo, v1), ("v2", lib.nvmlDeviceGetMemoryInfo_v2, v2)):
            t = time.perf_counter()
            rc = fn(dev, C.byref(arg))
            times[name].append((time.perf_counter() - t) * 1e6)
            assert rc == 0, (name, rc)
            time.sleep(0.5)
    for name, ts in times.items():
        print(f"memory_info {name}: median {statistics.median(ts):.1f} us, max {max(ts):.1f} us, {len(ts)} calls")
    print(f"v1 used {v1.used} free {v1.free}; v2 used {v2.used} reserved {v2.reserved} free {v2.free}")
    lib.nvmlShutdown()


main()
