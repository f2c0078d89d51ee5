"""Fixtures shared across the test suite.

``tests`` is a package (tests/__init__.py), so pytest puts the project root on sys.path
and test modules import shared helpers as ``from tests.strategies import ...``.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

PYTHON_DEFAULT_RECURSION_LIMIT = 1000


@pytest.fixture(scope="module")
def default_recursion_limit() -> Iterator[int]:
    """Run a test module under Python's default recursion limit, whatever raised it
    before (deep-IR code must not depend on a raised limit)."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(PYTHON_DEFAULT_RECURSION_LIMIT)
    try:
        yield PYTHON_DEFAULT_RECURSION_LIMIT
    finally:
        sys.setrecursionlimit(previous)


RAY_ADDRESS_FILE = "ray_current_cluster"


def machine_ray_temp_dir() -> Path:
    """Where Ray keeps its state on this machine (``ray._common.utils.get_default_ray_temp_dir``,
    restated so that a session that never uses Ray does not import it)."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(base) / "ray"


def read_text_or_none(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def cluster_answers(address: str, timeout: float = 2.0) -> bool:
    """Whether something listens at a ``host:port`` GCS address."""
    host, _, port = address.strip().rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


# the machine's temporary directory, as the session found it (the session's own
# TMPDIR, private_temp_dir, is one level deeper)
MACHINE_TEMP = tempfile.gettempdir()


def short_temp_dir() -> Path:
    """A new directory for Ray state: short, since Ray's socket paths below it must fit
    the 107 bytes of a unix socket address (a pytest tmp_path can be too long)."""
    return Path(tempfile.mkdtemp(prefix="rp-", dir=MACHINE_TEMP))


def remove_ray_dir(path: Path, timeout: float = 15.0) -> None:
    """Remove ``path``; Ray's processes may still write logs there for a moment after
    ``ray.shutdown`` returns, so try again until it is gone (bounded)."""
    deadline = time.monotonic() + timeout
    shutil.rmtree(path, ignore_errors=True)
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ray_tmpdir() -> Iterator[Path]:
    """A RAY_TMPDIR for a Ray a test starts in a subprocess, removed afterwards."""
    directory = short_temp_dir()
    yield directory
    remove_ray_dir(directory)


@pytest.fixture(scope="session", autouse=True)
def private_ray_temp_dir() -> Iterator[Path]:
    """All Ray state of the session goes to a directory of its own, removed at the end.

    Tests start clusters (``ray start --head``, ``ray.cluster_utils.Cluster``) that
    register themselves in Ray's ``ray_current_cluster`` file and die without taking it
    back: in the machine's Ray directory, the next plain ``ray.init()`` would try to join
    the dead cluster, and a user's running cluster would lose its entry. ``RAY_TMPDIR``
    reaches every Ray this session starts, in this process or in a subprocess. At the end
    the machine's own file must be as it was (else it is put back and the session fails).
    """
    machine_file = machine_ray_temp_dir() / RAY_ADDRESS_FILE
    before = read_text_or_none(machine_file)
    directory = short_temp_dir()
    previous = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = str(directory)
    try:
        yield directory
    finally:
        if previous is None:
            del os.environ["RAY_TMPDIR"]
        else:
            os.environ["RAY_TMPDIR"] = previous
        remove_ray_dir(directory)
    after = read_text_or_none(machine_file)
    if address_file_damaged(before, after):
        if before is None:
            machine_file.unlink(missing_ok=True)
        else:
            machine_file.write_text(before)
        pytest.fail(
            f"the test session changed {machine_file} from {before!r} to {after!r} (restored): "
            "some test started Ray outside the session's private RAY_TMPDIR"
        )


@pytest.fixture(scope="session", autouse=True)
def private_temp_dir(private_ray_temp_dir) -> Iterator[Path]:
    """Temporary files of the session and of every process it starts (Ray workers,
    ``raypass`` commands, compilers) in a directory of its own (``TMPDIR``), removed at the
    end: a process a test kills with SIGKILL cannot remove its own (a compile's directory,
    a warm driver's socket), and such leftovers piled up in the machine's /tmp, a few a
    run. Ray's state stays in its own short directory (``private_ray_temp_dir``)."""
    directory = Path(tempfile.mkdtemp(prefix="rp-tmp-", dir=MACHINE_TEMP))
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(directory)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    try:
        yield directory
    finally:
        if previous is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = previous
        tempfile.tempdir = None
        shutil.rmtree(directory, ignore_errors=True)


def address_file_damaged(before: str | None, after: str | None) -> bool:
    """Whether the address file went from ``before`` to a state only a test can explain:
    naming a cluster that does not run, or gone while the cluster it named still runs
    (a user's ``ray start`` or ``ray stop`` meanwhile leaves it right)."""
    if after == before:
        return False
    if after is not None:
        return not cluster_answers(after)
    return cluster_answers(before)


@pytest.fixture(scope="session", autouse=True)
def private_pool_dir() -> Iterator[Path]:
    """Warm pools of the session are recorded in a directory of its own: a pool the
    user runs on this machine is neither used nor touched by the tests, and a pool a
    test forgot to stop fails the session (it is stopped first)."""
    directory = Path(tempfile.mkdtemp(prefix="rp-pool-"))
    previous = os.environ.get("RAYPASS_POOL_DIR")
    os.environ["RAYPASS_POOL_DIR"] = str(directory)
    try:
        yield directory
    finally:
        from scheduler import pool

        left_running = pool.read_record() is not None
        if left_running:
            pool.stop()
        if previous is None:
            del os.environ["RAYPASS_POOL_DIR"]
        else:
            os.environ["RAYPASS_POOL_DIR"] = previous
        shutil.rmtree(directory, ignore_errors=True)
        if left_running:
            pytest.fail("a test left a warm pool running (stopped now)")


@pytest.fixture(scope="session", autouse=True)
def shared_runtime_cache() -> Iterator[Path]:
    """The convolution runtime's object compiled once for the session, not once for each
    test's fresh kernel cache (75 compiles of ~2.5 s of CPU each): RAYPASS_RUNTIME_CACHE_DIR
    reaches the builds of this process and of every process it starts. Tests of the
    runtime's own compile set it aside (tests/codegen/test_cg_conv_microkernel.py)."""
    from passinfra.codegen.conv_runtime import RUNTIME_CACHE_ENV

    directory = Path(tempfile.mkdtemp(prefix="rp-runtime-"))
    previous = os.environ.get(RUNTIME_CACHE_ENV)
    os.environ[RUNTIME_CACHE_ENV] = str(directory)
    try:
        yield directory
    finally:
        if previous is None:
            del os.environ[RUNTIME_CACHE_ENV]
        else:
            os.environ[RUNTIME_CACHE_ENV] = previous
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_session(private_ray_temp_dir):
    """One private Ray instance for the whole test session (starting Ray costs seconds).

    ``address="local"`` starts a fresh instance even if another Ray runs on this
    machine (a plain ``ray.init`` would attach to it). Two CPUs, loopback only, no
    dashboard; workers see the test process's import path, so passes defined in test
    modules unpickle on them.
    """
    import ray

    from scheduler.pool.ray_runtime import local_worker_env

    started = False
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            runtime_env=local_worker_env(),
            log_to_driver=False,
            logging_level="ERROR",
        )
        started = True
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def ray_scheduler(ray_session):
    """A factory of ray-backend Schedulers on the session's Ray (fractional CPUs per
    worker); one per configuration, all shut down after the test."""
    from scheduler import Scheduler

    made = {}

    def make(num_workers=2, **options):
        options.setdefault("cpus_per_worker", 0.25)
        key = (num_workers, tuple(sorted(options.items())))
        if key not in made:
            made[key] = Scheduler(backend="ray", num_workers=num_workers, **options)
        return made[key]

    yield make
    for sched in made.values():
        sched.shutdown()


# where tests/frontend/test_onnx_backend.py has the ONNX runner write the light models'
# inputs and expected outputs (its $ONNX_HOME unless the user set one): shared by the
# session's worker processes, and removed when the session ends (under xdist, the
# controller's end) unless it was there before
ONNX_HOME_DEFAULT = Path(MACHINE_TEMP) / "raypass-onnx-home"
_ONNX_HOME_WAS_THERE = pytest.StashKey[bool]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """A suite asked to run as an AVX2-only CPU (RAYPASS_MAX_ISA=avx2, `make test-avx2`)
    runs so wholly, or not at all: NumPy's and OpenBLAS's switches must be set before
    they load, which only tests/avx2_only.py does (a bare RAYPASS_MAX_ISA caps only the
    microkernels, and the suite would pass while NumPy's reference still ran AVX-512)."""
    session.config.stash[_ONNX_HOME_WAS_THERE] = ONNX_HOME_DEFAULT.exists()
    if os.environ.get("RAYPASS_MAX_ISA") != "avx2":
        return
    from tests.avx2_only import numpy_runs_avx512

    if numpy_runs_avx512() or os.environ.get("OPENBLAS_CORETYPE") != "Haswell":
        raise pytest.UsageError("RAYPASS_MAX_ISA=avx2 alone does not make an AVX2-only run: "
                                "start the suite with `python -m tests.avx2_only python -m pytest`")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The ONNX test data directory this session made (ONNX_HOME_DEFAULT) is removed: the
    machine is left as the session found it."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the others may still read it
        return
    if not session.config.stash.get(_ONNX_HOME_WAS_THERE, True):
        shutil.rmtree(ONNX_HOME_DEFAULT, ignore_errors=True)
