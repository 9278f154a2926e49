"""nbhelpers.misclassification: counts equal a hand count, worst examples are the largest losses."""
import pytest
import torch

from nbhelpers import misclassification



def test_confusion_matrix_equals_a_hand_count():
    g = torch.Generator().manual_seed(0)
    targets, predictions = torch.randint(0, 4, (200,), generator=g), torch.randint(0, 4, (200,), generator=g)
    matrix = misclassification.confusion_matrix(predictions, targets, num_classes=4)
    by_hand = torch.zeros(4, 4, dtype=torch.int64)
    for t, p in zip(targets.tolist(), predictions.tolist()):
        by_hand[t, p] += 1
    assert torch.equal(matrix, by_hand)
    ax = misclassification.plot_confusion_matrix(matrix)
    assert (ax.images[0].get_array() == matrix.numpy()).all()                   # the counts drawn
    assert sorted(int(t.get_text()) for t in ax.texts) == sorted(matrix.flatten().tolist())
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("predicted", "true")


@pytest.mark.parametrize("predictions, targets, message", [
    (torch.tensor([0, 5]), torch.tensor([0, 1]), "predictions must lie in \\[0, 3\\], got values from 0 to 5"),
    (torch.tensor([0, 1]), torch.tensor([-1, 1]), "targets must lie in \\[0, 3\\]"),
    (torch.tensor([0, 1, 2]), torch.tensor([0, 1]), "equal shape"),
])
def test_confusion_matrix_rejects_bad_input(predictions, targets, message):
    with pytest.raises(ValueError, match=message):
        misclassification.confusion_matrix(predictions, targets, num_classes=4)


def test_worst_examples_are_the_largest_losses_first():
    losses = torch.tensor([0.1, 3.0, 0.5, 2.0])
    assert misclassification.worst_examples(losses, k=2).tolist() == [1, 3]
    for k in (0, 5):
        with pytest.raises(ValueError, match="k must be in \\[1, 4\\]"):
            misclassification.worst_examples(losses, k)


def test_plot_examples_needs_one_title_per_image():
    fig = misclassification.plot_examples(torch.zeros(3, 28, 28), ["a", "b", "c"], columns=2)
    assert len(fig.axes) == 4 and [ax.get_title() for ax in fig.axes[:3]] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="one title per image"):
        misclassification.plot_examples(torch.zeros(3, 28, 28), ["a"])
