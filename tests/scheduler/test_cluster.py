"""Multi-node and attach: scenarios in subprocesses (each needs its own Ray)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")


# keep Ray on the loopback address (it otherwise swaps 127.0.0.1 for the host's address),
# and have head and client agree on token authentication (the token in ~/.ray)
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token"}


def _run_scenario(module: str, *args: str, timeout: float = 300) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **LOOPBACK_ONLY)
    proc = subprocess.run(
        [sys.executable, "-m", f"tests.scheduler.scenarios.{module}", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_multinode_spread_and_node_loss():
    result = _run_scenario("multinode")
    assert len(result["worker_nodes"]) == 2  # workers spread over both nodes
    assert result["identical"]
    assert result["retries"] >= 1 and result["restarts"] >= 1
    assert result["victim"] not in result["nodes_after"]


def test_kernels_compiled_on_one_node_are_not_compiled_again_on_another():
    result = _run_scenario("shared_kernels")
    assert result["first_nodes"] == [result["node_a"]] and result["second_nodes"] == [result["node_b"]]
    assert result["first_hits"] and not any(result["first_hits"])  # node A compiled every kernel
    # node B, its own disk empty, took every one from the cluster's store, and kept them
    assert len(result["second_hits"]) == len(result["first_hits"]) and all(result["second_hits"])
    # ... one object per compile unit (a kernel alone, or several: GroupKernels)
    assert result["b_cached"] == result["second_objects"]
    assert 0 < result["second_objects"] <= len(result["second_hits"])
    assert result["identical"]  # both libraries byte-identical to the in-process build
    assert result["removed"]


def test_the_kernel_store_forgets_the_least_recently_used_past_its_size():
    from workers.kernel_store import KernelStore

    store = KernelStore(max_bytes=10)
    store.put("a", b"1234")
    store.put("b", b"5678")
    assert store.get("a") == b"1234"  # now the most recently used
    store.put("c", b"9012")  # 12 bytes: "b" goes
    assert store.get("b") is None and store.get("a") == b"1234" and store.get("c") == b"9012"
    assert store.stats() == {"objects": 2, "bytes": 8, "hits": 3, "misses": 1}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def ray_head():
    port = _free_port()
    proc = subprocess.Popen(
        [str(RAY), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
         "--include-dashboard=false", "--block"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env=dict(os.environ, **LOOPBACK_ONLY),
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
        pytest.fail("ray start --head did not come up within 60 s")
    yield f"127.0.0.1:{port}", proc
    # Ray's graceful stop of a --block head waited on its processes for ~30 s; the head is
    # the test's own (a session of its own, in the session's private RAY_TMPDIR), so after
    # a moment to stop cleanly, every process of it is ended at once
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def test_attach_to_a_running_cluster(ray_head):
    address, head = ray_head
    result = _run_scenario("attach_client", address)
    assert result["identical"] and result["attached"]
    assert len(result["worker_pids"]) == 2
    assert head.poll() is None  # the scheduler never stops a cluster it only attached to
