"""nbhelpers.flop_formulas: the ops FlopCounterMode counts 0 are counted as torch counts the same computation
unfused (the oracle: FlopCounterMode on the math path of the same layer)."""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from nbhelpers import module_work, profiling

PADDED = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])     # the second sequence is 3 long


def _unfused(call) -> int:
    """FlopCounterMode alone on the layer's unfused program: grad on (no fast path), attention on the math path."""
    official = FlopCounterMode(display=False)
    with official, sdpa_kernel(SDPBackend.MATH):
        call()
    return official.get_total_flops()


LAYERS = {
    "encoder_layer": (lambda: nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), lambda m, x: m(x)),
    "multihead_attention": (lambda: nn.MultiheadAttention(16, 2, batch_first=True), lambda m, x: m(x, x, x)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_a_fused_inference_path_counts_what_its_unfused_program_counts(name):
    build, call = LAYERS[name]
    model, x = build(), torch.randn(2, 5, 16)
    expected = _unfused(lambda: call(model, x))
    model.eval()
    with torch.no_grad():
        fast = FlopCounterMode(display=False)
        with fast:
            call(model, x)
        assert fast.get_total_flops() == 0                  # torch 2.14.1: no formula for the fused op
        counted, by_module = profiling.work(lambda: call(model, x)), module_work.by_module(lambda: call(model, x))
    assert counted.flops == counted.added_flops == expected > 0
    assert by_module[module_work.TOTAL].flops == by_module[module_work.TOTAL].added_flops == expected


def test_a_padded_batch_the_encoder_packs_is_counted_by_its_real_lengths():
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2).eval()
    x = torch.randn(2, 5, 16)
    per_token = 2 * 16 * 48 + 2 * 16 * 16 + 4 * 16 * 32          # qkv, out projection, feed-forward
    attention = sdpa_flop_count((1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)) + \
        sdpa_flop_count((1, 2, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")                         # nested tensors are a prototype
        counted = profiling.work(lambda: encoder(x, src_key_padding_mask=PADDED))
    assert counted.flops == counted.added_flops == 2 * (8 * per_token + attention)


def test_cpu_attention_is_counted_per_module_without_crashing():
    """The formulas take tensors, as flop_registry's do: by_module once handed them to a formula of shapes and
    raised 'not enough values to unpack (expected 4, got 2)'."""
    q = torch.randn(2, 2, 4, 8, requires_grad=True)
    shape = tuple(q.shape)
    forward = module_work.by_module(lambda: F.scaled_dot_product_attention(q, q, q))[module_work.TOTAL]
    assert forward.flops == forward.added_flops == sdpa_flop_count(shape, shape, shape) > 0
    step = module_work.by_module(lambda: F.scaled_dot_product_attention(q, q, q).sum().backward())
    expected = sdpa_flop_count(shape, shape, shape) + sdpa_backward_flop_count(shape, shape, shape, shape)
    assert step[module_work.TOTAL].flops == expected and step[module_work.TOTAL].forward_flops == forward.flops
    assert module_work.flop_counter(lambda: F.scaled_dot_product_attention(q, q, q))[module_work.TOTAL] == forward.flops
