"""raypass's benchmarks, a package: ``python -m bench`` runs the suite (``raypass bench``
calls :func:`bench.__main__.main`), ``python -m bench.NAME`` one benchmark (e.g.
``python -m bench.ir_scaling``), each writing its ``bench/results_*.md``.

The modules import one another as ``bench.common`` and so on, and what they share with
the test suite from :mod:`passinfra.testing`; none imports ``tests`` or edits the
import path (tests/bench/test_bench_layering.py keeps it so). Importing the package
imports nothing else: each benchmark pulls in Ray, onnx and the like when it runs.
"""
