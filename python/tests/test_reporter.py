"""gpumemd_torch without a GPU: what it sends, when, and that it never
raises into the job or reaches for CUDA itself."""

import json
import os
import subprocess
import sys
import time

import gpumemd_torch
from conftest import stats

HERE = os.path.dirname(os.path.abspath(__file__))


def recv(sock):
    data = sock.recv(65536)
    return json.loads(data), len(data)


def test_a_report_carries_the_figures_of_each_used_device(fake_torch, daemon):
    sock, path = daemon
    fake_torch.cuda.stats = {
        0: stats(allocated=3 << 30, reserved=5 << 30, active=(3 << 30) + 512, split=4096, retries=2, ooms=1, peak=7 << 30),
        1: stats(),  # never used: NVML does not list us there
        2: stats(allocated=10, reserved=20),
    }
    fake_torch.cuda.uuids = {0: "aaaa", 1: "bbbb", 2: "MIG-cccc"}
    r = gpumemd_torch.start(socket_path=path, interval=60)
    msg, _ = recv(sock)
    assert msg["v"] == 1
    assert [d["uuid"] for d in msg["devices"]] == ["GPU-aaaa", "MIG-cccc"]
    d = msg["devices"][0]
    assert d["allocated"] == {"current": 3 << 30, "peak": 7 << 30}
    assert d["reserved"] == {"current": 5 << 30, "peak": 7 << 30}
    assert d["active"]["current"] == (3 << 30) + 512
    assert d["inactive_split"]["current"] == 4096
    assert (d["alloc_retries"], d["ooms"]) == (2, 1)
    assert "pid" not in msg, "the kernel names the sender"
    deadline = time.monotonic() + 10
    while r.sent != 1:  # counted just after the send returns
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_an_oom_wakes_the_reporter_at_once(fake_torch, daemon):
    sock, path = daemon
    gpumemd_torch.start(socket_path=path, interval=3600)
    first, _ = recv(sock)
    assert first["devices"][0]["ooms"] == 0
    assert len(fake_torch.observers) == 1
    fake_torch.cuda.stats[0] = stats(1 << 30, 2 << 30, ooms=1)
    t = time.monotonic()
    fake_torch.observers[0](0, 1 << 40, 80 << 30, 1 << 30)  # (device, requested, total, free)
    second, _ = recv(sock)
    assert second["devices"][0]["ooms"] == 1
    assert time.monotonic() - t < 5, "not the 3600 s interval"


def test_silent_when_the_daemon_is_absent(fake_torch, tmp_path):
    r = gpumemd_torch.start(socket_path=str(tmp_path / "nobody.sock"), interval=0.01)
    deadline = time.monotonic() + 10
    while r.dropped < 3:
        assert time.monotonic() < deadline
        r.wake.set()
        time.sleep(0.005)
    assert r.is_alive() and r.sent == 0


def test_errors_in_torch_never_escape_and_reporting_goes_on(fake_torch, daemon):
    sock, path = daemon
    fake_torch.cuda.stats = {0: RuntimeError("CUDA error: device-side assert")}
    r = gpumemd_torch.start(socket_path=path, interval=0.01)
    deadline = time.monotonic() + 10
    while r.dropped < 2:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    fake_torch.cuda.stats = {0: stats(5, 6)}
    msg, _ = recv(sock)
    assert msg["devices"][0]["allocated"]["current"] == 5


def test_nothing_before_cuda_is_initialised_and_never_an_import_of_torch(fake_torch, daemon, monkeypatch):
    sock, path = daemon
    fake_torch.cuda.initialized = False
    r = gpumemd_torch._Reporter(path, 60)
    assert r.report_once() is False
    assert fake_torch.cuda.props_calls == 0, "get_device_properties would initialise CUDA"
    monkeypatch.delitem(sys.modules, "torch")
    assert r.report_once() is False
    assert "torch" not in sys.modules


def test_the_uuid_is_asked_once_per_device(fake_torch, daemon):
    sock, path = daemon
    r = gpumemd_torch._Reporter(path, 60)
    for _ in range(5):
        assert r.report_once()
        recv(sock)
    assert fake_torch.cuda.props_calls == 1


def test_a_report_of_sixteen_gpus_fits_the_daemons_default_limit(fake_torch):
    big = 1 << 62
    fake_torch.cuda.stats = {i: stats(big, big, retries=big, ooms=big) for i in range(16)}
    fake_torch.cuda.uuids = {i: "%08x-1111-2222-3333-444455556666" % i for i in range(16)}
    body = gpumemd_torch.encode(gpumemd_torch.collect(fake_torch))
    assert len(body) < 8192


def test_gpumemd_torch_0_turns_it_off(fake_torch, daemon, monkeypatch):
    monkeypatch.setenv("GPUMEMD_TORCH", "0")
    assert gpumemd_torch.start(socket_path=daemon[1]) is None


def test_the_env_socket_and_one_reporter_per_process(fake_torch, daemon, monkeypatch):
    monkeypatch.setenv("GPUMEMD_SOCKET", daemon[1])
    a = gpumemd_torch.start(interval=60)
    b = gpumemd_torch.start(interval=60)
    assert a is b and a.path == daemon[1]


def run_module(args, env_extra, tmp_path):
    """Runs python -m gpumemd_torch in a child with the fake torch on its path."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "torch.py").write_text(
        "import types\n"
        "class _C:\n"
        "    @staticmethod\n"
        "    def is_initialized(): return True\n"
        "    @staticmethod\n"
        "    def device_count(): return 1\n"
        "    @staticmethod\n"
        "    def memory_stats(i): return {'reserved_bytes.all.peak': 1, 'reserved_bytes.all.current': 1, 'num_ooms': 0}\n"
        "    @staticmethod\n"
        "    def get_device_properties(i): return types.SimpleNamespace(uuid='abcd')\n"
        "cuda = _C\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), os.path.join(HERE, "..")]), **env_extra)
    return subprocess.run([sys.executable] + args, env=env, capture_output=True, text=True, timeout=60)


def test_python_dash_m_runs_the_script_with_its_args_and_reports(daemon, tmp_path):
    sock, path = daemon
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, time, torch, gpumemd_torch\n"
        "r = gpumemd_torch._reporter\n"
        "r.wake.set()\n"
        "deadline = time.time() + 20\n"
        "while r.sent == 0 and time.time() < deadline: time.sleep(0.01)\n"
        "print('args', sys.argv[1:], 'sent', r.sent, __name__)\n"
    )
    p = run_module(["-m", "gpumemd_torch", str(script), "--lr", "3"], {"GPUMEMD_SOCKET": path}, tmp_path)
    assert p.returncode == 0, p.stderr
    assert "args ['--lr', '3'] sent 1 __main__" in p.stdout
    msg, _ = recv(sock)
    assert msg["devices"][0]["uuid"] == "GPU-abcd"


def test_gpumemd_torch_1_starts_at_import(daemon, tmp_path):
    sock, path = daemon
    p = run_module(
        ["-c", "import torch, gpumemd_torch; print(gpumemd_torch._reporter is not None)"],
        {"GPUMEMD_SOCKET": path, "GPUMEMD_TORCH": "1"},
        tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "True"


DYING_JOB = (
    "import sys, time, types\n"
    "ooms = [0]\n"
    "observers = []\n"
    "class cuda:\n"
    "    is_initialized = staticmethod(lambda: True)\n"
    "    device_count = staticmethod(lambda: 1)\n"
    "    memory_stats = staticmethod(lambda i: {'reserved_bytes.all.peak': 8, 'reserved_bytes.all.current': 8,\n"
    "                                            'num_ooms': ooms[0]})\n"
    "    get_device_properties = staticmethod(lambda i: types.SimpleNamespace(uuid='abcd'))\n"
    "torch = types.ModuleType('torch')\n"
    "torch.cuda = cuda\n"
    "if sys.argv[1] == 'observer':\n"
    "    torch._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=observers.append)\n"
    "sys.modules['torch'] = torch\n"
    "import gpumemd_torch\n"
    "r = gpumemd_torch.start(interval=3600)\n"
    "deadline = time.time() + 20\n"
    "while r.sent == 0 and time.time() < deadline: time.sleep(0.005)\n"
    "ooms[0] = 1\n"
    "for o in observers: o(0, 1 << 40, 80 << 30, 1 << 20)\n"
    "raise RuntimeError('CUDA out of memory (uncaught: the job dies of it)')\n"
)


def dying_job(tmp_path, path, mode):
    script = tmp_path / "job.py"
    script.write_text(DYING_JOB)
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."), GPUMEMD_SOCKET=path)
    return subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=60)


def drain(sock):
    """Every datagram already queued, after the sender exited."""
    sock.setblocking(False)
    got = []
    try:
        while True:
            got.append(json.loads(sock.recv(65536)))
    except BlockingIOError:
        pass
    return got


def test_a_job_that_dies_of_its_oom_reports_it_every_time(daemon, tmp_path):
    sock, path = daemon
    for run in range(5):
        p = dying_job(tmp_path, path, "observer")
        assert p.returncode == 1 and "uncaught" in p.stderr, p.stderr
        ooms = [m["devices"][0]["ooms"] for m in drain(sock)]
        assert ooms[0] == 0 and 1 in ooms, f"run {run}: reports {ooms}"


def test_without_an_oom_observer_the_exit_hook_sends_the_counted_oom(daemon, tmp_path):
    sock, path = daemon
    # Older torch: no observer to call, the reporter sleeps for an hour;
    # only the exit hook can send the new num_ooms.
    p = dying_job(tmp_path, path, "plain")
    assert p.returncode == 1, p.stderr
    ooms = [m["devices"][0]["ooms"] for m in drain(sock)]
    assert ooms == [0, 1]


def test_the_exit_hook_sends_nothing_when_no_oom_is_left_unsent(fake_torch, daemon):
    sock, path = daemon
    r = gpumemd_torch._Reporter(path, 60)
    assert r.report_once()
    recv(sock)
    assert r.flush_at_exit() is False, "ooms unchanged since the last report"
    fake_torch.cuda.stats[0] = stats(1 << 30, 2 << 30, ooms=2)
    assert r.flush_at_exit() is True
    assert recv(sock)[0]["devices"][0]["ooms"] == 2
