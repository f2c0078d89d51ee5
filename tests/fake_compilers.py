"""A stand-in C compiler that a signal stops: what a terminal's Ctrl-C (or the kernel)
does to the compilers raypass runs, for the tests of how that is reported; and the
SIGINT a terminal gives the command those tests interrupt."""

from __future__ import annotations

import signal
import sys
from pathlib import Path


def foreground_sigint() -> None:
    """A ``preexec_fn``: the command gets a foreground job's SIGINT, as a terminal starts
    it. A test run started in the background (a shell's ``&``, nohup) has SIGINT ignored,
    which the command would otherwise inherit and keep."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
