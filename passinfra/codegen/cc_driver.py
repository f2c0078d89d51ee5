"""The C compiler driver: C text -> object bytes, through the content-addressed cache.

Settings come from the PassContext config (registered here):

- ``codegen.cc`` (str): the compiler, ``cc`` by default;
- ``codegen.cflags`` (str): flags, :data:`DEFAULT_CFLAGS` by default (portable: no
  ``-march=native`` unless the user puts it there);
- ``codegen.cache_dir`` (str): the object cache, default
  :func:`~passinfra.codegen.object_cache.default_cache_dir`;
- ``codegen.no_cache`` (bool): compile every kernel every time, neither reading nor
  writing the cache (the convolution runtime, a part of raypass rather than of a model,
  still comes from the cache: :func:`passinfra.codegen.conv_runtime.start_runtime_compile`);
- ``codegen.vector_math`` (bool, default True): vectorized math calls through glibc's
  libmvec where the compiler can link it (:mod:`passinfra.codegen.vector_math`).

The compiler always runs with ``-ffp-contract=off`` (unless the flags choose their own
``-ffp-contract``): no ``a*b+c`` becomes a fused multiply-add, so the arithmetic of a
kernel's AVX2 clone (:mod:`passinfra.codegen.multiversion`) and of its default body is
the same bits (their vector math differs by a few ulps).

A failed compile raises :class:`CompileError` with the compiler's stderr and the path of
the C file, which is kept (in a fresh temporary directory) so it can be inspected.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from passinfra.codegen import multiversion, vector_math
from passinfra.codegen.object_cache import ObjectCache, cache_key, count, default_cache_dir, shared_tier
from passinfra.errors import RaypassError
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext

DEFAULT_CC = "cc"
DEFAULT_CFLAGS = "-O2 -fPIC -fno-math-errno -std=c11"

register_config("codegen.cc", str)
register_config("codegen.cflags", str)
register_config("codegen.cache_dir", str)
register_config("codegen.no_cache", bool)


class CompileError(RaypassError):
    """The C compiler (or linker) failed; the message holds its stderr and the kept C file
    (``kept``: the directory it is in, None when nothing was kept)."""

    kept: Path | None = None


class CompileInterrupted(CompileError):
    """The C compiler (or linker) was stopped by SIGINT, or its compile by
    ``stop_compiles``: a Ctrl-C reaches every process of the terminal's group, the
    compilers a worker process runs too, so a worker's compile ends so when the user
    interrupts; not the C's fault (``raypass tune`` turns it into the interruption it is).
    Another signal (the kernel's SIGKILL when memory runs out) is a CompileError."""


def stopped_by(returncode: int) -> type[CompileError]:
    """The error of a compiler or linker that a signal stopped (a negative return code)."""
    return CompileInterrupted if returncode == -signal.SIGINT else CompileError


@dataclass(frozen=True)
class CompilerSettings:
    cc: str = DEFAULT_CC
    cflags: str = DEFAULT_CFLAGS
    cache_dir: str | None = None
    use_cache: bool = True
    vector_math: bool = True
    # GCC and Clang hand the assembly to the assembler through a pipe, not a temporary
    # file: the same object, and the assembler runs beside cc1 rather than after it. That
    # shortens a compile where a core is free (a call's fixed cost 19.7 -> 15.2 ms on 2
    # cores, bench/compile_overhead.py: the last kernels of a stage, a local build), not
    # its CPU time. Not a config key: only that bench turns it off.
    pipe: bool = True

    @staticmethod
    def from_context(ctx: PassContext | None = None) -> CompilerSettings:
        ctx = PassContext.current() if ctx is None else ctx
        return CompilerSettings(
            cc=ctx.get_config("codegen.cc", DEFAULT_CC),
            cflags=ctx.get_config("codegen.cflags", DEFAULT_CFLAGS),
            cache_dir=ctx.get_config("codegen.cache_dir", None),
            use_cache=not ctx.get_config("codegen.no_cache", False),
            vector_math=ctx.get_config("codegen.vector_math", True),
        )

    @property
    def uses_vector_math(self) -> bool:
        """Vector math asked for and linkable with this compiler and these flags."""
        return self.vector_math and vector_math.vector_math_available(self.cc, self.cflags)

    @property
    def effective_cflags(self) -> str:
        """The flags the compiler runs with: ``cflags``, plus ``-ffp-contract=off`` and
        the vector-math macro."""
        flags = " ".join(filter(None, (self.cflags, multiversion.contract_flag(self.cflags))))
        if self.uses_vector_math:
            return f"{flags} -D{vector_math.MACRO}"
        return flags

    @property
    def resolved_cache_dir(self) -> str:
        return self.cache_dir or default_cache_dir()


def pipe_flags(settings: CompilerSettings) -> tuple[str, ...]:
    """``("-pipe",)`` where the compiler is GCC or Clang (both take it), else nothing:
    flags that change how the compiler's stages talk, never the object they make (so
    they are no part of the cache key)."""
    if not settings.pipe:
        return ()
    version = compiler_identity(settings.cc).split("|", 1)[-1].lower()
    return ("-pipe",) if "gcc" in version or "clang" in version else ()


def resolve_compiler(cc: str) -> str:
    """The absolute, symlink-resolved path of the compiler ``cc``, or CompileError."""
    found = shutil.which(cc)
    if found is None:
        raise CompileError(f"C compiler {cc!r} not found on PATH (set config 'codegen.cc')")
    return os.path.realpath(found)


@functools.lru_cache(maxsize=16)
def compiler_identity(cc: str) -> str:
    """``<resolved path>|<first line of cc --version>``: part of every cache key, so a
    compiler upgrade or a different compiler never reuses old objects."""
    path = resolve_compiler(cc)
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as error:
        raise CompileError(f"cannot run C compiler {cc!r} ({path}): {error}") from error
    if result.returncode < 0:  # stopped by a signal (Ctrl-C): no answer, and none to cache
        raise stopped_by(result.returncode)(f"`{path} --version` was stopped by signal {-result.returncode}")
    first_line = (result.stdout or result.stderr).splitlines()[:1]
    return f"{path}|{first_line[0] if first_line else 'unknown version'}"


@dataclass(frozen=True)
class CompileResult:
    """Object code, and whether it came from the cache (no compiler ran)."""

    object_code: bytes
    cache_hit: bool


def compile_c(source: str, settings: CompilerSettings | None = None, name: str = "kernel") -> bytes:
    """Compile C ``source`` to object code (bytes), using the cache unless disabled.

    ``name`` (a C identifier) names the C file, which is what error messages show.
    """
    return compile_c_result(source, settings, name).object_code


def compile_c_result(source: str, settings: CompilerSettings | None = None,
                     name: str = "kernel") -> CompileResult:
    """:func:`compile_c`, also telling whether the object was a cache hit."""
    settings = settings or CompilerSettings()
    identity = compiler_identity(settings.cc)
    if not settings.use_cache:
        return CompileResult(_run_compiler(source, settings, name), cache_hit=False)
    cache = ObjectCache(settings.resolved_cache_dir)
    key = cache_key(source, identity, settings.effective_cflags)
    cached, corrupted = cache.lookup(key)
    if cached is not None:
        return CompileResult(cached, cache_hit=True)
    tier = shared_tier()  # another node of the cluster may have compiled it
    shared = tier.get(key) if tier is not None else None
    if shared is not None:
        count("shared_hits")
        cache.put(key, shared)
        return CompileResult(shared, cache_hit=True)
    data = _run_compiler(source, settings, name)
    if corrupted:
        count("rebuilds")
    cache.put(key, data)
    if tier is not None:
        tier.put(key, data)
    return CompileResult(data, cache_hit=False)


def _run_compiler(source: str, settings: CompilerSettings, name: str) -> bytes:
    count("compiles")
    # the command first: the flags may probe the system (vector_math runs the compiler),
    # and nothing of this compile exists on disk until the try below owns it
    c_name, obj_name = f"{name}.c", f"{name}.o"
    command = [resolve_compiler(settings.cc), *shlex.split(settings.effective_cflags), *pipe_flags(settings),
               "-c", c_name, "-o", obj_name]
    workdir = tempfile.mkdtemp(prefix="raypass-cc-")
    c_path, obj_path = Path(workdir) / c_name, Path(workdir) / obj_name
    kept = False  # the C file of a failed compile stays for the user to look at
    try:
        c_path.write_text(source, encoding="utf-8")
        try:
            # run inside the temp dir with relative names, so no absolute path ends up in the object
            result = _run_tracked(command, workdir)
        except (OSError, subprocess.TimeoutExpired) as error:
            kept = True
            failure = CompileError(f"running the C compiler failed: {error}\n"
                                   f"  command: {shlex.join(command)}\n  C file kept at: {c_path}")
            failure.kept = Path(workdir)
            raise failure from error
        if result.returncode < 0:  # a signal (Ctrl-C reaches the compiler too), not the C's fault
            stopped = stopped_by(result.returncode)
            raise stopped(f"the C compiler was stopped by signal {-result.returncode} while compiling "
                          f"{name!r}\n  command: {shlex.join(command)}")
        if result.returncode != 0:
            kept = True
            failure = CompileError(
                f"C compilation of {name!r} failed (exit code {result.returncode})\n"
                f"  command: {shlex.join(command)}\n  C file kept at: {c_path}\n"
                f"--- compiler stderr ---\n{result.stderr.strip()}"
            )
            failure.kept = Path(workdir)
            raise failure
        return obj_path.read_bytes()
    finally:
        if not kept:  # also when interrupted (Ctrl-C) mid-compile: nothing left in the temp dir
            shutil.rmtree(workdir, ignore_errors=True)


# the compilers this process runs now (kernels in the main thread, the convolution
# runtime in a background one), so that Ctrl-C can end them all: a compile left running
# in a background thread would hold the interpreter's exit until it finished
_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()
_stopped = False


def stop_compiles() -> None:
    """End every compiler this process runs and start no other (the command was
    interrupted: what they would produce is not wanted)."""
    global _stopped
    with _running_lock:
        _stopped = True
        for proc in _running:
            proc.kill()


def _run_tracked(command: list[str], workdir: str) -> subprocess.CompletedProcess:
    """``subprocess.run(command)`` in ``workdir`` (output captured, 600 s at most), as one
    of the compiles ``stop_compiles`` ends."""
    with _running_lock:
        if _stopped:
            raise CompileInterrupted("compiling was stopped: the command was interrupted")
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=workdir)
        _running.add(proc)
    try:
        stdout, stderr = proc.communicate(timeout=600)
    except BaseException:  # a timeout, or Ctrl-C in this thread
        proc.kill()
        proc.communicate()
        raise
    finally:
        with _running_lock:
            _running.discard(proc)
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def link_shared(objects: list[tuple[str, bytes]], settings: CompilerSettings | None = None,
                extra_flags: tuple[str, ...] = ("-Wl,-Bsymbolic", "-lm")) -> bytes:
    """Link named objects (in the given order) into a shared library; its bytes.

    ``-Bsymbolic`` binds the library's calls to its own definitions, never to a same-named
    symbol of the process loading it. Names become file names (``<name>.o``) in a
    temporary directory, so the same objects in the same order link to the same bytes.
    """
    settings = settings or CompilerSettings()
    workdir = tempfile.mkdtemp(prefix="raypass-link-")
    names = []
    for index, (name, data) in enumerate(objects):
        file_name = f"{index:05d}_{name}.o"
        (Path(workdir) / file_name).write_bytes(data)
        names.append(file_name)
    # -fopenmp must reach the linker too when kernels were compiled with it
    link_flags = [f for f in shlex.split(settings.cflags) if f in ("-fopenmp",)]
    libraries = (vector_math.LINK_FLAG,) if settings.uses_vector_math else ()
    command = [resolve_compiler(settings.cc), "-shared", *link_flags, "-o", "library.so", *names,
               *libraries, *extra_flags]
    result = subprocess.run(command, capture_output=True, text=True, cwd=workdir, timeout=600)
    if result.returncode < 0:  # a signal (Ctrl-C), as for the compiler
        raise stopped_by(result.returncode)(f"the linker was stopped by signal {-result.returncode}\n"
                                             f"  command: {shlex.join(command)}")
    if result.returncode != 0:
        raise CompileError(
            f"linking the shared library failed (exit code {result.returncode})\n"
            f"  command: {shlex.join(command)}\n  objects kept in: {workdir}\n"
            f"--- linker stderr ---\n{result.stderr.strip()}"
        )
    data = (Path(workdir) / "library.so").read_bytes()
    shutil.rmtree(workdir, ignore_errors=True)
    return data


__all__ = [
    "CompileError", "CompileInterrupted", "CompileResult", "CompilerSettings", "DEFAULT_CC", "DEFAULT_CFLAGS",
    "compile_c",
    "compile_c_result", "compiler_identity", "stopped_by",
    "link_shared", "resolve_compiler",
]
