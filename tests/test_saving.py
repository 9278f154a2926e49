"""nbhelpers.saving: a crash keeps the old file, damage is an error, compiled and plain models agree."""
import os

import pytest
import torch

from nbhelpers import models, saving


def _trained(seed=0):
    torch.manual_seed(seed)
    model = models.mlp()
    optimizer = torch.optim.Adam(model.parameters())
    model.output_adapter.loss(model(torch.rand(8, 784)), torch.arange(8)).backward()
    optimizer.step()
    return model, optimizer


def test_round_trip_restores_weights_optimizer_epoch_config_and_rng(tmp_path):
    model, optimizer = _trained()
    rng = torch.get_rng_state()
    saving.save(tmp_path / "c.pt", model, optimizer, epoch=3, config={"lr": 1e-3})
    fresh, fresh_opt = _trained(seed=1)
    state = saving.load(tmp_path / "c.pt", fresh, fresh_opt)
    assert (state.epoch, state.config) == (3, {"lr": 1e-3}) and torch.equal(state.rng_state, rng)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    assert fresh_opt.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]


def test_a_crash_between_write_and_rename_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model, optimizer = _trained()
    saving.save(tmp_path / "c.pt", model, optimizer, epoch=1)

    def crash(src, dst):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        saving.save(tmp_path / "c.pt", model, optimizer, epoch=2)
    monkeypatch.undo()
    assert saving.load(tmp_path / "c.pt", models.mlp()).epoch == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]      # no temporary left behind


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_truncated_or_bit_flipped_files_are_refused(tmp_path, damage):
    model, _ = _trained()
    path = saving.save(tmp_path / "c.pt", model)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[-100] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(saving.CheckpointError, match="truncated or corrupted"):
        saving.load(path, models.mlp())


def test_foreign_missing_and_optimizerless_files_get_clear_errors(tmp_path):
    model, optimizer = _trained()
    torch.save(model.state_dict(), tmp_path / "plain.pt")
    with pytest.raises(saving.CheckpointError, match="not written by saving.save.*weights_only=True"):
        saving.load(tmp_path / "plain.pt", model)
    with pytest.raises(saving.CheckpointError, match="does not exist"):
        saving.load(tmp_path / "none.pt", model)
    saving.save(tmp_path / "w.pt", model)
    with pytest.raises(saving.CheckpointError, match="no optimizer state"):
        saving.load(tmp_path / "w.pt", model, optimizer)


def test_a_compiled_model_saves_plain_keys_and_loads_either_way(tmp_path):
    model, _ = _trained()
    compiled = torch.compile(model, backend="eager")
    assert next(iter(compiled.state_dict())).startswith("_orig_mod.")
    saving.save(tmp_path / "c.pt", compiled)
    plain = models.mlp()
    saving.load(tmp_path / "c.pt", plain)
    saving.load(tmp_path / "c.pt", torch.compile(models.mlp(), backend="eager"))
    assert list(plain.state_dict()) == list(model.state_dict())
    assert saving.strip_compile_prefix({"_orig_mod.a": 1, "b": 2}) == {"a": 1, "b": 2}
