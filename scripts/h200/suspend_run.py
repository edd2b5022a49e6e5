"""Drives and judges scripts/h200/suspend.sh once gpumemd and the two
workloads (suspend_workload.py idle/busy) are running. Every wait has a
deadline; the verdicts go to OUT/summary.txt as PASS/FAIL lines with the
measured numbers, the raw observations to OUT/observations.json.

Usage: python3 suspend_run.py --gpumemd BIN --port N --work DIR --out DIR
"""
import argparse, json, os, re, subprocess, sys, time, urllib.request

GIB = 1 << 30
MIB = 1 << 20

p = argparse.ArgumentParser()
p.add_argument("--gpumemd", required=True)
p.add_argument("--port", type=int, required=True)
p.add_argument("--work", required=True)
p.add_argument("--out", required=True)
a = p.parse_args()
base = f"http://127.0.0.1:{a.port}"
lines, obs = [], {}


def verdict(ok, name, detail):
    line = f"{'PASS' if ok else 'FAIL'} {name}: {detail}"
    lines.append(line)
    print(line, flush=True)
    return ok


def finish(code=None):
    with open(f"{a.out}/summary.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(f"{a.out}/observations.json", "w") as f:
        json.dump(obs, f, indent=1)
    sys.exit(code if code is not None else (1 if any(l.startswith("FAIL") for l in lines) else 0))


def wait(what, fn, timeout, every=0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            v = fn()
        except Exception as e:  # a transient read error is not the answer
            obs.setdefault("transient_errors", []).append(f"{what}: {e}")
            v = None
        if v:
            return v
        time.sleep(every)
    verdict(False, what, f"not within {timeout}s")
    return None


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def smi(args):
    r = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=30)
    return [l.strip() for l in r.stdout.splitlines() if l.strip()]


def smi_used_mib():
    return sum(int(x) for x in smi(["--query-gpu=memory.used"]))


def smi_apps():
    apps = {}
    for l in smi(["--query-compute-apps=pid,used_memory"]):
        pid, mib = (x.strip() for x in l.split(","))
        apps[int(pid)] = int(mib) if mib.isdigit() else 0
    return apps


def get(path):
    return urllib.request.urlopen(base + path, timeout=10).read().decode()


def gm_used_bytes():
    s = json.loads(get("/api/v1/snapshot"))
    return sum((d.get("memory") or {}).get("used_bytes", 0) for d in s["devices"])


def audit():
    out = []
    for l in read(f"{a.work}/state/reclaim-audit.jsonl").splitlines():
        try:
            out.append(json.loads(l))
        except ValueError:
            pass
    return out


def log_event(message):
    for l in read(f"{a.out}/gpumemd.log").splitlines():
        try:
            e = json.loads(l)
        except ValueError:
            continue
        # The JSON log is flat (msg and the fields at the top level).
        if e.get("msg") == message:
            return e
    return None


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def busy_iters():
    t = read(f"{a.work}/busy.iters").strip()
    return int(t) if t.isdigit() else 0


def main():
    if not wait("gpumemd is ready", lambda: get("/-/ready"), 20):
        finish()
    # 1. Both workloads allocated; idle has its checksum.
    def started():
        m = re.search(r"CHECKSUM-BEFORE (\S+)", read(f"{a.out}/idle.log"))
        return m if m and read(f"{a.work}/idle.pid") and read(f"{a.work}/busy.pid") else None


    before = wait("workloads start", started, 120)
    if not before:
        finish()
    checksum_before = before.group(1)
    idle, busy = int(read(f"{a.work}/idle.pid")), int(read(f"{a.work}/busy.pid"))
    obs.update(idle_pid=idle, busy_pid=busy, checksum_before=checksum_before)
    wait("both listed by nvidia-smi", lambda: {idle, busy} <= set(smi_apps()), 30)
    time.sleep(3)  # two polls of gpumemd with both processes in place
    apps0, used0, gm0 = smi_apps(), smi_used_mib(), gm_used_bytes()
    obs.update(before={"smi_apps_mib": apps0, "smi_used_mib": used0, "gpumemd_used_bytes": gm0})

    # 2. The rule suspends idle (never busy).
    def suspended():
        for e in audit():
            if e.get("action") == "suspend" and e.get("pid") == idle and e.get("result") != "dry_run":
                return e
        return None

    line = wait("the idle-holder rule suspends idle", suspended, 150, every=1)
    obs["suspend_audit"] = line
    if not line or not verdict(line.get("result") == "done", "suspend of idle", json.dumps(
            {k: line.get(k) for k in ("result", "reason", "rule", "used_bytes")})):
        finish()
    time.sleep(3)
    apps1, used1, gm1 = smi_apps(), smi_used_mib(), gm_used_bytes()
    obs.update(suspended={"smi_apps_mib": apps1, "smi_used_mib": used1, "gpumemd_used_bytes": gm1})
    idle_mib = apps0.get(idle, 0)
    drop_smi, drop_gm = used0 - used1, (gm0 - gm1) / MIB
    verdict(idle not in apps1, "idle left nvidia-smi's process list", f"apps now {sorted(apps1)}")
    verdict(drop_smi >= 0.9 * idle_mib, "device used drops by idle's bytes (nvidia-smi)",
            f"{used0} -> {used1} MiB, drop {drop_smi} MiB, idle held {idle_mib} MiB")
    verdict(abs(drop_gm - drop_smi) <= max(64, 0.02 * drop_smi), "gpumemd agrees with nvidia-smi",
            f"gpumemd drop {drop_gm:.0f} MiB, nvidia-smi drop {drop_smi} MiB")
    verdict(alive(idle), "idle is alive while suspended", f"pid {idle}")
    metrics = get("/metrics")
    want = re.compile(r'^gpumem_process_suspended\{[^}]*pid="%d"[^}]*\} 1$' % idle, re.M)
    verdict(bool(want.search(metrics)), "gpumem_process_suspended shows idle",
            "; ".join(l for l in metrics.splitlines() if "suspended" in l and not l.startswith("#")))
    i0 = busy_iters()
    time.sleep(3)
    i1 = busy_iters()
    touched = [e for e in audit() if e.get("pid") == busy]
    verdict(busy in apps1 and i1 > i0 and not touched, "busy is left alone",
            f"listed={busy in apps1}, iterations {i0} -> {i1}, audit lines {len(touched)}")

    # 3. gpumemd resume PID brings it back.
    t = time.time()
    r = subprocess.run([a.gpumemd, "resume", str(idle), "--url", base, "--json"], capture_output=True, text=True, timeout=150)
    resume_wall = time.time() - t
    obs["resume_cli"] = {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "seconds": resume_wall}
    verdict(r.returncode == 0 and '"result":"done"' in r.stdout, "gpumemd resume PID",
            f"rc {r.returncode}, {resume_wall:.1f}s, {(r.stdout or r.stderr).strip()}")
    wait("idle is listed by nvidia-smi again", lambda: idle in smi_apps(), 30)
    time.sleep(2)
    apps2, used2 = smi_apps(), smi_used_mib()
    obs.update(resumed={"smi_apps_mib": apps2, "smi_used_mib": used2})
    verdict(used2 - used1 >= 0.9 * idle_mib, "device used is back", f"{used1} -> {used2} MiB")
    open(f"{a.work}/idle.check", "w").close()
    after = wait("idle recomputes its checksum", lambda: re.search(r"CHECKSUM-AFTER (\S+)", read(f"{a.out}/idle.log")), 90)
    if after:
        obs["checksum_after"] = after.group(1)
        verdict(after.group(1) == checksum_before, "same checksum after resume",
                f"before {checksum_before}, after {after.group(1)}")

    # 4. Times per GiB, as gpumemd measured the driver calls.
    cp, rs = log_event("suspend: checkpointed"), log_event("resume: restored and unlocked")
    obs.update(checkpoint_event=cp, restore_event=rs)
    if cp and rs:
        gib = float(cp["bytes"]) / GIB
        lines.append(f"NUMBERS idle_bytes={cp['bytes']} ({gib:.2f} GiB) checkpoint_s={float(cp['seconds']):.2f} "
                     f"({float(cp['seconds']) / gib:.3f} s/GiB) restore_s={float(rs['seconds']):.2f} "
                     f"({float(rs['seconds']) / gib:.3f} s/GiB) resume_cli_wall_s={resume_wall:.2f} "
                     f"device_used_mib {used0} -> {used1} -> {used2}")
    else:
        verdict(False, "checkpoint/restore times in gpumemd's log", f"checkpoint {cp}, restore {rs}")
    finish()


try:
    main()
except Exception as e:  # the summary is written whatever happens
    verdict(False, "the run itself", repr(e))
    finish()
