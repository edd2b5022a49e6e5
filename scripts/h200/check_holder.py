"""CUDA memory holders for scripts/h200/check.sh (real GPU, or DRY=1 without
CUDA for the dry run against the NVML stand-in, where the holder only sleeps).

  check_holder.py hold READY        holds 2 GiB until killed (at most 170 s);
  check_holder.py zombie READY EXIT forks a child that holds 1 GiB until the
                                    file EXIT appears, then exits; the parent
                                    never reaps it, so the child stays a
                                    zombie (for at most 170 s).
READY gets the holder's pid once its memory is allocated.
"""
import os
import sys
import time


def hold(gib):
    if os.environ.get("DRY") == "1":
        return None
    import torch  # imported after any fork: CUDA must not be initialised in a parent that forks

    x = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    return x


def ready(path, pid):
    with open(path + ".tmp", "w") as f:
        f.write(str(pid))
    os.rename(path + ".tmp", path)


mode, ready_path = sys.argv[1], sys.argv[2]
if mode == "hold":
    x = hold(2)
    ready(ready_path, os.getpid())
    time.sleep(170)
elif mode == "zombie":
    exit_path = sys.argv[3]
    child = os.fork()
    if child == 0:
        x = hold(1)
        ready(ready_path, os.getpid())
        end = time.time() + 170
        while not os.path.exists(exit_path) and time.time() < end:
            time.sleep(0.1)
        os._exit(0)  # the CUDA context goes with the process; the parent does not wait
    ready(ready_path + ".parent", os.getpid())
    time.sleep(170)
else:
    sys.exit(f"unknown mode {mode}")
