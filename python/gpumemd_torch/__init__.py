"""Reports PyTorch's caching-allocator figures to the gpumemd daemon.

Owns: a daemon thread that, every couple of seconds and at once after an
out-of-memory error, reads ``torch.cuda.memory_stats(i)`` for each CUDA
device this process uses and sends one small JSON datagram (format v1,
docs/design.md "The allocator view") to gpumemd's Unix socket; and the
OOM's own report, sent from the allocating thread and again at exit, so a
job that dies of its OOM still reports it (a daemon thread is killed at
interpreter exit, often before it ran).

Also the flight recorder's back channel (``recorder.py``): the socket is
bound to an abstract address the kernel picks, so the daemon can ask this
process to record its memory history and dump it on an OOM; the path of a
snapshot dumped goes with the next report (``snapshot``).

Must not: raise into the training code, import torch or initialise CUDA
itself (it reads the torch the job imported, only once CUDA is
initialised), block (the socket is non-blocking; a full queue or an absent
daemon drops the report), or claim a PID (the kernel tells the daemon who
sent it).
"""

import atexit
import json
import os
import select
import socket
import sys
import threading
import time

from .recorder import Recorder

__all__ = ["start", "stop", "collect", "DEFAULT_SOCKET"]
__version__ = "0.1.0"

DEFAULT_SOCKET = "/run/gpumemd/allocator.sock"
VERSION = 1
_KINDS = ("allocated", "reserved", "active", "inactive_split")

_lock = threading.Lock()
_reporter = None


def _disabled():
    return os.environ.get("GPUMEMD_TORCH", "").strip().lower() in ("0", "false", "no", "off")


def _uuid(torch, i, cache):
    """NVML's UUID of device i (torch gives it without the GPU- prefix)."""
    u = cache.get(i)
    if u is None:
        u = str(torch.cuda.get_device_properties(i).uuid)
        if not u.startswith(("GPU-", "MIG-")):
            u = "GPU-" + u
        cache[i] = u
    return u


def collect(torch, uuids=None):
    """The per-device figures of this process, as the message's list.

    Only devices whose allocator ever reserved memory (or hit an OOM) are
    listed: those are the ones NVML lists this process on, and a device
    the process does not use would make the daemon drop the whole report.
    """
    if uuids is None:
        uuids = {}
    cuda = torch.cuda
    if not cuda.is_initialized():
        return []
    out = []
    for i in range(cuda.device_count()):
        s = cuda.memory_stats(i)
        if not s:
            continue
        ooms = int(s.get("num_ooms", 0))
        if int(s.get("reserved_bytes.all.peak", 0)) == 0 and ooms == 0:
            continue
        d = {"uuid": _uuid(torch, i, uuids)}
        for k in _KINDS:
            d[k] = {
                "current": int(s.get(k + "_bytes.all.current", 0)),
                "peak": int(s.get(k + "_bytes.all.peak", 0)),
            }
        d["alloc_retries"] = int(s.get("num_alloc_retries", 0))
        d["ooms"] = ooms
        out.append(d)
    return out


def encode(devices, snapshot=None):
    msg = {"v": VERSION, "devices": devices}
    if snapshot:
        msg["snapshot"] = snapshot
    return json.dumps(msg, separators=(",", ":")).encode()


class _Reporter(threading.Thread):
    def __init__(self, path, interval):
        super().__init__(name="gpumemd-torch", daemon=True)
        self.path = path
        self.interval = interval
        self.wake = threading.Event()
        self.stopping = False
        self.sent = 0
        self.dropped = 0
        self._uuids = {}
        self._sock = None
        self._observer = False
        self._send = threading.Lock()
        # An OOM seen (observer) or counted (num_ooms) but not yet sent.
        self.oom_pending = False
        self.ooms_sent = 0
        self.recorder = Recorder(path)
        # A snapshot dumped (on an OOM) and not yet named in a report.
        self.snapshot_pending = None

    def _torch(self):
        # The job's torch, never an import of our own: a process that does
        # not use torch pays nothing.
        return sys.modules.get("torch")

    def _attach_oom_observer(self, torch):
        """Report at once on an OOM. The callback runs in the allocating
        thread after the allocator released its lock (reading the stats
        there is safe) and before the error reaches the job: it sends the
        report itself, since the job may die of that error before this
        thread runs, then wakes this thread."""
        if self._observer:
            return
        self._observer = True
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return  # num_ooms in the periodic report and at exit still shows it
        try:
            attach(self._on_oom)
        except Exception:
            pass

    def _on_oom(self, *_):
        self.oom_pending = True
        try:
            dumped = self.recorder.dump(self._torch(), "oom")
            if dumped:
                self.snapshot_pending = dumped
        except Exception:
            pass
        try:
            self.report_once()
        except Exception:
            self.dropped += 1
        self.wake.set()

    def flush_at_exit(self):
        """The last report, when an OOM was seen or counted and not sent."""
        torch = self._torch()
        try:
            if torch is None or not torch.cuda.is_initialized():
                return False
            counted = sum(d["ooms"] for d in collect(torch, self._uuids))
            if self.oom_pending or counted > self.ooms_sent:
                return self.report_once()
        except Exception:
            self.dropped += 1
        return False

    def report_once(self):
        # The reporter, the OOM observer and the exit hook may overlap;
        # a stuck send must not hold the others (or the exit) for long.
        if not self._send.acquire(timeout=1.0):
            return False
        try:
            return self._report()
        finally:
            self._send.release()

    def _report(self):
        torch = self._torch()
        if torch is None or not hasattr(torch, "cuda"):
            return False
        if not torch.cuda.is_initialized():
            return False
        self._attach_oom_observer(torch)
        devices = collect(torch, self._uuids)
        if not devices:
            return False
        if self._sock is None:
            self._sock = _back_channel()
        try:
            self._sock.sendto(encode(devices, self.snapshot_pending), self.path)
            self.sent += 1
            self.ooms_sent = sum(d["ooms"] for d in devices)
            self.oom_pending = False
            self.snapshot_pending = None
            return True
        except OSError:
            # No daemon, no socket, or its queue is full: stay silent.
            self.dropped += 1
            return False

    def run(self):
        while not self.stopping:
            try:
                self.report_once()
            except Exception:
                # Never into the training code; try again next time.
                self.dropped += 1
            self._wait(self.interval)
            self.wake.clear()

    def _wait(self, seconds):
        """Until ``seconds`` pass or ``wake`` is set, handling the daemon's
        commands as they come."""
        deadline = time.monotonic() + seconds
        while not self.stopping and not self.wake.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            sock = self._sock
            if sock is None:
                self.wake.wait(min(left, 0.25))
                continue
            try:
                ready, _, _ = select.select([sock], [], [], min(left, 0.25))
                if ready:
                    self.recorder.read(sock, self._torch())
            except Exception:
                self.dropped += 1
                self.wake.wait(min(left, 0.25))


def _back_channel():
    """The reporter's socket: non-blocking, bound to an abstract address the
    kernel picks (so the daemon can answer), passing credentials (so a
    command is taken only from the daemon)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setblocking(False)
    try:
        s.bind("")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    except OSError:
        pass  # reports still go; only the recorder is unreachable
    return s


def start(socket_path=None, interval=2.0):
    """Starts reporting (once per process; later calls return the same
    reporter). Returns None when ``GPUMEMD_TORCH=0`` turns it off. Never
    raises."""
    global _reporter
    try:
        if _disabled():
            return None
        with _lock:
            if _reporter is None or not _reporter.is_alive():
                path = socket_path or os.environ.get("GPUMEMD_SOCKET") or DEFAULT_SOCKET
                _reporter = _Reporter(path, float(interval))
                _reporter.start()
                _register_exit_hook()
            return _reporter
    except Exception:
        return None


_exit_hook = False


def _register_exit_hook():
    global _exit_hook
    if not _exit_hook:
        _exit_hook = True
        atexit.register(_flush_at_exit)


def _flush_at_exit():
    """At interpreter exit (an uncaught OOM included): daemon threads still
    run here, but may be killed before they send."""
    r = _reporter
    if r is not None:
        r.flush_at_exit()


def stop():
    """Stops the reporter thread (for tests and orderly shutdowns)."""
    global _reporter
    with _lock:
        r, _reporter = _reporter, None
    if r is not None:
        r.stopping = True
        r.wake.set()
        r.join(timeout=5)


if os.environ.get("GPUMEMD_TORCH", "").strip() == "1":
    start()
