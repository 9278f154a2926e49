"""nbhelpers.compile_cache: where inductor's cache is, and the cold and warm probe's errors."""
import getpass
import os
import tempfile

import pytest

from nbhelpers import compile_cache


def test_cache_dir_honours_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache.cache_dir() == tmp_path / "mine" and (tmp_path / "mine").is_dir()   # inductor creates it


def test_cache_dir_defaults_to_the_temp_dir_and_exports_its_choice(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    where = compile_cache.cache_dir()
    assert where == tmp_path / f"torchinductor_{getpass.getuser()}" and where.is_dir()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(where)


def test_cache_probe_timeout_is_an_error_that_says_what_to_do():
    with pytest.raises(RuntimeError, match="took over 0.01 s; raise timeout_s"):
        compile_cache.time_cold_and_warm(timeout_s=0.01)


def test_a_failing_probe_says_how_it_failed(monkeypatch, tmp_path):
    failing = tmp_path / "python"
    failing.write_text("#!/bin/sh\necho 'ImportError: no module named nbhelpers' >&2\nexit 3\n")
    failing.chmod(0o755)
    monkeypatch.setattr(compile_cache.sys, "executable", str(failing))
    with pytest.raises(RuntimeError, match=r"the cache probe failed \(exit 3\):\nImportError: no module named nbhelpers"):
        compile_cache.time_cold_and_warm(timeout_s=30)
