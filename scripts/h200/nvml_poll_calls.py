#!/usr/bin/env python3
"""What each NVML call of gpumemd's poll costs on GPU 0, with whatever CUDA
processes are running: mean wall time over ROUNDS calls through ctypes, one
JSON line per call (issue 21: where the idle poll's NVML time goes).

Usage: nvml_poll_calls.py [LIBRARY] [ROUNDS]   (libnvidia-ml.so.1, 300)
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
    lib.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
