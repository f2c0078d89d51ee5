"""tests/avx2_only.py: the switches that make an AVX-512 machine run as an AVX2-only CPU
reach a process it starts (what `make test-avx2` relies on)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.avx2_only import avx2_only_environment

PROJECT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os
from tests.avx2_only import numpy_runs_avx512
names = ("RAYPASS_MAX_ISA", "OPENBLAS_CORETYPE", "GLIBC_TUNABLES")
print(json.dumps({"numpy_avx512": numpy_runs_avx512(), **{k: os.environ.get(k) for k in names}}))
"""


def test_a_command_run_through_the_wrapper_sees_no_avx512() -> None:
    done = subprocess.run([sys.executable, "-m", "tests.avx2_only", sys.executable, "-c", PROBE],
                          cwd=PROJECT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["numpy_avx512"] is False  # NumPy took the switch (it refuses names it lacks)
    assert seen["RAYPASS_MAX_ISA"] == "avx2" and seen["OPENBLAS_CORETYPE"] == "Haswell"
    assert "-AVX512F" in seen["GLIBC_TUNABLES"]


def test_tunables_already_set_are_kept() -> None:
    env = avx2_only_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert env["GLIBC_TUNABLES"].startswith("glibc.malloc.arena_max=2:glibc.cpu.hwcaps=-AVX512F,")
