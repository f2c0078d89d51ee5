"""The C shipped as files (passinfra/codegen/c): each compiles on its own, warning-free,
with the macros its Python side defines, and says which macro is missing otherwise."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import passinfra.codegen.c
from passinfra.codegen.c import read_c_file
from passinfra.codegen.cc_driver import resolve_compiler
from passinfra.codegen.conv_runtime import runtime_defines, runtime_source
from passinfra.codegen.thread_pool import pool_defines, pool_source

C_DIR = Path(passinfra.codegen.c.__file__).parent
FILES = {"conv_runtime.c": runtime_defines, "thread_pool.c": pool_defines,
         # the quantized matmuls (appended to the runtime) read one of the runtime's tunables
         "matmul_nbits.c": lambda: {"RP_MACS_PER_WORK": runtime_defines()["RP_MACS_PER_WORK"]},
         "qgemm.c": lambda: {"RP_MACS_PER_WORK": runtime_defines()["RP_MACS_PER_WORK"]}}


def _compile(path: Path, defines: dict[str, int], tmp_path: Path) -> subprocess.CompletedProcess:
    command = [resolve_compiler("cc"), "-std=c11", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror",
               *(f"-D{name}={value}" for name, value in defines.items()), "-c", str(path),
               "-o", str(tmp_path / (path.stem + ".o"))]
    return subprocess.run(command, capture_output=True, text=True)


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_c_file_compiles_on_its_own_without_warnings(name, tmp_path):
    result = _compile(C_DIR / name, FILES[name](), tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_missing_tunable_is_named_at_compile_time(name, tmp_path):
    defines = FILES[name]()
    result = _compile(C_DIR / name, dict(list(defines.items())[1:]), tmp_path)
    assert result.returncode != 0 and "the tunables come from passinfra/codegen/" in result.stderr


def test_the_sources_a_build_compiles_are_the_files_after_their_macros():
    assert sorted(path.name for path in C_DIR.glob("*.c")) == sorted(FILES)
    assert runtime_source().endswith(read_c_file("conv_runtime.c") + read_c_file("matmul_nbits.c")
                                     + read_c_file("qgemm.c"))
    assert pool_source().endswith(read_c_file("thread_pool.c"))
    assert all(f"#define {name} " in runtime_source() for name in runtime_defines())
