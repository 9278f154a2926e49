"""The device rule (devices.resolve) across every helper that takes a device: None means the inputs' device,
else torch's default device, and never CUDA because one exists; a device given wins.

CUDA is made to look available, and a dispatch mode records the device of every tensor an op makes, so a
helper that chose CUDA by itself is caught on a machine with a GPU as well as on one without."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from nbhelpers import compilation, memory, mixed_precision, models, profiling, storage, training


class _MadeOn(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.devices = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.devices |= {t.device.type for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}
        return out


@pytest.fixture
def cuda_looks_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for name in ("synchronize", "memory_allocated", "memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, name=name, **k: pytest.fail(f"torch.cuda.{name} was called"))


def _cheap_timing(monkeypatch):
    monkeypatch.setattr(profiling, "median_seconds", lambda fn, min_run_time=0.3: (fn(), 1e-3)[1])


def _tiny_data():
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)


def _fit(device):
    model = models.mlp()
    training.fit(model, _tiny_data(), _tiny_data(), torch.optim.SGD(model.parameters(), lr=0.1), epochs=1,
                 device=device, progress=False)


def _precision(device, monkeypatch):
    # Adam.step asks the accelerator (CUDA, faked here) whether a CUDA graph is being captured: not a device choice
    monkeypatch.setattr(torch.optim.Optimizer, "_accelerator_graph_capture_health_check", lambda self: None)
    mixed_precision.train_with_precision(models.mlp(), None, _tiny_data(), _tiny_data(), 1, device=device)


def _track(device):
    with memory.track(device) as t:
        F.relu(torch.ones(3) * 2)
    assert t.events and all(e.cuda_allocated is None for e in t.events)


def _peaks(device, monkeypatch):
    _cheap_timing(monkeypatch)
    profiling.machine_peaks(device)


HELPERS = {
    "models.mlp": lambda device, mp: models.mlp(device=device),
    "models.cnn": lambda device, mp: models.cnn(device=device),
    "memory.track": lambda device, mp: _track(device),
    "profiling.machine_peaks": lambda device, mp: _peaks(device, mp),
    "training.fit and evaluate": lambda device, mp: _fit(device),
    "mixed_precision.train_with_precision": lambda device, mp: _precision(device, mp),
}


@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_none_never_picks_cuda(helper, cuda_looks_available, monkeypatch):
    with _MadeOn() as made:
        HELPERS[helper](None, monkeypatch)
    assert made.devices == {"cpu"}, made.devices


@pytest.mark.parametrize("helper", ["models.mlp", "models.cnn", "profiling.machine_peaks"])
def test_a_given_device_wins(helper, cuda_looks_available, monkeypatch):
    with _MadeOn() as made:
        HELPERS[helper]("meta", monkeypatch)
    assert made.devices == {"meta"}, made.devices


@pytest.mark.parametrize("helper", ["models.mlp", "models.cnn", "memory.track", "profiling.machine_peaks"])
def test_none_follows_the_callers_default_device(helper, cuda_looks_available, monkeypatch):
    with torch.device("meta"), _MadeOn() as made:
        HELPERS[helper](None, monkeypatch)
    assert made.devices == {"meta"}, made.devices


def test_memory_track_reads_the_cuda_counters_only_when_given_cuda(cuda_looks_available, monkeypatch):
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 7)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 9)
    with memory.track("cuda") as given:
        torch.ones(2) * 2
    with memory.track() as default:
        torch.ones(2) * 2
    assert {(e.cuda_allocated, e.cuda_reserved) for e in given.events} == {(7, 9)}
    assert {(e.cuda_allocated, e.cuda_reserved) for e in default.events} == {(None, None)}


def test_training_follows_the_models_device(cuda_looks_available):
    seen = []
    model = models.mlp()
    model.register_forward_pre_hook(lambda module, args: seen.append(args[0].device.type))
    training.evaluate(model, _tiny_data())
    assert set(seen) == {"cpu"}


def test_record_lifetimes_profiles_cuda_only_when_asked(cuda_looks_available, monkeypatch):
    asked = []
    real = torch.profiler.profile
    monkeypatch.setattr(torch.profiler, "profile", lambda activities, **kw: asked.append(activities) or real(
        activities=[torch.profiler.ProfilerActivity.CPU], **kw))
    with storage.record_lifetimes():
        torch.ones(4)
    assert asked == [[torch.profiler.ProfilerActivity.CPU]]


def test_preflight_checks_the_cpu_unless_told_otherwise():          # even on a machine with a GPU
    assert compilation.preflight().device == "cpu"          # it raised TypeError (torch.device(None)) before
    with torch.device("meta"), pytest.raises(ValueError, match="knows cpu and cuda, got 'meta'"):
        compilation.preflight()                             # the caller's default device is the one checked


def test_compare_backends_synchronizes_with_its_inputs_device(monkeypatch):
    from nbhelpers import devices

    waited = []
    monkeypatch.setattr(devices, "synchronize", waited.append)
    compilation.compare_backends(lambda x: x * 2, (torch.ones(2, device="meta"),), [], min_run_time=0.01)
    compilation.compare_backends(lambda x: x * 2, (torch.ones(2),), [], device="meta", min_run_time=0.01)
    assert waited == [torch.device("meta"), torch.device("meta")]


def test_regime_measures_the_ceilings_on_its_device(monkeypatch):
    asked = []
    monkeypatch.setattr(profiling, "machine_peaks", lambda device=None: asked.append(device) or profiling.Peaks(1e9, 1e9))
    monkeypatch.setattr(profiling, "median_seconds", lambda fn, min_run_time=0.3: (fn(), 1e-3)[1] if min_run_time > 0.1
                        else 1e-6)
    profiling.regime(lambda n: (lambda: torch.ones(n) * 2), (8, 64))
    profiling.regime(lambda n: (lambda: torch.ones(n) * 2), (8, 64), device="meta")
    assert asked == [None, "meta"]


def test_train_with_precision_follows_the_models_device(monkeypatch):
    """device=None means the model's device (the default once was "cpu", which ignored a model elsewhere)."""
    seen = []
    monkeypatch.setattr(training, "fit", lambda net, train, val, opt, epochs, device, progress: seen.append(device))
    monkeypatch.setattr(mixed_precision, "step_peak_bytes", lambda net, opt, x, y: seen.append(x.device) or 0)
    mixed_precision.train_with_precision(models.mlp(device="meta"), None, _tiny_data(), _tiny_data(), 1)
    assert [torch.device(d).type for d in seen] == ["meta", "meta"]
