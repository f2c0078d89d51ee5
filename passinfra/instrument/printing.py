"""Instruments that show the IR around passes: print to stdout, or dump to files."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from passinfra.instrument.base import PassInstrument

if TYPE_CHECKING:
    from passinfra.ir.module import IRModule
    from passinfra.transform.pass_info import PassInfo


def _show(when: str, mod: IRModule, info: PassInfo) -> None:
    # print() looks sys.stdout up at call time, so redirection applies
    print(f"{when} Running Pass: {info.name}")
    print(mod.astext(show_meta_data=False))  # for reading: the weights' base64 would drown the IR


class PrintBeforeAll(PassInstrument):
    """Prints the module before every pass."""

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        _show("Before", mod, info)


class PrintAfterAll(PassInstrument):
    """Prints the module after every pass."""

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        _show("After", mod, info)


class PassPrintingInstrument(PassInstrument):
    """Prints the module before the passes named in ``print_before_pass_names`` and after
    those named in ``print_after_pass_names``."""

    def __init__(
        self, print_before_pass_names: Iterable[str] = (), print_after_pass_names: Iterable[str] = ()
    ) -> None:
        self.print_before_pass_names = frozenset(print_before_pass_names)
        self.print_after_pass_names = frozenset(print_after_pass_names)

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if info.name in self.print_before_pass_names:
            _show("Before", mod, info)

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        if info.name in self.print_after_pass_names:
            _show("After", mod, info)


_UNSAFE_FILENAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


class DumpIR(PassInstrument):
    """Writes the module after each pass to ``dump_dir/NNN_<pass>.txt``.

    NNN counts the passes run in the context from 000, in order (a Sequential gets its
    own file after those of its passes, since it finishes after them). The counter
    restarts when a context holding this instrument is entered.
    """

    def __init__(self, dump_dir: str | Path) -> None:
        self.dump_dir = Path(dump_dir)
        self.counter = 0

    def enter_pass_ctx(self) -> None:
        self.counter = 0

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        safe_name = _UNSAFE_FILENAME_CHARS.sub("_", info.name)
        path = self.dump_dir / f"{self.counter:03d}_{safe_name}.txt"
        path.write_text(mod.astext(show_meta_data=True))
        self.counter += 1
