"""Article §6: the author's experience, against the installed torch."""
from __future__ import annotations

import warnings

import torch
from torch import nn

from claims.probes import NotApplicable, needs, row, verdict

RELEASE_2_1 = "https://github.com/pytorch/pytorch/releases/tag/v2.1.0"


@row("6", "`max-autotune` takes 47 minutes on an A100, `reduce-overhead` 23 s, within 5% of each other",
     where="05 3. Inductor modes", source=RELEASE_2_1, fixed="not checkable")
def autotune_minutes():
    raise NotApplicable("numbers from someone else's GPU")


@row("6", "Compiled `BatchNorm2d(track_running_stats=False)` sets `running_mean` to None and gives NaN gradients",
     where="05 7. \"Silent fallback\"", source='torch/nn/modules/batchnorm.py:86 self.register_buffer("running_mean", None)')
def batchnorm_nan():
    bn = nn.BatchNorm2d(8, track_running_stats=False)
    images = torch.randn(16, 8, 4, 4, generator=torch.Generator().manual_seed(0))
    eager_in, compiled_in = images.clone().requires_grad_(), images.clone().requires_grad_()
    bn(eager_in).square().sum().backward()
    torch._dynamo.reset()
    torch.compile(bn)(compiled_in).square().sum().backward()
    torch._dynamo.reset()
    nan = bool(compiled_in.grad.isnan().any())
    # running_mean is None by design, compiled or not; the bug would be the NaN
    return verdict(nan or not torch.allclose(compiled_in.grad, eager_in.grad, rtol=1e-3, atol=1e-3))


@row("6", "Workaround: force `track_running_stats=True` and reset the statistics after training",
     where="05 7. \"Silent fallback\"", source="torch/nn/modules/batchnorm.py:203 bn_training = (self.running_mean is None)")
def track_and_reset():
    torch.manual_seed(0)
    batch = torch.randn(16, 4, 3, 3) * 3 + 1
    without = nn.BatchNorm2d(4, track_running_stats=False)
    forced = nn.BatchNorm2d(4, track_running_stats=True)
    forced(batch)                                       # "training"
    forced.reset_running_stats()
    without.eval(), forced.eval()
    # in eval, the first normalises with the batch, the second with mean 0 and variance 1: other outputs
    return verdict(torch.allclose(without(batch), forced(batch), atol=1e-4))


@row("6", "`torch.export` is incompatible with `torch.compile`", where="10 5. `torch.export`",
     source="torch/export/__init__.py:59 def export(")
def export_after_compile():
    needs(hasattr(torch, "export") and hasattr(torch.export, "export"), "this torch has no torch.export")
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    torch._dynamo.reset()
    torch.compile(model)(torch.ones(2, 4))              # compiled and used first
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = torch.export.export(model, (torch.ones(2, 4),))
    return verdict(not torch.allclose(exported.module()(torch.ones(2, 4)), model(torch.ones(2, 4))))


@row("6", "Use `torch._export.export` to export before compiling", where="10 5. `torch.export`",
     source="https://github.com/pytorch/pytorch/releases/tag/v2.3.0",
     changed="2.3: torch._export.export removed (https://github.com/pytorch/pytorch/releases/tag/v2.3.0)")
def private_export():
    import torch._export

    return verdict(hasattr(torch._export, "export"))


@row("6", "2.1 has `torch.export`", where="—", source=RELEASE_2_1)
def has_export():
    needs(torch.__version__.startswith("2.1."), "the claim is about 2.1 itself")
    return verdict(hasattr(torch, "export") and hasattr(torch.export, "export"))


@row("6", "`print(torch._dynamo.explain(model))` prints \"Break due to unsupported operation: aten.addmm\"",
     where="05 4. Graph breaks", source="torch/_dynamo/eval_frame.py:1989 return inner")
def explain_prints_addmm():
    model = nn.Linear(4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shown = str(torch._dynamo.explain(model))
    return verdict("aten.addmm" in shown)


@row("6", "`torch._dynamo.explain()` gives the exact location of compilation failures", where="05 4. Graph breaks",
     source="torch/_dynamo/output_graph.py:337 user_stack: list[traceback.FrameSummary]")
def explain_locates():
    def with_print(x):
        y = x * 2
        print("", end="")
        return y + 1
    explained = torch._dynamo.explain(with_print)(torch.ones(2))
    torch._dynamo.reset()
    located = [r for r in explained.break_reasons if r.user_stack and r.user_stack[-1].lineno]
    # it names the file and line of each graph break; a break is not a failure, and errors name their line anyway
    return "partly true" if located else "false"


@row("6", "`explain` is ten times more efficient than reading logs", where="—", source=RELEASE_2_1, fixed="not checkable")
def explain_efficiency():
    raise NotApplicable("an opinion about one's own time")
