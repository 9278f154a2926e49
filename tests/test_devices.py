"""nbhelpers.devices: one place decides the device, and the capability report tells the truth."""
import dataclasses

import pytest
import torch

from nbhelpers import devices


def test_pick_device_follows_cuda_availability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.pick_device() == torch.device("cpu") and not devices.has_cuda()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.pick_device() == torch.device("cuda", 0) and devices.has_cuda()


def test_banner_names_the_torch_build_and_the_device_and_not_the_interpreter():
    assert devices.banner("cpu") == f"torch {torch.__version__} | device cpu (CPU)"   # stable on 3.10-3.13


def test_the_dynamo_row_does_not_name_the_interpreter_version():
    (row,) = [c for c in devices.capabilities() if c.name == "TorchDynamo"]
    assert row.available and row.why == ("this Python is supported (Dynamo refuses 3.15+ and free-threaded builds "
                                         "before 3.13.3)")          # the same text on every interpreter


def test_resolve_uses_the_given_device_then_the_inputs_then_the_default_and_never_picks_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)            # even where a GPU could be used
    assert devices.resolve("meta") == torch.device("meta")
    assert devices.resolve(None, torch.empty(1, device="meta")) == torch.device("meta")     # the input's
    assert devices.resolve(None, torch.nn.Linear(2, 2, device="meta")) == torch.device("meta")   # a module's
    assert devices.resolve(None, torch.nn.ReLU(), 3) == torch.device("cpu")  # no tensors in them: the default
    assert devices.resolve() == torch.device("cpu")
    with torch.device("meta"):                                               # the caller's own default
        assert devices.resolve() == torch.device("meta")


def test_synchronize_without_a_device_does_not_pick_cuda(monkeypatch):
    waited = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    devices.synchronize()
    devices.synchronize("cpu")
    assert waited == []                                                      # no CUDA wait was asked for
    devices.synchronize("cuda:0")
    assert waited == [torch.device("cuda", 0)]


def test_capabilities_are_frozen_rows_with_reasons():
    caps = devices.capabilities()
    assert len({c.name for c in caps}) == len(caps) == 7
    assert all(c.why and c.needed_for for c in caps)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps[0].available = True
    by_name = {c.name: c for c in caps}
    assert by_name["CUDA GPU"].available == torch.cuda.is_available()
    assert by_name["gloo backend"].available == torch.distributed.is_gloo_available()
    assert "CUDA GPU" in devices.render_capabilities(caps).splitlines()[1]


def test_compiler_probe_reports_a_missing_compiler_with_the_fix():
    ok, why = devices._compiles_openmp("no-such-cxx-compiler")
    assert not ok and "not on PATH" in why and "g++" in why


def test_compiler_probe_reports_a_compiler_that_fails():
    ok, why = devices._compiles_openmp("false")   # exists, exits 1 without building anything
    assert not ok and "cannot build with OpenMP" in why


def test_the_compiler_probe_passes_inductors_openmp_flags(monkeypatch):
    """On macOS inductor passes -Xclang -fopenmp and libomp's paths (Apple clang refuses a bare -fopenmp);
    the probe asks inductor instead of assuming Linux's flags."""
    import sys

    from torch._inductor import cpp_builder

    if sys.platform == "linux":
        assert devices._openmp_flags("g++") == ["-fopenmp", "-lgomp"]
    monkeypatch.setattr(cpp_builder, "_IS_MACOS", True)
    monkeypatch.setattr(cpp_builder, "_is_apple_clang", lambda cxx: True)
    monkeypatch.setattr(cpp_builder, "homebrew_libomp", lambda: (True, "/opt/homebrew/opt/libomp"))
    monkeypatch.delenv("OMP_PREFIX", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    flags = devices._openmp_flags("clang++")
    assert flags[:2] == ["-Xclang", "-fopenmp"] and "-I/opt/homebrew/opt/libomp/include" in flags
    assert "-L/opt/homebrew/opt/libomp/lib" in flags and "-lomp" in flags


def test_compiler_probe_accepts_this_machines_compiler():
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("no g++ on this machine: inductor's CPU path needs a C++ compiler with OpenMP")
    ok, why = devices._compiles_openmp("g++")
    assert ok, why


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_banner_and_synchronize():
    device = devices.pick_device()
    x = torch.ones(256, 256, device=device) @ torch.ones(256, 256, device=device)
    devices.synchronize(device)
    assert x[0, 0].item() == 256 and torch.cuda.get_device_name(device) in devices.banner(device)
