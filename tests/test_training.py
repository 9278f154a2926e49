"""nbhelpers.training: fit learns, evaluate agrees with a hand computation, bad input is refused clearly."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from nbhelpers import training



def _separable(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def _loaders():
    train = DataLoader(_separable(), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
    return train, DataLoader(_separable(seed=1), batch_size=64)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 2))


def test_fit_learns_a_separable_problem_and_returns_a_history(capsys):
    model = _model()
    train, val = _loaders()
    history = training.fit(model, train, val, torch.optim.Adam(model.parameters(), lr=0.05), epochs=5,
                           progress=False)
    assert [e.number for e in history.epochs] == [1, 2, 3, 4, 5]
    assert history.final_accuracy >= 0.95 and history.epochs[-1].train_loss < history.epochs[0].train_loss
    assert history.seconds == pytest.approx(sum(e.seconds for e in history.epochs))
    assert capsys.readouterr() == ("", "")          # progress=False: silent
    ax = training.plot_history(history)
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[e.train_loss for e in history.epochs],
                                                                  [e.val_loss for e in history.epochs]]
    assert ax.get_xlabel() == "epoch" and [t.get_text() for t in ax.get_legend().get_texts()][-1] == "validation accuracy"


@pytest.mark.parametrize("epochs", [0, -1, True, 1.5, "3"])
def test_fit_rejects_non_positive_or_non_int_epochs(epochs):
    model = _model()
    train, val = _loaders()
    # a number out of range is a ValueError; a bool, a float or a string is a TypeError
    with pytest.raises((TypeError, ValueError), match="`epochs` must be an integer above zero; got"):
        training.fit(model, train, val, torch.optim.SGD(model.parameters(), lr=0.1), epochs, progress=False)


@pytest.mark.parametrize("which", ["train_loader", "val_loader"])
def test_fit_rejects_empty_loaders_before_training(which):
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    train, val = _loaders()
    empty = DataLoader(TensorDataset(torch.zeros(0, 2), torch.zeros(0, dtype=torch.long)), batch_size=4)
    loaders = {"train_loader": empty, "val_loader": val} if which == "train_loader" else \
        {"train_loader": train, "val_loader": empty}
    with pytest.raises(ValueError, match=f"`{which}` yields no batches.*give it data or lower batch_size"):
        training.fit(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epochs=1, progress=False,
                     **loaders)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # nothing was trained


def test_drop_last_with_too_few_samples_counts_as_empty():
    loader = DataLoader(_separable(n=10), batch_size=32, drop_last=True)
    with pytest.raises(ValueError, match="`loader` yields no batches"):
        training.evaluate(_model(), loader)


class _Nothing(IterableDataset):
    def __iter__(self):
        return iter(())


def test_empty_iterable_datasets_are_caught_too():
    model = _model()
    with pytest.raises(ValueError, match="loader yielded no batches"):
        training.evaluate(model, DataLoader(_Nothing(), batch_size=4))
    with pytest.raises(ValueError, match="train_loader yielded no batches"):
        training.fit(model, DataLoader(_Nothing(), batch_size=4), _loaders()[1],
                     torch.optim.SGD(model.parameters(), lr=0.1), epochs=1, progress=False)


def test_evaluate_equals_a_hand_computation_and_restores_modes():
    model = _model().train()
    model[2].eval()                               # a frozen submodule must stay frozen
    _, val = _loaders()
    result = training.evaluate(model, val)
    x, y = val.dataset.tensors
    model.eval()
    with torch.no_grad():
        logits = model(x)
    torch.testing.assert_close(result.losses, F.cross_entropy(logits, y, reduction="none"))
    assert torch.equal(result.predictions, logits.argmax(1)) and torch.equal(result.targets, y)
    assert result.accuracy == (logits.argmax(1) == y).sum().item() / len(y)
    model.train()
    model[2].eval()
    training.evaluate(model, val)
    assert model.training and model[0].training and not model[2].training


def test_in_a_kernel_fit_shows_one_line_and_leaves_nothing_stored(monkeypatch):
    """The line names the epoch, the batch and the last epoch's losses; make execute keeps only the cell's result."""
    from pathlib import Path

    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook

    from nbhelpers._tools import notebook_tools

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    heard = []

    class Listening(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            heard.append(msg)
            return super().process_message(msg, cell, cell_index)

    nb = new_notebook(cells=[new_code_cell(
        "import torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "from nbhelpers import training\nx = torch.randn(64, 2)\n"
        "loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16)\nmodel = nn.Linear(2, 2)\n"
        "len(training.fit(model, loader, loader, torch.optim.SGD(model.parameters(), lr=0.1), 2).epochs)")])
    Listening(nb, timeout=120, kernel_name="python3").execute()
    texts = [m["content"]["data"].get("text/plain", "") for m in heard if m["msg_type"] == "update_display_data"]
    assert texts[0] == "fit (0 s)" and texts[1] == "fit: epoch 1/2, batch 1/4 (0 s)"
    assert any(t.startswith("fit: epoch 2/2, batch 1/4; epoch 1: loss ") and ", val_acc " in t for t in texts)
    assert texts[-1] == ""                                          # emptied when fit returns
    notebook_tools.sanitize_outputs(nb)
    assert [o.get("data", {}).get("text/plain") for o in nb.cells[0].outputs] == ["2"]   # nothing of the line
