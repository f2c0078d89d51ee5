"""The compiled library computes output channels with identical filters identically, under
every OpenBLAS kernel this CPU can run (DeduplicateFilters; see its module docstring).

OpenBLAS picks its sgemm kernel from the CPU at load time; ``OPENBLAS_CORETYPE`` forces
one, so a single machine checks what an AVX2 (Haswell/Zen kernel), an AVX-512 and an AVX
machine would compute. Each kernel runs in its own process (the choice is made once per
process) and only if this CPU has the instructions it needs (the kernels and the flags they
need: passinfra.testing, which bench/duplicate_filters.py shares).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from passinfra.testing import OPENBLAS_KERNELS, cpu_flags

PROJECT = Path(__file__).resolve().parents[2]

# A network whose every layer has identical filters, like the onnx light models'
# generated weights (SqueezeNet's head): 3x3 conv -> relu -> 1x1 conv to 1000 channels
# over 13x13 pixels (a GEMM of 169 x 1000 x 512) -> global pool -> softmax over logits of
# ~4e4, where a 1-ulp difference between two channels decides the result.
SCRIPT = r"""
import json, sys
import numpy as np
import passinfra
from passinfra import ir
from passinfra.ir import op
from passinfra.transform import PassContext

x = ir.var("x", (1, 16, 13, 13))
y = op.nn.relu(op.nn.conv2d(x, ir.const(np.full((512, 16, 3, 3), 0.02, "float32")), padding=(1, 1)))
y = op.nn.relu(op.nn.conv2d(y, ir.const(np.full((1000, 512, 1, 1), 0.02, "float32"))))
mod = ir.IRModule.from_expr(op.nn.softmax(op.reshape(op.nn.global_avg_pool2d(y), (1, 1000))))
data = np.random.default_rng(0).uniform(1e3, 2e3, (1, 16, 13, 13)).astype("float32")
with PassContext(config={"codegen.cache_dir": sys.argv[1], "codegen.build_cache": False}):
    out = passinfra.build(mod, opt_level=3)(data)
print(json.dumps({"distinct": int(np.unique(out).size), "max": float(out.max())}))
"""


@pytest.mark.parametrize("kernel", sorted(OPENBLAS_KERNELS))
def test_identical_channels_are_identical_under_every_blas_kernel(kernel: str, tmp_path: Path) -> None:
    missing = OPENBLAS_KERNELS[kernel] - cpu_flags()
    if missing:
        pytest.skip(f"this CPU cannot run OpenBLAS's {kernel} kernel (no {', '.join(sorted(missing))})")
    env = {"OPENBLAS_CORETYPE": kernel, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "cache")], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # every logit equal, so the softmax is exactly uniform
    assert result == {"distinct": 1, "max": pytest.approx(1e-3, rel=1e-6)}
