"""nbhelpers.compile_cache: where inductor's cache is, and the cold and warm probe's errors."""
import pytest

from nbhelpers import compile_cache


def test_cache_dir_is_the_one_inductor_uses(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert compile_cache.cache_dir() == tmp_path


def test_cache_probe_timeout_is_an_error_that_says_what_to_do():
    with pytest.raises(RuntimeError, match="took over 0.01 s; raise timeout_s"):
        compile_cache.time_cold_and_warm(timeout_s=0.01)


def test_a_failing_probe_says_how_it_failed(monkeypatch):
    monkeypatch.setattr(compile_cache.sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match=r"the cache probe failed \(exit 1\)"):
        compile_cache.time_cold_and_warm(timeout_s=30)
