"""diagnose.run on inputs as people pass them: keywords (`model(**batch)`), a dict batch, None and other values
among the arguments, outputs that are dicts, dataclasses and Hugging Face ModelOutputs, and the loss a model
computes itself from the labels in its batch; and the CLI on a factory that returns (model, batch)."""
import dataclasses
import subprocess
import sys

import pytest
import torch
from torch import nn

from nbhelpers import model_call
from nbhelpers.diagnosis import diagnose
from tests import REPO, cli_in_process


class KeywordOnly(nn.Module):
    """forward takes a keyword-only scale, a mask batched like x, a bias that is not batched, and a None: every
    lens that forgot a keyword, or re-batched the wrong tensor, would raise and land in `unchecked`."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, x, mask=None, *, scale, bias, extra=None):
        assert extra is None and mask.shape[0] == x.shape[0] and bias.shape == (5,)
        return self.fc(x * mask * scale + bias)


class DictOut(nn.Module):
    """Returns a dict with its own loss when labels are given (as Hugging Face models do), else logits first."""

    def __init__(self):
        super().__init__()
        self.body, self.head, self.aux = nn.Linear(6, 8), nn.Linear(8, 4), nn.Linear(8, 1)

    def forward(self, features, labels=None):
        h = self.body(features).relu()
        out = {"logits": self.head(h), "aux": self.aux(h)}
        if labels is not None:
            out = {"loss": nn.functional.cross_entropy(out["logits"], labels), **out}
        return out


class WrongWidth(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)                   # the learner's line a wrong shape fails at


def _node_names(d) -> set[str]:
    return {n.name for n in d.graph.nodes}


def test_every_lens_gets_the_same_positional_and_keyword_arguments():
    torch.manual_seed(0)
    x = torch.randn(2, 5)
    d = diagnose.run(KeywordOnly(), args=(x,), kwargs={"mask": torch.ones(2, 5), "scale": 0.5,
                                                      "bias": torch.zeros(5), "extra": None})
    assert not d.error and d.unchecked == (), (d.error, d.unchecked)
    assert d.inputs == ("[2, 5] float32", "mask: [2, 5] float32", "scale: float (0.5)", "bias: [5] float32",
                        "extra: NoneType (None)")
    assert d.forward is not None and d.compile is not None and all(e.ok for e in d.export)
    assert [a for a in d.agreements if not a.agrees] == []


def test_a_dict_output_gives_its_own_loss_when_the_batch_carries_labels():
    torch.manual_seed(0)
    batch = {"features": torch.randn(4, 6), "labels": torch.tensor([0, 1, 2, 3])}
    d = diagnose.run(DictOut().eval(), batch)              # labels make it a training step even in eval mode
    assert "loss = output.loss" in d.step and not d.error, (d.step, d.error)
    assert "NllLossBackward0" in _node_names(d)
    assert d.inputs == ("features: [4, 6] float32", "labels: [4] int64")


def test_a_dict_output_without_a_loss_is_stepped_on_its_first_floating_output():
    torch.manual_seed(0)
    d = diagnose.run(DictOut(), kwargs={"features": torch.randn(4, 6)}, target=torch.tensor([0, 1, 2, 3]))
    assert d.step.startswith("training step: loss = cross_entropy(output, target)") and not d.error
    modules = {n.module for n in d.graph.nodes}
    assert "DictOut.head" in modules and "DictOut.aux" not in modules      # logits, the first key; aux unused


@dataclasses.dataclass
class _Out:
    loss: torch.Tensor | None
    hidden: torch.Tensor
    logits: torch.Tensor


def test_the_loss_is_made_from_outputs_in_their_order_its_own_loss_left_out():
    a, b = torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)
    loss = (a * 2).sum()
    assert model_call.loss_tensors((torch.ones(2), a, b)) == [a, b]           # no gradient: skipped
    assert model_call.loss_tensors({"loss": loss, "logits": b, "aux": a}) == [b, a]
    assert model_call.loss_tensors(_Out(loss, a, b)) == [a, b]
    assert model_call.own_loss(_Out(loss, a, b)) is loss and model_call.own_loss({"loss": loss}) is loss
    assert model_call.own_loss(_Out(None, a, b)) is None and model_call.own_loss((loss,)) is None
    assert model_call.own_loss({"loss": loss.detach()}) is None               # nothing to step on


def test_a_dict_batch_is_one_argument_when_forward_takes_no_such_keywords():
    class TakesBatch(nn.Module):
        def forward(self, batch):
            return batch["x"] * 2

    call = model_call.of("diagnose.run", TakesBatch(), {"x": torch.ones(2)})
    assert call.args[0].keys() == {"x"} and call.kwargs == {}
    call = model_call.of("diagnose.run", DictOut(), {"features": torch.ones(2, 6)})
    assert call.args == () and set(call.kwargs) == {"features"}


def test_re_batching_changes_the_tensors_of_the_batch_and_nothing_else():
    call = model_call.Call((torch.arange(2),), {"mask": torch.ones(2, 3), "table": torch.ones(5), "n": 3})
    bigger = call.at(5)
    assert bigger.args[0].tolist() == [0, 1, 0, 1, 0] and bigger.kwargs["mask"].shape == (5, 3)
    assert bigger.kwargs["table"] is call.kwargs["table"] and bigger.kwargs["n"] == 3


def test_a_wrong_shape_keeps_the_models_error_and_the_learners_line():
    d = diagnose.run(WrongWidth(), torch.randn(2, 3))
    assert d.error.startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied"), d.error
    assert d.error_where.endswith("return self.fc(x)                   # the learner's line a wrong shape fails at")
    assert "test_diagnose_inputs.py:" in d.error_where
    assert d.findings[0].kind == "error" and d.findings[0].where == d.error_where


def _t5():
    transformers = pytest.importorskip("transformers")
    config = transformers.T5Config(d_model=32, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=16,
                                   vocab_size=50)
    return transformers.T5ForConditionalGeneration(config)


@pytest.mark.slow
def test_an_encoder_decoder_called_with_keywords_steps_on_its_own_loss():
    """About 30 s on 2 cores, most of it the compile lens compiling T5 at four batch sizes."""
    torch.manual_seed(0)
    model = _t5()
    ids, labels = torch.randint(0, 50, (2, 6)), torch.randint(0, 50, (2, 4))
    d = diagnose.run(model, kwargs={"input_ids": ids, "decoder_input_ids": labels, "labels": labels})
    assert "loss = output.loss (the model's own" in d.step and not d.error, (d.step, d.error)
    assert d.inputs == ("input_ids: [2, 6] int64", "decoder_input_ids: [2, 4] int64", "labels: [2, 4] int64")
    assert "NllLossBackward0" in _node_names(d)                 # the loss T5 made from the labels, not a sum
    assert d.unchecked == () and d.forward is not None and d.compile is not None and len(d.export) == 2
    assert {a.name: a.agrees for a in d.agreements}["FLOPs of the whole step"]
    assert {"T5ForConditionalGeneration.encoder", "T5ForConditionalGeneration.decoder"} <= set(d.work)


def test_a_gpt2_given_labels_in_a_dict_batch_steps_on_its_own_loss():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_embd=32, n_layer=1, n_head=2, n_positions=16, vocab_size=50, bos_token_id=0, eos_token_id=0))
    ids = torch.randint(0, 50, (2, 8))
    d = diagnose.run(model, {"input_ids": ids, "labels": ids, "use_cache": False})
    assert "loss = output.loss" in d.step and not d.error and d.unchecked == (), (d.step, d.error, d.unchecked)
    assert "NllLossBackward0" in _node_names(d)
    assert d.inputs[-1] == "use_cache: bool (False)"
    assert d.work["GPT2LMHeadModel.transformer.h.0.attn"].flops > 0     # attention counted, not crashed on


def keyword_factory():
    """For the CLI: a model and a dict batch with labels."""
    torch.manual_seed(0)
    return DictOut(), {"features": torch.randn(4, 6), "labels": torch.tensor([0, 1, 2, 3])}


def text_factory():
    return DictOut(), "a photo of a cat"


def _cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "nbhelpers", "diagnose", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})


def test_the_cli_takes_a_factory_that_returns_the_model_and_its_batch(tmp_path):
    done = _cli(tmp_path, "tests.test_diagnose_inputs:keyword_factory", "--out", "report.html")
    assert done.returncode == 0, done.stderr
    assert "features: [4, 6] float32, labels: [4] int64" in done.stdout and "loss = output.loss" in done.stdout
    assert (tmp_path / "report.html").is_file()


@pytest.mark.parametrize("args, words", [
    (["tests.test_diagnose_inputs:text_factory"], "`example_inputs` must be a tensor"),
    (["tests.test_diagnose_inputs:keyword_factory", "--input", "4x6"], "drop --input"),
    (["nbhelpers.planted_models:Fixed"], "give its inputs' shapes with --input"),
])
def test_the_cli_refuses_a_batch_it_cannot_take_with_what_to_fix(tmp_path, monkeypatch, args, words):
    done = cli_in_process.diagnose(tmp_path, monkeypatch, *args, "--out", "report.html")
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert not (tmp_path / "report.html").exists()
