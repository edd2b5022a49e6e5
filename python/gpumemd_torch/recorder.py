"""The flight recorder: gpumemd asks this process, over the reporter's own
socket, to record PyTorch's memory history and to dump it on its next
out-of-memory error (or at once).

Owns: reading commands (only from the daemon: the kernel names the
sender's uid, which must be root or the owner of the daemon's socket),
starting and stopping ``torch.cuda.memory._record_memory_history`` with
the bounded ring the daemon names, and writing the snapshot with
``torch.cuda.memory._dump_snapshot`` into the spool directory the daemon
made for this user (used only when it is a real directory this user owns).

Must not: raise into the training code, block, or write anywhere else.
Open a snapshot offline with PyTorch's memory_viz (python/README.md).
"""

import json
import os
import socket
import struct
import time

# struct ucred: pid, uid, gid (three C ints).
_UCRED = struct.Struct("iII")
# At most this many ring entries, whatever is asked: the ring lives in the
# job's host memory.
MAX_ENTRIES = 1_000_000


class Recorder:
    def __init__(self, daemon_path):
        self.daemon_path = daemon_path
        self.recording = False
        self.max_entries = 0
        self.spool = None
        self.last_snapshot = None
        self.refused = 0

    # -- commands ---------------------------------------------------------

    def _daemon_uid(self):
        try:
            return os.stat(self.daemon_path).st_uid
        except OSError:
            return None

    def read(self, sock, torch):
        """Handles every command waiting on ``sock`` (non-blocking)."""
        while True:
            try:
                data, anc, _flags, _addr = sock.recvmsg(4096, socket.CMSG_SPACE(_UCRED.size))
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            uid = None
            for level, kind, body in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(body) >= _UCRED.size:
                    uid = _UCRED.unpack(body[: _UCRED.size])[1]
            if uid is None or uid not in (0, self._daemon_uid()):
                self.refused += 1
                continue
            try:
                self.handle(json.loads(data), torch)
            except Exception:
                self.refused += 1

    def handle(self, cmd, torch):
        """One command: ``record``, ``dump`` or ``stop``."""
        if not isinstance(cmd, dict) or cmd.get("v") != 1:
            self.refused += 1
            return
        spool = cmd.get("spool")
        if isinstance(spool, str) and self._usable(spool):
            self.spool = spool
        what = cmd.get("cmd")
        if what in ("record", "dump"):
            n = cmd.get("max_entries")
            n = n if isinstance(n, int) and 0 < n <= MAX_ENTRIES else 100_000
            self.start(torch, n)
            if what == "dump":
                self.dump(torch, "request")
        elif what == "stop":
            self.stop(torch)

    @staticmethod
    def _usable(path):
        """A directory (not a link) that this user owns."""
        try:
            st = os.lstat(path)
        except OSError:
            return False
        import stat

        return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()

    # -- PyTorch ----------------------------------------------------------

    @staticmethod
    def _memory(torch):
        return getattr(getattr(torch, "cuda", None), "memory", None)

    def start(self, torch, max_entries):
        if self.recording and self.max_entries == max_entries:
            return
        mem = self._memory(torch)
        if mem is None or not hasattr(mem, "_record_memory_history"):
            return
        mem._record_memory_history(max_entries=max_entries)
        self.recording = True
        self.max_entries = max_entries

    def stop(self, torch):
        mem = self._memory(torch)
        if self.recording and mem is not None:
            mem._record_memory_history(enabled=None)
        self.recording = False

    def dump(self, torch, reason):
        """Writes the snapshot to the spool; returns its path, or None."""
        mem = self._memory(torch)
        if not self.recording or self.spool is None or mem is None:
            return None
        name = "%d-%d-%s.pickle" % (os.getpid(), int(time.time() * 1000), reason)
        path = os.path.join(self.spool, name)
        try:
            mem._dump_snapshot(path)
        except Exception:
            return None
        self.last_snapshot = path
        return path
