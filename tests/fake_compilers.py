"""A stand-in C compiler that a signal stops: what a terminal's Ctrl-C (or the kernel)
does to the compilers raypass runs, for the tests of how that is reported."""

from __future__ import annotations

import sys
from pathlib import Path


def compiler_stopped_by(signal_number: int, directory: Path) -> Path:
    """An executable in ``directory`` that answers ``--version`` and, asked to compile,
    stops itself with ``signal_number``."""
    fake = directory / "fake-cc"
    fake.write_text(f"#!{sys.executable}\n"
                    "import os, signal, sys\n"
                    "if '--version' in sys.argv:\n"
                    "    print('fake-cc 1.0')\n"
                    "    sys.exit(0)\n"
                    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
                    f"os.kill(os.getpid(), {int(signal_number)})\n")
    fake.chmod(0o755)
    return fake
