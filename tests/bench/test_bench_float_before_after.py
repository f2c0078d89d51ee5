"""bench.float_before_after's in-process runtime comparison: a tree against itself gives
the same bits, and the process's runtime source is left as it was."""

from __future__ import annotations

from bench.common import ROOT
from bench.float_before_after import compare_runtimes
from passinfra.codegen import conv_runtime


def test_a_tree_against_itself_gives_the_same_bits_and_restores_the_runtime(tmp_path):
    source = conv_runtime._SOURCE
    (row,) = compare_runtimes(ROOT, ["conv:8,6,40,3,1,1"], rounds=2, threads=1,
                              config={"codegen.conv_kernel": "microkernel"}, tmp=tmp_path)
    assert row[0] == "conv 8,6,40,3,1,1" and row[-1] == "yes"
    assert conv_runtime._SOURCE is source
