#!/usr/bin/env python3
"""Issue 21, round 7: the CPU of one pread of /proc/PID/stat against
/proc/PID/task/PID/stat for each PID given (PyTorch workers have dozens of
threads, whose counters the first sums at every read), and whether both
name the same process (comm and starttime). One JSON line per PID.

Usage: stat_read_cost.py ROUNDS PID...
"""
import json
import os
import sys
import time


def identity(line):
    close = line.rfind(b")")
    return line[: close + 1].decode(errors="replace"), line[close + 2:].split()[19].decode()


def cost(path, rounds):
    fd = os.open(path, os.O_RDONLY)
    try:
        first = os.pread(fd, 4096, 0)
        c0 = time.thread_time()
        for _ in range(rounds):
            os.pread(fd, 4096, 0)
        return (time.thread_time() - c0) / rounds * 1e6, first
    finally:
        os.close(fd)


def main():
    rounds = int(sys.argv[1])
    for pid in sys.argv[2:]:
        threads = len(os.listdir(f"/proc/{pid}/task"))
        whole, a = cost(f"/proc/{pid}/stat", rounds)
        main_thread, b = cost(f"/proc/{pid}/task/{pid}/stat", rounds)
        print(json.dumps({"pid": int(pid), "threads": threads, "stat_us": round(whole, 2),
                          "task_stat_us": round(main_thread, 2), "same_identity": identity(a) == identity(b)}))


if __name__ == "__main__":
    main()
