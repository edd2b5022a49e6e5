#!/usr/bin/env python3
"""Issue 21, round 7: would one nvmlDeviceGetFieldValues call carrying the
four ECC totals (fields 3-6) beside the memory temperature (field 82) cost
less than the four nvmlDeviceGetTotalEccErrors calls gpumemd makes each
health read, and do both give the same counts? Thread CPU per call over
ROUNDS calls on GPU 0, one JSON line per variant.

Usage: health_fields_cost.py [LIBRARY] [ROUNDS]   (libnvidia-ml.so.1, 2000)
"""
import ctypes as C
import json
import sys
import time

FIELDS = {"ecc_sbe_vol": 3, "ecc_dbe_vol": 4, "ecc_sbe_agg": 5, "ecc_dbe_agg": 6, "memory_temp": 82}


class FieldValue(C.Structure):
    _fields_ = [("fieldId", C.c_uint), ("scopeId", C.c_uint), ("timestamp", C.c_longlong),
                ("latencyUsec", C.c_longlong), ("valueType", C.c_int), ("nvmlReturn", C.c_int),
                ("value", C.c_ulonglong)]


def cost(fn, rounds):
    fn()
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - t0) / rounds * 1e6, (time.thread_time() - c0) / rounds * 1e6


def main():
    lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libnvidia-ml.so.1")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    if lib.nvmlInit_v2() != 0:
        print(json.dumps({"error": "nvmlInit_v2"}))
        return 1
    h = C.c_void_p()
    if lib.nvmlDeviceGetHandleByIndex_v2(0, C.byref(h)) != 0:
        print(json.dumps({"error": "handle"}))
        return 1

    def fields(ids):
        arr = (FieldValue * len(ids))()
        for i, f in enumerate(ids):
            arr[i].fieldId = f
        rc = lib.nvmlDeviceGetFieldValues(h, len(ids), arr)
        return rc, [(a.fieldId, a.nvmlReturn, a.value) for a in arr]

    ecc = {}
    for name, (err, counter) in {"ecc_sbe_vol": (0, 0), "ecc_dbe_vol": (1, 0),
                                 "ecc_sbe_agg": (0, 1), "ecc_dbe_agg": (1, 1)}.items():
        v = C.c_ulonglong()
        rc = lib.nvmlDeviceGetTotalEccErrors(h, err, counter, C.byref(v))
        ecc[name] = (rc, v.value)
    rc, vals = fields(list(FIELDS.values()))
    print(json.dumps({"answers": {"total_ecc_errors": ecc, "field_values_rc": rc, "field_values": vals}}))

    def four_ecc():
        v = C.c_ulonglong()
        for err, counter in ((0, 0), (1, 0), (0, 1), (1, 1)):
            lib.nvmlDeviceGetTotalEccErrors(h, err, counter, C.byref(v))

    variants = {
        "field_values(memory_temp)": lambda: fields([82]),
        "field_values(memory_temp + 4 ecc)": lambda: fields(list(FIELDS.values())),
        "4 x total_ecc_errors": four_ecc,
        "field_values(memory_temp) + 4 x total_ecc_errors": lambda: (fields([82]), four_ecc()),
    }
    for name, fn in variants.items():
        wall, cpu = cost(fn, rounds)
        print(json.dumps({"variant": name, "wall_us": round(wall, 2), "cpu_us": round(cpu, 2), "rounds": rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
