"""Stand-in for suspend_workload.py in scripts/h200/suspend_dryrun.sh: the
PIDs are processes the dry run started beforehand (listed in the NVML
stand-in's scenario), so this only plays their part in the protocol
(pid files, checksum lines, busy iterations)."""
import os, sys, time

kind, gib, secs, work = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
idle, busy = open(os.environ["DRYRUN_PIDS"]).read().split()
end = time.time() + secs
if kind == "idle":
    print("CHECKSUM-BEFORE 1234.5", flush=True)
    open(f"{work}/idle.pid", "w").write(idle)
    while not os.path.exists(f"{work}/idle.check") and time.time() < end:
        time.sleep(0.2)
    print("CHECKSUM-AFTER 1234.5 (0.00s)", flush=True)
else:
    open(f"{work}/busy.pid", "w").write(busy)
    n = 0
    while time.time() < end:
        n += 1
        open(f"{work}/busy.iters", "w").write(str(n))
        time.sleep(0.5)
