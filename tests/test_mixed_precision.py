"""nbhelpers.mixed_precision: the dtype table agrees with direct calls, underflow is exact, training runs compare."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from nbhelpers import mixed_precision, models



def test_table_agrees_with_direct_autocast_calls():
    rows = mixed_precision.autocast_dtype_table("cpu", torch.bfloat16)
    assert [r.op for r in rows] == list(mixed_precision.OPS)
    x = torch.randn(3, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        direct = {"linear": F.linear(x, torch.randn(2, 5)).dtype, "relu": F.relu(x).dtype,
                  "cross_entropy": F.cross_entropy(x.bfloat16(), torch.tensor([0, 1, 2])).dtype}
    by_op = {r.op: r for r in rows}
    assert by_op["linear"].from_fp32 == direct["linear"] == torch.bfloat16
    assert by_op["relu"].from_fp32 == direct["relu"] == torch.float32
    assert by_op["cross_entropy"].from_low == direct["cross_entropy"] == torch.float32
    assert (by_op["linear"].policy, by_op["relu"].policy, by_op["cross_entropy"].policy) == (
        "cast down to bf16", "follows its input", "fp32 either way")
    assert mixed_precision.render_dtype_table(rows).splitlines()[1].split() == ["matmul", "bf16", "bf16", "cast",
                                                                          "down", "to", "bf16"]


def test_table_rejects_a_device_without_autocast():
    with pytest.raises(ValueError, match="not available for device type 'meta'"):
        mixed_precision.autocast_dtype_table("meta", torch.bfloat16)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_float16_gradients_vanish_unscaled_and_survive_scaled(seed):
    result = mixed_precision.gradient_underflow("cpu", torch.float16, seed=seed)
    zeros = mixed_precision.Underflow.zero_fraction
    assert zeros(result.reference) == 0 and zeros(result.unscaled) == 1.0 and zeros(result.scaled) == 0
    assert result.relative_error(result.unscaled) == 1.0 and result.relative_error(result.scaled) < 0.01


def test_bfloat16_keeps_small_gradients_without_a_scaler():
    result = mixed_precision.gradient_underflow("cpu", torch.bfloat16)
    assert mixed_precision.Underflow.zero_fraction(result.unscaled) == 0
    assert result.relative_error(result.unscaled) < 0.02


def test_train_with_precision_returns_comparable_runs():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 256, (256, 28, 28), dtype=torch.uint8, generator=g), torch.randint(0, 10, (256,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=64)
    runs = []
    for dtype in (None, torch.bfloat16):
        torch.manual_seed(0)
        runs.append(mixed_precision.train_with_precision(models.mlp(), dtype, loader, loader, epochs=1))
    assert [r.label for r in runs] == ["fp32", "autocast bf16"]
    assert all(r.seconds > 0 and r.step_peak_bytes > 0 and len(r.history.epochs) == 1 for r in runs)
    ax = mixed_precision.plot_runs(runs)
    assert [line.get_label() for line in ax.get_lines()] == ["fp32", "autocast bf16"]
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[100 * r.history.epochs[0].val_accuracy] for r in runs]


def test_autocast_wrapper_returns_float32_logits_and_keeps_parameters():
    model = models.mlp()
    wrapped = mixed_precision.Autocast(model, "cpu", torch.bfloat16)
    assert wrapped(torch.rand(2, 784)).dtype == torch.float32
    assert list(wrapped.parameters()) == list(model.parameters())
