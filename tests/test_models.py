"""nbhelpers.models: the adapters normalise or refuse with a clear error, and predict restores every mode."""
import pytest
import torch
import torch.nn.functional as F

from nbhelpers import models


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    return models.mlp()


def test_input_adapter_accepts_three_layouts_and_uint8_pixels():
    adapter = models.InputAdapter(flatten=True)
    pixels = torch.randint(0, 256, (5, 28, 28), dtype=torch.uint8)
    expected = pixels.float().div(255).reshape(5, 784)
    for x in (pixels, pixels.unsqueeze(1), pixels.reshape(5, 784), pixels.float() / 255):
        torch.testing.assert_close(adapter(x), expected)
    assert models.InputAdapter(flatten=False)(pixels).shape == (5, 1, 28, 28)
    assert adapter(torch.zeros(0, 28, 28)).shape == (0, 784)


def test_input_adapter_follows_the_model_dtype_and_keeps_anchor_out_of_state_dict(mlp):
    mlp.to(torch.float64)
    assert mlp.input_adapter(torch.rand(2, 784, dtype=torch.float32)).dtype == torch.float64
    assert "input_adapter.anchor" not in mlp.state_dict()
    assert mlp.to("meta").input_adapter(torch.rand(2, 784)).is_meta


@pytest.mark.parametrize("shape, hint", [((32, 3, 28, 28), "convert RGB"), ((28, 28), "unsqueeze(0)"),
                                         ((4, 783), "1x28x28"), ((784,), "unsqueeze(0)")])
def test_input_adapter_rejects_wrong_shapes_saying_expected_and_got(shape, hint):
    with pytest.raises(ValueError) as caught:
        models.InputAdapter()(torch.zeros(shape))
    message = str(caught.value)
    assert "expected a batch of shape (B, 1, 28, 28), (B, 28, 28) or (B, 784)" in message
    assert f"got {shape}" in message and hint in message


@pytest.mark.parametrize("bad, message", [(torch.zeros(2, 784, dtype=torch.int64), "got torch.int64"),
                                          (torch.zeros(2, 784, dtype=torch.bool), "got torch.bool"),
                                          ([[0.0] * 784], "got list")])
def test_input_adapter_rejects_wrong_types(bad, message):
    with pytest.raises(TypeError, match=message):
        models.InputAdapter()(bad)


@pytest.mark.parametrize("kwargs", [{"hidden_dim": 0}, {"output_dim": -1}, {"input_dim": True},
                                    {"hidden_dim": 12.0}, {"dropout": 1.0}, {"dropout": -0.1},
                                    {"dropout": float("nan")}])
def test_core_config_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        models.CoreConfig(**kwargs)


def test_conv_config_rejects_bad_channels():
    with pytest.raises(ValueError, match="2 conv stages"):
        models.ConvConfig(channels=(8,))
    with pytest.raises(ValueError, match="channels must be a positive int"):
        models.ConvConfig(channels=(8, 0))


def test_output_adapter_loss_equals_cross_entropy_and_checks_targets():
    out = models.OutputAdapter(num_classes=10)
    logits, targets = torch.randn(6, 10), torch.randint(0, 10, (6,))
    torch.testing.assert_close(out.loss(logits, targets), F.cross_entropy(logits, targets))
    torch.testing.assert_close(out.loss(logits, targets, reduction="none"),
                               F.cross_entropy(logits, targets, reduction="none"))
    with pytest.raises(ValueError, match="lie in \\[0, 9\\], got values from 0 to 10"):
        out.loss(logits, torch.tensor([0, 1, 2, 3, 4, 10]))
    with pytest.raises(ValueError, match="int64 class indices of shape \\(6,\\), got torch.float32"):
        out.loss(logits, targets.float())
    with pytest.raises(ValueError, match="logits must have shape \\(B, 10\\), got \\(6, 3\\)"):
        out.decode(torch.randn(6, 3))


def test_predict_matches_eval_forward_and_restores_each_modules_mode(mlp):
    x = torch.rand(8, 784)
    mlp.train()
    mlp.core.dropout.eval()
    labels, probabilities = mlp.predict(x), mlp.predict_proba(x)
    assert mlp.training and mlp.core.fc1.training and not mlp.core.dropout.training
    mlp.eval()
    with torch.no_grad():
        logits = mlp(x)
    assert torch.equal(labels, logits.argmax(1)) and labels.is_inference()
    torch.testing.assert_close(probabilities, logits.softmax(1))
    torch.testing.assert_close(probabilities.sum(1), torch.ones(8))


def test_eval_inference_restores_modes_when_the_body_raises(mlp):
    mlp.train()
    with pytest.raises(ValueError, match="InputAdapter"):
        with models.eval_inference(mlp):
            mlp(torch.zeros(2, 3))
    assert mlp.training and all(m.training for m in mlp.modules()) and torch.is_grad_enabled()
    assert not torch.is_inference_mode_enabled()


def test_factories_build_on_the_requested_device_or_the_ambient_one():
    assert all(p.is_meta for p in models.mlp(device="meta").parameters())
    with torch.device("meta"):
        assert all(p.is_meta for p in models.cnn().parameters())
    assert all(p.device.type == "cpu" for p in models.cnn().parameters())


def test_cnn_gives_logits_and_a_gradient_for_every_parameter():
    model = models.cnn(models.ConvConfig(channels=(4, 8), hidden_dim=16))
    loss = model.output_adapter.loss(model(torch.rand(3, 28, 28)), torch.tensor([1, 2, 3]))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
