"""``python -m gpumemd_torch train.py [args...]`` (or ``-m module [args...]``):
starts reporting, then runs the script or module as ``__main__`` with its
own argv. Owns only the command line; the reporting is in __init__."""

import runpy
import sys

import gpumemd_torch

USAGE = "usage: python -m gpumemd_torch SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 2
    gpumemd_torch.start()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
