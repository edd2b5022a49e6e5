"""Drives and judges scripts/h200/suspend_lock_load.sh (issue 16): the lock
time of a process running back-to-back matmuls, and the capability suspend
needs. Starts gpumemd itself, once per phase, with no rules: every suspend
is asked through `gpumemd suspend PID` so its time is measured end to end.

Phases (each a fresh daemon, so a hung call cannot leak into the next):
  lock-1s, lock-30s  suspend the busy process with lock_timeout 1s / 30s:
                     the seconds it took and the result (done, or failed
                     with CUDA_ERROR_TIMEOUT 909, or NOT_READY 600 as driver 580
                     answers); resumed when done; the
                     process must keep computing afterwards.
  cap-ptrace         gpumemd as root with only CAP_SYS_PTRACE (setpriv,
                     else capsh): suspend + resume the idle process.
  cap-none           gpumemd as root with no capability: the suspend must
                     fail with CUDA error 304 and leave the process running.
The idle process's checksum after all this must equal the one before.
Verdicts go to OUT/summary.txt (PASS/FAIL/SKIP lines with the numbers).

Usage: python3 suspend_lock_load.py --gpumemd BIN --work DIR --out DIR
  (env GPUMEMD_EXTRA_ARGS: extra daemon flags, for the stand-in dry run;
   DRYRUN=1: the stand-in checks no capability, so cap-none is SKIP)
"""
import argparse, json, os, shutil, socket, subprocess, sys, time, urllib.request

p = argparse.ArgumentParser()
p.add_argument("--gpumemd", required=True)
p.add_argument("--work", required=True)
p.add_argument("--out", required=True)
a = p.parse_args()
extra = os.environ.get("GPUMEMD_EXTRA_ARGS", "").split()
dry = os.environ.get("DRYRUN") == "1"
lines, obs = [], {}


def verdict(ok, name, detail):
    line = f"{'PASS' if ok else 'FAIL'} {name}: {detail}"
    if ok is None:
        line = f"SKIP {name}: {detail}"
    lines.append(line)
    print(line, flush=True)


def finish():
    with open(f"{a.out}/summary.txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(f"{a.out}/observations.json", "w") as f:
        json.dump(obs, f, indent=1)
    sys.exit(1 if any(l.startswith("FAIL") for l in lines) else 0)


def wait(fn, timeout, every=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception:
            pass
        time.sleep(every)
    return None


def read(path):
    try:
        return open(path).read().strip()
    except OSError:
        return ""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def listed(port, pid):
    snap = json.loads(get(port, "/api/v1/snapshot"))
    return any(p["pid"] == pid for d in snap["devices"] for p in d.get("processes", []))


def wrapper(caps):
    """argv prefix running root with only `caps` (a list of names, e.g.
    ["sys_ptrace"]; [] for none), or None when neither tool can."""
    if shutil.which("setpriv"):
        keep = "".join(f",+{c}" for c in caps)
        return ["setpriv", f"--bounding-set=-all{keep}", f"--inh-caps=-all{keep}", "--"]
    if shutil.which("capsh"):
        last = int(read("/proc/sys/kernel/cap_last_cap") or "40")
        names = subprocess.run(["capsh", f"--decode={(1 << (last + 1)) - 1:x}"],
                               capture_output=True, text=True).stdout
        every = names.split("=", 1)[-1].strip().split(",")
        drop = [c for c in every if c and c.removeprefix("cap_") not in caps]
        return ["capsh", f"--drop={','.join(drop)}", "--"]
    return None


class Daemon:
    def __init__(self, tag, lock_timeout, prefix=()):
        self.tag, self.port = tag, free_port()
        self.state = f"{a.work}/state-{tag}"
        cfg = f"{a.work}/{tag}.toml"
        with open(cfg, "w") as f:
            f.write(f"""[server]
enable_lifecycle = true
[poll]
interval = "500ms"
[state]
dir = "{self.state}"
[reclaim]
enabled = true
dry_run = false
allow_all_users = true
deny_users = []
[reclaim.suspend]
lock_timeout = "{lock_timeout}"
call_timeout = "2m"
host_memory_margin = "1GiB"
resume = "manual"
""")
        self.log = open(f"{a.out}/gpumemd-{tag}.log", "w")
        argv = list(prefix) + [a.gpumemd, "--config", cfg, "--web.listen-address",
                               f"127.0.0.1:{self.port}", "--log-format", "json"] + extra
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.ready = wait(lambda: get(self.port, "/-/ready") is not None, 20)

    def cap_eff(self):
        for l in read(f"/proc/{self.proc.pid}/status").splitlines():
            if l.startswith("CapEff:"):
                return l.split()[1]
        return "?"

    def cli(self, action, pid, timeout=100):
        t = time.time()
        try:
            r = subprocess.run([a.gpumemd, action, str(pid), "--url", f"http://127.0.0.1:{self.port}", "--json"],
                               capture_output=True, text=True, timeout=timeout)
            rc, text = r.returncode, (r.stdout + r.stderr).strip()
        except subprocess.TimeoutExpired:
            rc, text = "TIMEOUT", f"no answer within {timeout}s"
        return rc, text, round(time.time() - t, 3)

    def audit(self, action):
        got = [json.loads(l) for l in read(f"{self.state}/reclaim-audit.jsonl").splitlines() if l.strip()]
        got = [l for l in got if l.get("action") == action]
        return got[-1] if got else {}

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def alive(pid):
    return os.path.exists(f"/proc/{pid}") and " Z " not in read(f"/proc/{pid}/stat")


def iters():
    return int(read(f"{a.work}/busy.iters") or "0")


busy = int(wait(lambda: read(f"{a.work}/busy.pid"), 60) or "0")
idle = int(wait(lambda: read(f"{a.work}/idle.pid"), 60) or "0")
if not busy or not idle:
    verdict(False, "workloads", f"busy pid {busy or 'missing'}, idle pid {idle or 'missing'} within 60 s")
    finish()


def lock_phase(lock_timeout):
    tag = f"lock-{lock_timeout}"
    d = Daemon(tag, lock_timeout)
    o = obs[tag] = {}
    if not d.ready or not wait(lambda: listed(d.port, busy), 20):
        verdict(False, tag, "gpumemd not ready or busy not listed")
        d.stop()
        return
    before = iters()
    rc, text, secs = d.cli("suspend", busy)
    line = d.audit("suspend")
    o.update(suspend_rc=rc, suspend_seconds=secs, answer=text, audit=line)
    result, reason = line.get("result", "?"), line.get("reason") or ""
    outcome = "done" if result == "done" else ("TIMEOUT" if any(w in reason for w in ("(909)", "(600)", "timed out", "did not drain", "did not return")) else f"{result}: {reason}")
    if result == "done":
        # The checkpoint's own seconds (the API lists them while suspended):
        # the rest of the suspend's time is the lock and the checks.
        snap = json.loads(get(d.port, "/api/v1/snapshot"))
        cp = [s.get("checkpoint_seconds") for dv in snap["devices"] for s in dv.get("suspended", []) if s["pid"] == busy]
        o["checkpoint_seconds"] = cp[0] if cp else None
        o["resume"] = d.cli("resume", busy)
    mid = iters()
    grew = wait(lambda: iters() > mid + 1, 20)
    o.update(iters_before=before, iters_mid=mid, iters_after=iters())
    ok = alive(busy) and bool(grew) and (result == "done" or outcome == "TIMEOUT")
    verdict(ok, f"lock under load, lock_timeout {lock_timeout}",
            f"suspend of the busy process took {secs:.2f} s, {outcome}"
            + (f" (checkpoint {o['checkpoint_seconds']:.2f} s, so lock + checks {secs - o['checkpoint_seconds']:.2f} s)"
               if o.get("checkpoint_seconds") is not None else "")
            + (f"; resumed in {o['resume'][2]:.2f} s (rc {o['resume'][0]})" if "resume" in o else "")
            + f"; still computing afterwards: {'yes' if grew else 'NO'} (iterations {before} -> {mid} -> {iters()})")
    d.stop()


def cap_phase(tag, caps, expect_ok):
    prefix = wrapper(caps)
    if os.geteuid() != 0:
        verdict(None if dry else False, tag, "needs root (setpriv/capsh change the bounding set)")
        return
    if prefix is None:
        verdict(None, tag, "neither setpriv nor capsh found")
        return
    d = Daemon(tag, "30s", prefix)
    o = obs[tag] = {"wrapper": prefix, "cap_eff": d.cap_eff()}
    if not d.ready or not wait(lambda: listed(d.port, idle), 20):
        verdict(False, tag, f"gpumemd not ready or idle not listed (CapEff {o['cap_eff']}); see gpumemd-{tag}.log")
        d.stop()
        return
    rc, text, secs = d.cli("suspend", idle)
    line = d.audit("suspend")
    o.update(suspend=[rc, text, secs], audit=line)
    if expect_ok:
        rrc, rtext, rsecs = d.cli("resume", idle) if line.get("result") == "done" else ("-", "", 0)
        o["resume"] = [rrc, rtext, rsecs]
        ok = line.get("result") == "done" and rrc == 0 and alive(idle)
        verdict(ok, f"suspend as root with only CAP_SYS_PTRACE (CapEff {o['cap_eff']})",
                f"suspend {line.get('result')} in {secs:.2f} s, resume rc {rrc} in {rsecs:.2f} s"
                + ("" if ok else f"; reason {line.get('reason')}; answer {text}"))
    elif dry:
        verdict(None, f"suspend as root without CAP_SYS_PTRACE (CapEff {o['cap_eff']})",
                f"the stand-in checks no capability (got {line.get('result')})")
        if line.get("result") == "done":
            d.cli("resume", idle)
    else:
        reason = line.get("reason") or ""
        ok = line.get("result") == "failed" and "304" in reason and alive(idle) and listed(d.port, idle)
        verdict(ok, f"suspend as root without CAP_SYS_PTRACE refused clearly (CapEff {o['cap_eff']})",
                f"{line.get('result')}: {reason}; answer rc {rc}; still running and listed: {alive(idle)}")
        if line.get("result") == "done":
            d.cli("resume", idle)
    d.stop()


lock_phase("1s")
lock_phase("30s")
cap_phase("cap-ptrace", ["sys_ptrace"], True)
cap_phase("cap-none", [], False)
open(f"{a.work}/idle.check", "w").close()
after = wait(lambda: [l for l in read(f"{a.out}/idle.log").splitlines() if l.startswith("CHECKSUM-AFTER")], 60)
before = [l for l in read(f"{a.out}/idle.log").splitlines() if l.startswith("CHECKSUM-BEFORE")]
b = before[0].split()[1] if before else "?"
c = after[0].split()[1] if after else "?"
verdict(b != "?" and b == c, "idle process computes the same after suspend/resume", f"checksum before {b}, after {c}")
finish()
