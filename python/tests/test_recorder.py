"""The flight recorder without a GPU: the daemon's commands over the
reporter's own socket start PyTorch's memory history, an OOM dumps it into
the spool and the next report names the file; commands without the
kernel's word for the sender, and spools that are not this user's own
directories, are refused."""

import json
import os
import socket
import time
import types

import gpumemd_torch
from gpumemd_torch.recorder import Recorder


class FakeMemory:
    def __init__(self):
        self.calls = []

    def _record_memory_history(self, enabled="all", max_entries=0, **_):
        self.calls.append(("record", enabled, max_entries))

    def _dump_snapshot(self, path):
        self.calls.append(("dump", path))
        with open(path, "wb") as f:
            f.write(b"pickle")


def wait_until(check, what):
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_record_then_an_oom_dumps_into_the_spool_and_the_report_links_it(fake_torch, daemon, tmp_path):
    sock, path = daemon
    fake_torch.cuda.memory = FakeMemory()
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    r = gpumemd_torch.start(socket_path=path, interval=3600)
    data, sender = sock.recvfrom(65536)
    assert sender.startswith(b"\0"), "the reporter answers on an abstract address"
    assert "snapshot" not in json.loads(data)
    cmd = {"v": 1, "cmd": "record", "max_entries": 500, "spool": str(spool)}
    sock.sendto(json.dumps(cmd).encode(), sender)
    wait_until(lambda: r.recorder.recording, "recording started")
    assert fake_torch.cuda.memory.calls == [("record", "all", 500)]
    fake_torch.cuda.stats[0]["num_ooms"] = 1
    fake_torch.observers[0](0, 1 << 40, 80 << 30, 1 << 30)
    msg = json.loads(sock.recv(65536))
    dumped = msg["snapshot"]
    assert os.path.dirname(dumped) == str(spool) and dumped.endswith("-oom.pickle")
    assert open(dumped, "rb").read() == b"pickle"
    assert msg["devices"][0]["ooms"] == 1
    sock.sendto(json.dumps({"v": 1, "cmd": "stop"}).encode(), sender)
    wait_until(lambda: not r.recorder.recording, "recording stopped")
    assert fake_torch.cuda.memory.calls[-1] == ("record", None, 0)


def test_a_dump_on_request_starts_recording_first(tmp_path):
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=FakeMemory()))
    rec = Recorder(str(tmp_path / "allocator.sock"))
    rec.handle({"v": 1, "cmd": "dump", "max_entries": 10, "spool": str(tmp_path)}, torch)
    kinds = [c[0] for c in torch.cuda.memory.calls]
    assert kinds == ["record", "dump"]
    assert rec.last_snapshot and rec.last_snapshot.endswith("-request.pickle")


def test_a_command_without_credentials_is_refused(tmp_path):
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=FakeMemory()))
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b.setblocking(False)
    rec = Recorder(str(tmp_path / "allocator.sock"))
    a.send(json.dumps({"v": 1, "cmd": "record", "spool": str(tmp_path)}).encode())
    rec.read(b, torch)
    assert rec.refused == 1 and not rec.recording and torch.cuda.memory.calls == []


def test_a_spool_that_is_a_link_is_not_used(tmp_path):
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=FakeMemory()))
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    rec = Recorder(str(tmp_path / "allocator.sock"))
    rec.handle({"v": 1, "cmd": "dump", "spool": str(link)}, torch)
    assert rec.spool is None and rec.last_snapshot is None
    assert [c[0] for c in torch.cuda.memory.calls] == ["record"], "recording, but no dump anywhere"
