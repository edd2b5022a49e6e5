"""Compares a gpumemd snapshot (JSON) with nvidia-smi's view of the same moment.

Usage: python3 compare.py SNAPSHOT.json GPU.csv APPS.csv
  GPU.csv:  nvidia-smi --query-gpu=uuid,memory.total,memory.reserved,memory.used,memory.free --format=csv,noheader,nounits
  APPS.csv: nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits
Prints one PASS/FAIL line per check (MiB, to 1 MiB) and exits 1 on any FAIL.
"""
import json, sys

snap = json.load(open(sys.argv[1]))
gpus = [l.split(", ") for l in open(sys.argv[2]).read().strip().splitlines()]
apps = [l.split(", ") for l in open(sys.argv[3]).read().strip().splitlines() if l.strip()]
MIB = 1 << 20
bad = 0


def check(what, ours, theirs, tol=1):
    global bad
    ok = ours is not None and abs(ours - theirs) <= tol
    bad += not ok
    print(f"{'PASS' if ok else 'FAIL'} {what}: gpumemd {ours} MiB, nvidia-smi {theirs} MiB")


devs = {d["uuid"]: d for d in snap["devices"]}
for uuid, total, reserved, used, free in gpus:
    d = devs.get(uuid)
    if d is None:
        print(f"FAIL {uuid}: not in the gpumemd snapshot")
        bad += 1
        continue
    m = d["memory"]
    mib = lambda k: None if m.get(k) is None else m[k] // MIB
    check(f"{uuid} total", mib("total_bytes"), int(total))
    check(f"{uuid} reserved", mib("reserved_bytes"), int(reserved))
    check(f"{uuid} used", mib("used_bytes"), int(used))
    check(f"{uuid} free", mib("free_bytes"), int(free))
    h = d["holders"]
    parts = h["live"] + h["zombie"] + h["exited"] + h["unattributed"]
    ok = parts == m["used_bytes"]
    bad += not ok
    print(f"{'PASS' if ok else 'FAIL'} {uuid} holder split {h} adds up to used {m['used_bytes']}")
for uuid, pid, used in apps:
    d = devs.get(uuid, {"processes": []})
    p = next((p for p in d["processes"] if str(p["pid"]) == pid), None)
    if p is None:
        print(f"FAIL pid {pid} on {uuid}: not listed by gpumemd")
        bad += 1
        continue
    check(f"pid {pid} ({p['comm']}, {p['user']}, holder {p['holder']}, state {p['state']})", (p["used_bytes"] or 0) // MIB, int(used))
sys.exit(1 if bad else 0)
