#!/usr/bin/env python3
"""Reads benches/h200/nvml_timer.c's counter file: prints one line per NVML
function with its cumulative calls, wall ns and thread-CPU ns, after a line
with this reader's monotonic clock in ns. Two such outputs diffed give a
window (scripts/h200/idle-profile.sh does).

Usage: nvml_timer_read.py FILE
"""
import struct
import sys
import time

RECORD = struct.Struct("=48sQQQ")


def main():
    data = open(sys.argv[1], "rb").read()
    print(f"monotonic_ns {time.monotonic_ns()}")
    for off in range(0, len(data) - RECORD.size + 1, RECORD.size):
        name, calls, wall, cpu = RECORD.unpack_from(data, off)
        if calls:
            label = name.split(b"\0", 1)[0].decode()
            print(f"{label} {calls} {wall} {cpu}")


main()
