"""The kernel preamble declares what kernels use of the C library itself (no system
headers: their parsing was half of every kernel compile's fixed cost). It must declare
every function and macro the renderer can emit, and give the same code the headers did."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from passinfra.codegen import c_renderer
from passinfra.codegen.c_renderer import INTRINSICS, LIBC_DECLARATIONS, PREAMBLE, SYSTEM_HEADERS
from passinfra.codegen.cc_driver import CompilerSettings, resolve_compiler

STRICT = ("-Werror=implicit-function-declaration", "-Werror=builtin-declaration-mismatch",
          "-Werror=implicit-int")


def _every_use() -> str:
    """A C function calling every C library function the renderer's intrinsics map to,
    and using every macro and type its expressions may contain."""
    calls = []
    for table in INTRINSICS.values():
        for dtype, function in sorted(table.items()):
            ctype = c_renderer.c_type(dtype)
            arity = 2 if function in c_renderer._BINARY_MATH else 1
            calls.append(f"  sink += (double){function}({', '.join([f'({ctype})x'] * arity)});")
    bits = [f"  sink += (double){kind}{n}_C(1); {kind.lower()}{n}_t v{kind}{n} = 0; sink += v{kind}{n};"
            for n in (8, 16, 32, 64) for kind in ("INT", "UINT")]
    return "\n".join([
        "double every_use(double x, long n) {",
        "  double sink = 0.0; bool flag = x > 0;",
        "  float* heap = malloc((size_t)n * sizeof(float)); if (heap == NULL) abort();",
        "  memset(heap, 0, (size_t)n * sizeof(float)); memcpy(heap, heap + 1, sizeof(float));",
        "  sink += heap[0] + (flag ? INFINITY : NAN); free(heap);",
        *calls,
        *bits,
        "  return sink;",
        "}",
    ]) + "\n"


def _compile(tmp_path: Path, source: str, *extra: str) -> bytes:
    settings = CompilerSettings()
    c_file, obj = tmp_path / "kernel.c", tmp_path / "kernel.o"
    c_file.write_text(source)
    command = [resolve_compiler(settings.cc), *shlex.split(settings.effective_cflags), *STRICT, *extra,
               "-c", c_file.name, "-o", obj.name]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return obj.read_bytes()


def test_the_preamble_declares_everything_a_kernel_uses(tmp_path: Path) -> None:
    assert "#include <math.h>" not in PREAMBLE.split("#else")[0]  # the fast branch parses no system header
    _compile(tmp_path, PREAMBLE + _every_use())


def test_a_compiler_without_gccs_type_macros_gets_the_system_headers(tmp_path: Path) -> None:
    _compile(tmp_path, PREAMBLE + _every_use(), "-U__INT64_TYPE__")


@pytest.mark.parametrize("flags", [(), ("-mavx2", "-mfma")], ids=["default", "avx2"])
def test_declared_and_header_preambles_give_the_same_object(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """GCC knows the declared functions as built-ins (sqrtf an instruction, vectorized
    expf through libmvec): the code is the one the system headers gave."""
    headers = PREAMBLE.replace(LIBC_DECLARATIONS, SYSTEM_HEADERS, 1)
    assert headers != PREAMBLE
    body = _every_use() + "\n".join([
        "void loop(float* restrict out, const float* restrict a, long n) {",
        "  for (long i = 0; i < n; ++i) out[i] = sqrtf(fabsf(a[i])) + expf(a[i]) + floorf(a[i]);",
        "}",
    ]) + "\n"
    assert _compile(tmp_path, PREAMBLE + body, *flags) == _compile(tmp_path, headers + body, *flags)
