"""Whole-build cache: an unchanged model under unchanged settings skips the pipeline.

The object cache (:mod:`passinfra.codegen.object_cache`) saves the C compiler's time, but a
rebuild would still run every graph pass, lowering, C rendering and the link. This cache
stores what ``build()`` makes, a :class:`~passinfra.codegen.artifacts.BuildArtifact`
(library bytes, runtime metadata, weights blob), under a key naming everything that
determines it:

- the input module's structural hash (functions, constants' bytes, attrs);
- ``opt_level``, target, required and disabled passes, every config item except where
  the cache lives;
- the pass pipeline: each pass name and the factory registered for it;
- the C compiler's identity and the default flags, and the BLAS library linked;
- a digest of raypass's own source files (Python, and the C runtime it compiles into
  every library), so editing or upgrading raypass never reuses a stale library.

It is consulted only when the result cannot differ and nothing observes the passes:
config ``codegen.build_cache`` (default True) and not ``codegen.no_cache``, no pass
instruments in the context (they expect to see the passes run), and every pass of the
pipeline registered by raypass itself (a user's override could depend on anything).
The scheduler does not enter the key: parallel builds are byte-identical to in-process
ones. Entries live in the object cache's directory, are verified on read (a corrupted
entry is removed, reported and rebuilt) and written atomically.

Counters (:func:`~passinfra.codegen.object_cache.compile_stats`): ``build_hits``,
``build_misses``, ``build_corrupted``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from passinfra.codegen.artifacts import BuildArtifact
from passinfra.codegen.cc_driver import DEFAULT_CFLAGS, CompilerSettings, compiler_identity
from passinfra.codegen.gemm import blas_library
from passinfra.codegen.object_cache import ObjectCache
from passinfra.ir.module import IRModule
from passinfra.ir.structural import structural_hash
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.registry import registered_factory

register_config("codegen.build_cache", bool)

_FORMAT = b"raypass-build/1"
_SOURCE_ROOT = Path(__file__).resolve().parents[1]  # the passinfra package
# the C runtime (codegen/c/*.c) is linked into libraries too: a digest of the Python
# alone reused a library with the old runtime after the C changed
_SOURCE_PATTERNS = ("*.py", "*.c", "*.h")


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """sha256 over raypass's sources: Python and C (relative path and content, sorted)."""
    digest = hashlib.sha256()
    sources = [path for pattern in _SOURCE_PATTERNS for path in _SOURCE_ROOT.rglob(pattern)]
    for path in sorted(sources):
        digest.update(str(path.relative_to(_SOURCE_ROOT)).encode("utf-8") + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _factory_name(pass_name: str) -> str | None:
    """``module.qualname`` of the factory registered for ``pass_name``, or None when it
    is not raypass's own (then the build cannot be cached)."""
    factory = registered_factory(pass_name)
    module = getattr(factory, "__module__", "") or ""
    if not module.startswith("passinfra."):
        return None
    return f"{module}.{getattr(factory, '__qualname__', repr(factory))}"


def build_key(mod: IRModule, ctx: PassContext, target: str, pipeline: Sequence[str]) -> str | None:
    """The cache key of building ``mod`` under ``ctx``, or None when this build must not
    be cached (see the module docstring)."""
    if ctx.instruments or not ctx.get_config("codegen.build_cache", True):
        return None
    settings = CompilerSettings.from_context(ctx)
    if not settings.use_cache:
        return None
    factories = [_factory_name(name) for name in pipeline]
    if any(name is None for name in factories):
        return None
    blas = blas_library()
    config = {key: repr(value) for key, value in ctx.config.items() if key != "codegen.cache_dir"}
    parts = {
        "module": structural_hash(mod),
        "opt_level": ctx.opt_level,
        "target": target,
        "required": sorted(ctx.required_pass),
        "disabled": sorted(ctx.disabled_pass),
        "config": sorted(config.items()),
        "pipeline": list(zip(pipeline, factories)),
        "compiler": compiler_identity(settings.cc),
        "default_cflags": DEFAULT_CFLAGS,
        "vector_math": settings.uses_vector_math,
        "blas": None if blas is None else repr(blas),
        "sources": source_digest(),
    }
    digest = hashlib.sha256(_FORMAT)
    digest.update(json.dumps(parts, sort_keys=True, default=repr).encode("utf-8"))
    return digest.hexdigest()


def _cache(ctx: PassContext) -> ObjectCache:
    directory = CompilerSettings.from_context(ctx).resolved_cache_dir
    return ObjectCache(directory, suffix=".build", stat_prefix="build_")


def lookup_build(key: str, ctx: PassContext) -> BuildArtifact | None:
    """The stored build for ``key``, or None (absent, or corrupted and removed)."""
    data, _ = _cache(ctx).lookup_view(key)
    return None if data is None else BuildArtifact.from_bytes(data)


def store_build(key: str, artifact: BuildArtifact, ctx: PassContext) -> None:
    _cache(ctx).put(key, *artifact.chunks())


__all__ = ["BuildArtifact", "build_key", "lookup_build", "store_build", "source_digest"]
