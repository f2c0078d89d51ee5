"""The content-addressed compile cache: hits, corruption, atomic concurrent writes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from passinfra.codegen.cc_driver import CompilerSettings, compile_c, compiler_identity, pipe_flags
from passinfra.codegen.object_cache import ObjectCache, cache_key, compile_stats, reset_compile_stats

SOURCE = "int answer(void) { return 42; }\n"


@pytest.fixture(autouse=True)
def fresh_stats():
    reset_compile_stats()
    yield


def entry_path(cache_dir: Path, source: str, settings: CompilerSettings) -> Path:
    key = cache_key(source, compiler_identity(settings.cc), settings.effective_cflags)
    return ObjectCache(cache_dir).path_of(key)


def test_second_compile_is_a_cache_hit(tmp_path):
    settings = CompilerSettings(cache_dir=str(tmp_path))
    first = compile_c(SOURCE, settings)
    assert compile_stats()["compiles"] == 1 and compile_stats()["misses"] == 1
    second = compile_c(SOURCE, settings)
    assert second == first
    stats = compile_stats()
    assert stats["hits"] == 1 and stats["compiles"] == 1


def test_key_depends_on_source_flags_and_compiler():
    identity = compiler_identity("cc")
    base = cache_key(SOURCE, identity, "-O2")
    assert base != cache_key(SOURCE + " ", identity, "-O2")
    assert base != cache_key(SOURCE, identity, "-O3")
    assert base != cache_key(SOURCE, identity + "x", "-O2")
    # moving text between the parts must change the key too
    assert cache_key("ab", "c", "") != cache_key("a", "bc", "")
    assert "|" in identity and Path(identity.split("|")[0]).is_absolute()


def test_the_pipe_between_compiler_and_assembler_changes_no_object(tmp_path):
    """GCC and Clang run with -pipe (no temporary assembly file); the object is the one
    the files gave, so -pipe is no part of the cache key. A compiler that is neither
    (its --version says so) gets no flag it may not know."""
    from tests.fake_compilers import compiler_stopped_by

    kernel = ("float sum(const float* x, int n) {\n"
              "  float s = 0;\n  for (int i = 0; i < n; i++) s += x[i];\n  return s;\n}\n")
    piped, files = CompilerSettings(use_cache=False), CompilerSettings(use_cache=False, pipe=False)
    assert pipe_flags(piped) == ("-pipe",) and pipe_flags(files) == ()
    assert compile_c(kernel, piped) == compile_c(kernel, files)
    assert pipe_flags(CompilerSettings(cc=str(compiler_stopped_by(2, tmp_path)))) == ()


def test_different_flags_compile_again(tmp_path):
    compile_c(SOURCE, CompilerSettings(cache_dir=str(tmp_path)))
    compile_c(SOURCE, CompilerSettings(cache_dir=str(tmp_path), cflags="-O0 -fPIC -std=c11"))
    assert compile_stats()["compiles"] == 2 and compile_stats()["hits"] == 0


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "garbage"])
def test_corrupted_entry_is_detected_and_rebuilt(tmp_path, damage, caplog):
    settings = CompilerSettings(cache_dir=str(tmp_path))
    good = compile_c(SOURCE, settings)
    path = entry_path(tmp_path, SOURCE, settings)
    blob = bytearray(path.read_bytes())
    if damage == "flip_byte":
        blob[-10] ^= 0xFF
    elif damage == "truncate":
        blob = blob[: len(blob) // 2]
    else:
        blob = bytearray(b"not an object at all")
    path.write_bytes(bytes(blob))
    with caplog.at_level("WARNING", logger="passinfra.codegen.object_cache"):
        rebuilt = compile_c(SOURCE, settings)
    assert rebuilt == good
    stats = compile_stats()
    assert stats["corrupted"] == 1 and stats["rebuilds"] == 1 and stats["compiles"] == 2
    assert "corrupted entry" in caplog.text
    # the rebuilt entry is valid again
    assert compile_c(SOURCE, settings) == good and compile_stats()["hits"] == 1


def test_no_cache_compiles_every_time_and_writes_nothing(tmp_path):
    settings = CompilerSettings(cache_dir=str(tmp_path), use_cache=False)
    compile_c(SOURCE, settings)
    compile_c(SOURCE, settings)
    assert compile_stats()["compiles"] == 2
    assert not any(tmp_path.rglob("*.o"))


def test_no_cache_and_cache_dir_come_from_the_pass_context(tmp_path):
    from passinfra.transform import PassContext

    with PassContext(config={"codegen.cache_dir": str(tmp_path), "codegen.no_cache": True,
                             "codegen.cflags": "-O1 -fPIC"}):
        settings = CompilerSettings.from_context()
    assert settings == CompilerSettings(cc="cc", cflags="-O1 -fPIC", cache_dir=str(tmp_path), use_cache=False)
    assert CompilerSettings.from_context(PassContext()).cflags == "-O2 -fPIC -fno-math-errno -std=c11"


def test_concurrent_writers_do_not_corrupt_the_entry(tmp_path):
    # several processes compile the same kernel into one cache at the same time; every
    # one must get a valid object and the entry must verify afterwards
    script = textwrap.dedent(f"""
        import sys
        from passinfra.codegen.cc_driver import CompilerSettings, compile_c
        from passinfra.codegen.object_cache import ObjectCache
        settings = CompilerSettings(cache_dir={str(tmp_path)!r})
        source = "int answer(void) {{ return 42; }}\\n" + "/* " + "x" * 200000 + " */\\n"
        for _ in range(5):
            data = compile_c(source, settings)
            assert data.startswith(b"\\x7fELF"), data[:8]
        print("ok")
    """)
    root = Path(__file__).resolve().parents[2]
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=root, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.strip() == "ok"
    entries = [p for p in tmp_path.rglob("*.o")]
    assert len(entries) == 1
    assert ObjectCache(tmp_path).get(entries[0].stem) is not None
    assert not [p for p in tmp_path.rglob("*.tmp")]  # no temp files left behind
