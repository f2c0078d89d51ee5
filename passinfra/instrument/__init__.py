"""Pass instruments: hooks around every pass run under a PassContext.

See :mod:`passinfra.instrument.base` for the call order and exception semantics.
"""

from passinfra.instrument.base import PassInstrument, pass_instrument
from passinfra.instrument.printing import DumpIR, PassPrintingInstrument, PrintAfterAll, PrintBeforeAll
from passinfra.instrument.timing import PassTimingInstrument

__all__ = [
    "PassInstrument", "pass_instrument", "PassTimingInstrument", "PrintBeforeAll", "PrintAfterAll",
    "PassPrintingInstrument", "DumpIR",
]
