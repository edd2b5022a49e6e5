#!/usr/bin/env python3
"""Every NVML memory-health call gpumemd makes, on GPU 0: its real answer
and its cost (mean wall time over ROUNDS calls, through ctypes), one JSON
line per call. Also the cost of a trivial call (nvmlErrorString), which is
the ctypes overhead included in every figure.

Usage: nvml_health_calls.py [LIBRARY] [ROUNDS]   (libnvidia-ml.so.1, 1000)
Runs against tests/fake-nvml's libfake_nvml.so too (set FAKE_NVML_SCENARIO).
Never blocks: the event wait uses a 0 ms timeout.
"""
import ctypes as C
import json
import sys
import time

CODES = {0: "SUCCESS", 1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED",
         4: "NO_PERMISSION", 6: "NOT_FOUND", 7: "INSUFFICIENT_SIZE", 10: "TIMEOUT",
         13: "FUNCTION_NOT_FOUND", 15: "GPU_IS_LOST", 999: "UNKNOWN"}
MEMORY_TEMP_FIELD = 82
XID_CRITICAL = 0x8
ECC_EVENTS = 0x1 | 0x2


class FieldValue(C.Structure):
    _fields_ = [("fieldId", C.c_uint), ("scopeId", C.c_uint), ("timestamp", C.c_longlong),
                ("latencyUsec", C.c_longlong), ("valueType", C.c_int), ("nvmlReturn", C.c_int),
                ("value", C.c_ulonglong)]


class EventData(C.Structure):
    _fields_ = [("device", C.c_void_p), ("eventType", C.c_ulonglong), ("eventData", C.c_ulonglong),
                ("gpuInstanceId", C.c_uint), ("computeInstanceId", C.c_uint)]


def emit(**kw):
    print(json.dumps(kw), flush=True)


def measure(lib, name, args_fn, answer_fn, rounds, label=None):
    """Calls `name` once for its answer, then `rounds` times for its cost."""
    fn = getattr(lib, name, None)
    label = label or name
    if fn is None:
        emit(call=label, rc=None, rc_name="MISSING_SYMBOL", answer="", us=None, rounds=0)
        return None
    args = args_fn()
    rc = fn(*args)
    answer = answer_fn(args) if rc == 0 else ""
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn(*args_fn())
    us = (time.perf_counter() - t0) / rounds * 1e6
    emit(call=label, rc=rc, rc_name=CODES.get(rc, str(rc)), answer=answer, us=round(us, 2), rounds=rounds)
    return rc


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "libnvidia-ml.so.1"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    lib = C.CDLL(path)
    rc = lib.nvmlInit_v2()
    if rc != 0:
        emit(call="nvmlInit_v2", rc=rc, rc_name=CODES.get(rc, str(rc)), answer="", us=None, rounds=1)
        return 1
    h = C.c_void_p()
    rc = lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(h))
    if rc != 0:
        emit(call="nvmlDeviceGetHandleByIndex_v2", rc=rc, rc_name=CODES.get(rc, str(rc)), answer="", us=None, rounds=1)
        return 1
    lib.nvmlErrorString.restype = C.c_char_p
    t0 = time.perf_counter()
    for _ in range(rounds):
        lib.nvmlErrorString(0)
    emit(call="ctypes overhead (nvmlErrorString)", rc=0, rc_name="SUCCESS", answer="",
         us=round((time.perf_counter() - t0) / rounds * 1e6, 2), rounds=rounds)

    u32 = lambda: C.c_uint(0)
    u64 = lambda: C.c_ulonglong(0)
    measure(lib, "nvmlDeviceGetEccMode", lambda: (h, C.byref(u32()), C.byref(u32())),
            lambda a: f"current={a[1]._obj.value} pending={a[2]._obj.value}", rounds)
    for sev, sname in ((0, "corrected"), (1, "uncorrected")):
        for cnt, cname in ((0, "volatile"), (1, "aggregate")):
            measure(lib, "nvmlDeviceGetTotalEccErrors", lambda: (h, sev, cnt, C.byref(u64())),
                    lambda a: f"{a[3]._obj.value}", rounds, f"nvmlDeviceGetTotalEccErrors({sname},{cname})")
    for sev, sname in ((0, "corrected"), (1, "uncorrected")):
        # Location 2 = DRAM (device memory).
        measure(lib, "nvmlDeviceGetMemoryErrorCounter", lambda: (h, sev, 0, 2, C.byref(u64())),
                lambda a: f"{a[4]._obj.value}", rounds, f"nvmlDeviceGetMemoryErrorCounter({sname},volatile,DRAM)")
    measure(lib, "nvmlDeviceGetRemappedRows",
            lambda: (h, C.byref(u32()), C.byref(u32()), C.byref(u32()), C.byref(u32())),
            lambda a: "correctable={} uncorrectable={} pending={} failure={}".format(
                *(x._obj.value for x in a[1:])), rounds)
    for cause, cname in ((0, "multiple single-bit"), (1, "double-bit")):
        measure(lib, "nvmlDeviceGetRetiredPages", lambda: (h, cause, C.byref(u32()), C.byref(u64())),
                lambda a: f"{a[2]._obj.value} pages", rounds, f"nvmlDeviceGetRetiredPages({cname})")
    measure(lib, "nvmlDeviceGetRetiredPagesPendingStatus", lambda: (h, C.byref(u32())),
            lambda a: f"pending={a[1]._obj.value}", rounds)

    def temp_args():
        v = FieldValue()
        v.fieldId = MEMORY_TEMP_FIELD
        return (h, 1, C.byref(v))

    def temp_answer(a):
        v = a[2]._obj
        if v.nvmlReturn != 0:
            return f"field rc={CODES.get(v.nvmlReturn, v.nvmlReturn)}"
        return f"memory temperature = {v.value & 0xffffffff} C (type {v.valueType})"

    measure(lib, "nvmlDeviceGetFieldValues", temp_args, temp_answer, rounds, "nvmlDeviceGetFieldValues(MEMORY_TEMP)")
    measure(lib, "nvmlDeviceGetSupportedEventTypes", lambda: (h, C.byref(u64())),
            lambda a: f"types=0x{a[1]._obj.value:x}", rounds)

    # The event set: created and registered once, waited on with 0 ms.
    s = C.c_void_p()
    rc = lib.nvmlEventSetCreate(C.byref(s))
    emit(call="nvmlEventSetCreate", rc=rc, rc_name=CODES.get(rc, str(rc)), answer="", us=None, rounds=1)
    if rc == 0:
        types = C.c_ulonglong(0)
        lib.nvmlDeviceGetSupportedEventTypes(h, C.byref(types))
        for name, want in (("Xid critical", XID_CRITICAL), ("Xid critical + ECC", XID_CRITICAL | ECC_EVENTS)):
            t0 = time.perf_counter()
            rc = lib.nvmlDeviceRegisterEvents(h, C.c_ulonglong(want & (types.value or want)), s)
            emit(call=f"nvmlDeviceRegisterEvents({name})", rc=rc, rc_name=CODES.get(rc, str(rc)),
                 answer=f"supported=0x{types.value:x}", us=round((time.perf_counter() - t0) * 1e6, 2), rounds=1)
        lib.nvmlEventSetWait_v2.argtypes = [C.c_void_p, C.POINTER(EventData), C.c_uint]
        measure(lib, "nvmlEventSetWait_v2", lambda: (s, C.byref(EventData()), 0),
                lambda a: f"event type=0x{a[1]._obj.eventType:x} data={a[1]._obj.eventData}", rounds,
                "nvmlEventSetWait_v2(timeout 0)")
        lib.nvmlEventSetFree(s)
    lib.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
