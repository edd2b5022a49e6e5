"""A fake ``torch`` (just the parts gpumemd_torch reads) and a bound Unix
datagram socket standing in for the daemon, so the package is tested
without a GPU or PyTorch."""

import os
import socket
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


class FakeCuda:
    def __init__(self, stats, uuids):
        self.stats = stats  # device index -> memory_stats dict
        self.uuids = uuids
        self.initialized = True
        self.props_calls = 0

    def is_initialized(self):
        return self.initialized

    def device_count(self):
        return len(self.stats)

    def memory_stats(self, i):
        s = self.stats[i]
        if isinstance(s, Exception):
            raise s
        return dict(s)

    def get_device_properties(self, i):
        self.props_calls += 1
        return types.SimpleNamespace(uuid=self.uuids[i])


def stats(allocated=0, reserved=0, active=None, split=0, retries=0, ooms=0, peak=None):
    active = allocated if active is None else active
    s = {}
    for k, v in (("allocated", allocated), ("reserved", reserved), ("active", active), ("inactive_split", split)):
        s[k + "_bytes.all.current"] = v
        s[k + "_bytes.all.peak"] = v if peak is None else max(v, peak)
    s["num_alloc_retries"] = retries
    s["num_ooms"] = ooms
    return s


@pytest.fixture
def fake_torch(monkeypatch):
    observers = []
    torch = types.ModuleType("torch")
    torch.cuda = FakeCuda({0: stats(1 << 30, 2 << 30)}, {0: "5a4c0000-1111-2222-3333-444455556666"})
    torch._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=observers.append)
    torch.observers = observers
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


@pytest.fixture
def daemon(tmp_path):
    path = str(tmp_path / "allocator.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(10)
    yield s, path
    s.close()


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv("GPUMEMD_TORCH", raising=False)
    monkeypatch.delenv("GPUMEMD_SOCKET", raising=False)
    import gpumemd_torch

    yield
    gpumemd_torch.stop()
