"""The rate of the multiply instructions the kernels are built on, on this CPU.

Ten independent chains of one instruction (their latency hidden), 200 million steps,
instructions per second: AVX2 ``VFMADD231PS`` (8 float multiply-adds), ``VPMADDWD`` (16
int16 multiply-adds, the integer GEMM's widening body), ``VPMADDUBSW`` (32 u8 x s8
multiply-adds, its 7-bit body) and the last two interleaved (whether they share their
execution units). Compiled here with ``cc -O2``; the best of ``--repeats`` runs.

    python -m bench.instruction_rates [--repeats 3] [--output FILE]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from bench.common import report

_CHAINS = 10
_STEPS = 200_000_000


def _kernel(name: str, target: str, vector: str, init: str, step: str, sink: str) -> str:
    chains = ",".join(f"a{i}={init}" if i == 0 else f"a{i}=a0" for i in range(_CHAINS))
    steps = "".join(step.format(a=f"a{i}") for i in range(_CHAINS))
    keep = ",".join(f'"+x"(a{i})' for i in range(_CHAINS))
    return f"""
__attribute__((target("{target}"))) static double {name}(void) {{
  {vector} {chains};
  double started = now();
  for (long i = 0; i < {_STEPS}L; i++) {{
    {steps}
    __asm__ volatile("" : {keep});
  }}
  double seconds = now() - started;
  {sink}
  return {_STEPS}.0 * {_CHAINS} / seconds;
}}
"""


def _mixed() -> str:
    """VPMADDUBSW and VPMADDWD alternating, five chains each."""
    steps = "".join(f"a{i}=_mm256_maddubs_epi16(a{i},x);b{i}=_mm256_madd_epi16(b{i},y);" for i in range(5))
    keep = ",".join([f'"+x"(a{i})' for i in range(5)] + [f'"+x"(b{i})' for i in range(5)])
    return f"""
__attribute__((target("avx2"))) static double mixed(void) {{
  __m256i a0=_mm256_set1_epi8(3),a1=a0,a2=a0,a3=a0,a4=a0,b0=_mm256_set1_epi16(3),b1=b0,b2=b0,b3=b0,b4=b0;
  const __m256i x=_mm256_set1_epi8(5), y=_mm256_set1_epi16(5);
  double started = now();
  for (long i = 0; i < {_STEPS}L; i++) {{
    {steps}
    __asm__ volatile("" : {keep});
  }}
  double seconds = now() - started;
  sink_i(_mm256_add_epi32(a0, b4));
  return {_STEPS}.0 * {_CHAINS} / seconds;
}}
"""


SOURCE = "\n".join([
    "#include <immintrin.h>",
    "#include <stdio.h>",
    "#include <time.h>",
    "static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); "
    "return t.tv_sec + t.tv_nsec * 1e-9; }",
    "volatile int rp_sink;",
    '__attribute__((target("avx2"))) static void sink_i(__m256i v) { rp_sink = _mm256_extract_epi32(v, 0); }',
    '__attribute__((target("avx2"))) static void sink_f(__m256 v) { rp_sink = (int)_mm256_cvtss_f32(v); }',
    _kernel("fma", "avx2,fma", "__m256", "_mm256_set1_ps(1.0001f)",
            "{a}=_mm256_fmadd_ps({a},_mm256_set1_ps(0.9999f),_mm256_set1_ps(1e-5f));", "sink_f(a0);"),
    _kernel("madd", "avx2", "__m256i", "_mm256_set1_epi16(3)",
            "{a}=_mm256_madd_epi16({a},_mm256_set1_epi16(5));", "sink_i(a0);"),
    _kernel("maddubs", "avx2", "__m256i", "_mm256_set1_epi8(3)",
            "{a}=_mm256_maddubs_epi16({a},_mm256_set1_epi8(5));", "sink_i(a0);"),
    _mixed(),
    'int main(void) { printf("%f %f %f %f\\n", fma(), madd(), maddubs(), mixed()); return 0; }',
])
NAMES = ("VFMADD231PS (8 float multiply-adds)", "VPMADDWD (16 int16 multiply-adds)",
         "VPMADDUBSW (32 u8 x s8 multiply-adds)", "VPMADDUBSW and VPMADDWD interleaved")
MULTIPLY_ADDS = (8, 16, 32, None)


def measure(repeats: int) -> list[float]:
    """The best rate of each kernel (instructions per second) over ``repeats`` runs."""
    with tempfile.TemporaryDirectory(prefix="raypass-bench-rates-") as tmp:
        source, binary = Path(tmp) / "rates.c", Path(tmp) / "rates"
        source.write_text(SOURCE)
        subprocess.run(["cc", "-O2", "-o", str(binary), str(source)], check=True)
        best = [0.0] * len(NAMES)
        for _ in range(repeats):
            rates = [float(v) for v in subprocess.run([str(binary)], check=True, capture_output=True,
                                                      text=True).stdout.split()]
            best = [max(b, r) for b, r in zip(best, rates, strict=True)]
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instruction_rates",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    rates = measure(args.repeats)
    rows = [[name, f"{rate / 1e9:.2f}", "-" if macs is None else f"{rate * macs / 1e9:.1f}"]
            for name, rate, macs in zip(NAMES, rates, MULTIPLY_ADDS, strict=True)]
    report("Multiply instructions per second on this CPU",
           f"python -m bench.instruction_rates --repeats {args.repeats}",
           f"{_CHAINS} independent chains of one AVX2 instruction, {_STEPS:,} steps, the best of "
           f"{args.repeats} runs.",
           ["instruction", "G instructions/s", "G multiply-adds/s"], rows, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
