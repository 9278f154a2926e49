"""FLOPs of the ATen ops torch's FlopCounterMode has no formula for, so counts 0: CPU attention's kernels and the
fused inference paths of nn.MultiheadAttention and nn.TransformerEncoderLayer. Each is counted analytically, as
FlopCounterMode counts the unfused program: its matmuls and its attention, by torch's own `sdpa_flop_count`
(softmax, layer norms, activations and the causal mask are not counted there either).

Each formula takes the op's tensors and `out_val=`, as the entries of `torch.utils.flop_counter.flop_registry` do,
and carries `_get_raw`, so FlopCounterMode's `custom_mapping` hands it tensors too (flop_counter.py wraps any other
custom formula in its `shape_wrapper`).

Example:
    counter = FlopCounterMode(display=False, custom_mapping=flop_formulas.added())
    with counter: model(x)       # a TransformerEncoderLayer's fast path counted, not 0
"""
from __future__ import annotations

import functools

import torch

__all__ = ["added"]


@functools.cache
def added() -> dict:
    """Op packet -> formula for each op this module counts; the ops FlopCounterMode itself counts 0."""
    aten = torch.ops.aten
    return {aten._scaled_dot_product_flash_attention_for_cpu: _raw(_sdpa),
            aten._scaled_dot_product_flash_attention_for_cpu_backward: _raw(_sdpa_backward),
            aten._native_multi_head_attention: _raw(_multi_head_attention),
            aten._transformer_encoder_layer_fwd: _raw(_encoder_layer)}


def _raw(formula):
    formula._get_raw = True
    return formula


def _sdpa(query, key, value, *args, out_val=None, **kwargs) -> int:
    """The CPU kernel takes query, key, value first, as the CUDA kernels torch counts with sdpa_flop_count do."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _sdpa_backward(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


def _multi_head_attention(query, key, value, embed_dim, num_heads, *args, out_val=None, **kwargs) -> int:
    """aten._native_multi_head_attention: the q, k, v and output projections and the attention."""
    return sum(_attention_block(lq, lk, embed_dim, num_heads) for lq, lk in zip(_lengths(query), _lengths(key)))


def _encoder_layer(src, embed_dim, num_heads, *args, out_val=None, **kwargs) -> int:
    """aten._transformer_encoder_layer_fwd: self-attention, then the feed-forward's two linears (its 12th argument
    is the first one's weight, (dim_feedforward, embed_dim))."""
    hidden = args[11].shape[0]
    return sum(_attention_block(n, n, embed_dim, num_heads) + 4 * n * embed_dim * hidden for n in _lengths(src))


def _attention_block(lq: int, lk: int, embed: int, heads: int) -> int:
    """One sequence of multi-head attention: projections of q (lq rows), k and v (lk rows), the output's (lq rows),
    and the attention between them."""
    from torch.utils.flop_counter import sdpa_flop_count

    head = (1, heads, lq, embed // heads), (1, heads, lk, embed // heads)
    return 2 * embed * embed * (2 * lq + 2 * lk) + sdpa_flop_count(head[0], head[1], head[1])


def _lengths(t: torch.Tensor) -> list[int]:
    """Each sequence's length: a nested tensor's (TransformerEncoder packs a padded batch into one), else the
    next-to-last dimension of a (batch, length, embed) or (length, embed) tensor."""
    if t.is_nested:
        return [int(n) for n in t._nested_tensor_size()[:, 0]]
    return [t.shape[-2]] * (t.shape[0] if t.dim() == 3 else 1)
