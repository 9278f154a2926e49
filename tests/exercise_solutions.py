"""Reference solutions to the notebooks' exercises, and one tempting wrong answer for each.

Teachers: these are the answers. Learners: try first, `exercises.check` tells you what is wrong.
tests/test_exercises.py runs every solution (it must PASS) and every wrong answer (it must FAIL, for the
reason given next to it), so each exercise is provably solvable and the checker provably not a stamp.
"""
from __future__ import annotations

import os
import pickle
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.checkpoint import checkpoint


# 00 · environment -----------------------------------------------------------------------------

def to_device(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def to_device_top_level_only(obj, device):
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in obj.items()}


def own_generator(seed):
    return torch.Generator().manual_seed(seed)


def own_generator_global(seed):
    return torch.manual_seed(seed)     # returns torch.default_generator, after reseeding it


# 01 · tensor lifecycle ------------------------------------------------------------------------

def shares_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def shares_storage_by_first_element(a, b):
    return a.data_ptr() == b.data_ptr()


def element_offset(t, index):
    return t.storage_offset() + sum(i * s for i, s in zip(index, t.stride()))


def element_offset_ignoring_view_start(t, index):
    return sum(i * s for i, s in zip(index, t.stride()))


# 02 · autograd graph --------------------------------------------------------------------------

def count_nodes(t):
    seen, stack = set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return len(seen)


def count_nodes_without_seen_set(t):
    count, stack = 0, [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is not None:
            count += 1
            stack.extend(nxt for nxt, _ in fn.next_functions)
    return count


def grad_without_accumulating(loss_fn, w):
    (grad,) = torch.autograd.grad(loss_fn(w), w)
    return grad


def grad_with_backward(loss_fn, w):
    loss_fn(w).backward()
    return w.grad


# 03 · sandwich model --------------------------------------------------------------------------

def count_trainable(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_trainable_all_names(model):
    return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad)


class Normalize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x):
        return (x - self.mean) / self.std


class NormalizePlainAttributes(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean, self.std = mean, std

    def forward(self, x):
        return (x - self.mean) / self.std


def init_kaiming_(layer):
    nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    nn.init.zeros_(layer.bias)


def init_xavier_(layer):
    nn.init.xavier_normal_(layer.weight)
    nn.init.zeros_(layer.bias)


# 04 · data pipeline ---------------------------------------------------------------------------

def pad_collate(batch):
    seqs, labels = zip(*batch)
    return (nn.utils.rnn.pad_sequence(seqs, batch_first=True), torch.tensor([len(s) for s in seqs]),
            torch.tensor(labels))


def default_collate(batch):
    return torch.utils.data.default_collate(batch)


def batches_per_epoch(n, batch_size, drop_last):
    return n // batch_size if drop_last else -(-n // batch_size)


def batches_per_epoch_floor(n, batch_size, drop_last):
    return n // batch_size


# 05 · torch.compile ---------------------------------------------------------------------------

def double_if_positive(x):
    return torch.where(x.sum() > 0, x * 2, x - 1)


def double_if_positive_item(x):
    if x.sum().item() > 0:
        return x * 2
    return x - 1


ONE_GRAPH_OPTIONS = {"dynamic": True}
DEFAULT_OPTIONS: dict = {}


# 06 · mixed precision -------------------------------------------------------------------------

AUTOCAST_DTYPES = {
    "x @ w.T": torch.bfloat16,                    # matmul is on the lower-precision list
    "torch.relu(x)": torch.float32,               # not on a list: runs in its input's dtype
    "torch.relu(x @ w.T)": torch.bfloat16,        # ...which here is bfloat16
    "(x @ w.T) + x[:, :4]": torch.float32,        # add promotes bfloat16 + float32 to float32
    "F.softmax(x @ w.T, dim=1)": torch.bfloat16,  # on CPU softmax is not on the float32 list
    "F.layer_norm(x, (16,))": torch.float32,      # layer_norm is on CPU's float32 list
    "F.cross_entropy(x @ w.T, target)": torch.float32,
}
AUTOCAST_ALL_BFLOAT16 = dict.fromkeys(AUTOCAST_DTYPES, torch.bfloat16)


def scaled_step(model, loss_fn, x, y, optimizer, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    for g in grads:
        g.div_(scale)
    if not all(torch.isfinite(g).all() for g in grads):
        optimizer.zero_grad()
        return False
    optimizer.step()
    return True


def scaled_step_without_unscaling(model, loss_fn, x, y, optimizer, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    if not all(torch.isfinite(p.grad).all() for p in model.parameters()):
        return False
    optimizer.step()
    return True


# 07 · DDP -------------------------------------------------------------------------------------

def shard(n, rank, world_size):
    total = -(-n // world_size) * world_size
    padded = [i % n for i in range(total)]
    return padded[rank::world_size]


def shard_contiguous(n, rank, world_size):
    per_rank = -(-n // world_size)
    return list(range(rank * per_rank, min(n, (rank + 1) * per_rank)))


def accumulate(model, loss_fn, x, y, micro_batches):
    for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        (loss_fn(model(xs), ys) / micro_batches).backward()


def accumulate_unscaled(model, loss_fn, x, y, micro_batches):
    for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss_fn(model(xs), ys).backward()


# 08 · memory ----------------------------------------------------------------------------------

def record_loss(history, loss):
    history.append(loss.item())


def record_loss_tensor(history, loss):
    history.append(loss)


def forward_checkpointed(blocks, x):
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x


def forward_plain(blocks, x):
    for block in blocks:
        x = block(x)
    return x


# 09 · profiling -------------------------------------------------------------------------------

def labelled_step(model, x):
    with record_function("forward"):
        loss = model(x).pow(2).mean()
    with record_function("backward"):
        loss.backward()


def step_labelled_as_one(model, x):
    with record_function("forward"):
        model(x).pow(2).mean().backward()


def profile_window(train_step, steps):
    window = schedule(wait=1, warmup=1, active=2, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=window) as prof:
        for _ in range(steps):
            train_step()
            prof.step()
    return prof


def profile_everything(train_step, steps):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            train_step()
    return prof


# 10 · save and export -------------------------------------------------------------------------

def save_atomic(obj, path):
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def save_in_place(obj, path):
    torch.save(obj, path)


def clean_state_dict(state):
    prefix = "_orig_mod."
    return {k.removeprefix(prefix): v for k, v in state.items()}


def state_dict_unchanged(state):
    return state


DYNAMIC_BATCH = {"x": {0: Dim("batch")}}
STATIC_SHAPES = None


# 11 · custom ops ------------------------------------------------------------------------------

def fake_row_diff(x):
    return x.new_empty(x.shape[0] - 1, x.shape[1])


def fake_row_diff_same_shape(x):
    return torch.empty_like(x)


def backward_cube(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * 3 * x ** 2


def backward_cube_missing_square(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * 3 * x


# 12 · error casebook --------------------------------------------------------------------------

EXCEPTIONS = {
    "backward twice": RuntimeError,
    "view of a transpose": RuntimeError,
    "index 5 of a 3-element tensor": IndexError,
    "float64 input to a float32 layer": RuntimeError,
    "prefetch_factor without workers": ValueError,
    "weights_only load of a class": pickle.UnpicklingError,
}
EXCEPTIONS_ALL_RUNTIME = dict.fromkeys(EXCEPTIONS, RuntimeError)


def sigmoid_then_double(x):
    return (torch.sigmoid(x) * 2).sum()


def sigmoid_then_double_in_place(x):
    y = torch.sigmoid(x)
    y.mul_(2)
    return y.sum()


# 13 · diagnose your own model ----------------------------------------------------------------

def scale_rows(y):
    return y * torch.arange(1, y.shape[0] + 1, dtype=y.dtype, device=y.device)[:, None]


def scale_rows_by_loop(y):
    return torch.stack([y[i] * (i + 1) for i in range(y.shape[0])])


def scale_rows_from_a_list(y):
    return y * torch.tensor([i + 1 for i in range(y.shape[0])], dtype=y.dtype)[:, None]


def scale_rows_from_zero(y):
    return y * torch.arange(y.shape[0], dtype=y.dtype)[:, None]


def pair_logits(h, weight, bias):
    k, d = weight.shape[0], h.shape[1]
    u = torch.nn.functional.linear(h, weight.view(k * d, d)).view(-1, k, d)    # a view of the weight: no copy
    return (u * h[:, None, :]).sum(-1) + bias


def pair_logits_by_outer_product(h, weight, bias):
    return torch.nn.functional.linear((h[:, :, None] * h[:, None, :]).flatten(1), weight, bias)


def pair_logits_by_einsum(h, weight, bias):
    k, d = weight.shape[0], h.shape[1]
    return torch.einsum("bi,kij,bj->bk", h, weight.view(k, d, d), h) + bias      # saves a copy of the weight


def pair_logits_without_bias(h, weight, bias):
    k, d = weight.shape[0], h.shape[1]
    return (torch.nn.functional.linear(h, weight.view(k * d, d)).view(-1, k, d) * h[:, None, :]).sum(-1)


# id -> (reference solution, wrong answer, a phrase the wrong answer's FAIL line must contain)

# Small mutants of the references, and answers the first judges let through (issue 19) -----------


def labelled_step_wrong_loss(model, x):
    with record_function("forward"):
        loss = model(x).sum()
    with record_function("backward"):
        loss.backward()


def labelled_step_nested(model, x):
    with record_function("forward"):
        loss = model(x).pow(2).mean()
        with record_function("backward"):
            loss.backward()


def profile_window_no_wait(train_step, steps):
    window = schedule(wait=0, warmup=1, active=2, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=window) as prof:
        for _ in range(steps):
            train_step()
            prof.step()
    return prof


def profile_window_step_first(train_step, steps):
    window = schedule(wait=1, warmup=1, active=2, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=window) as prof:
        for _ in range(steps):
            prof.step()
            train_step()
    return prof


def save_atomic_temp_elsewhere(obj, path):
    fd, temp = tempfile.mkstemp(suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def save_atomic_first_only(obj, path):
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        if not os.path.exists(path):
            os.replace(temp, path)
        else:
            os.unlink(temp)
    except BaseException:
        os.unlink(temp)
        raise


def save_atomic_via_write_atomic(obj, path):
    import io
    from nbhelpers.atomic import write_atomic
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_atomic(path, buffer.getvalue())


def clean_state_dict_lstrip(state):
    prefix = "_orig_mod."
    return {k.lstrip(prefix): v for k, v in state.items()}


def clean_state_dict_params_only(state):
    prefix = "_orig_mod."
    return {k.removeprefix(prefix): v for k, v in state.items() if k.endswith(("weight", "bias"))}


DYNAMIC_BATCH_MAX_16 = {"x": {0: Dim("batch", max=16)}}


def fake_row_diff_default_dtype(x):
    return torch.empty(x.shape[0] - 1, x.shape[1])


def fake_row_diff_hardcoded(x):
    return x.new_empty(4, 3)


def backward_cube_ignoring_grad(ctx, grad):
    (x,) = ctx.saved_tensors
    return 3 * x ** 2


EXCEPTIONS_AS_STRINGS = {
    "backward twice": "RuntimeError",
    "view of a transpose": "RuntimeError",
    "index 5 of a 3-element tensor": "IndexError",
    "float64 input to a float32 layer": "RuntimeError",
    "prefetch_factor without workers": "ValueError",
    "weights_only load of a class": "UnpicklingError",
}


def sigmoid_then_double_via_data(x):
    y = torch.sigmoid(x)
    y.data.mul_(2)
    return y.sum()



# Further wrong answers for 00-08: small mutants, answers the first judges let through, rule-breakers --


def to_device_tuples_become_lists(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device_tuples_become_lists(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_device_tuples_become_lists(v, device) for v in obj]
    return obj


def to_device_casts_to_float(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device, torch.float32)
    if isinstance(obj, dict):
        return {k: to_device_casts_to_float(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device_casts_to_float(v, device) for v in obj)
    return obj


def to_device_in_place(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        for k in obj:
            obj[k] = to_device_in_place(obj[k], device)
        return obj
    if isinstance(obj, list):
        obj[:] = [to_device_in_place(v, device) for v in obj]
        return obj
    if isinstance(obj, tuple):
        return tuple(to_device_in_place(v, device) for v in obj)
    return obj


def own_generator_unseeded(seed):
    return torch.Generator()


def own_generator_seed_plus_one(seed):
    return torch.Generator().manual_seed(seed + 1)


def shares_storage_by_storage_size(a, b):
    return a.untyped_storage().nbytes() == b.untyped_storage().nbytes()


def shares_storage_by_element_range(a, b):
    return a.data_ptr() <= b.data_ptr() < a.data_ptr() + a.numel() * a.element_size()


def element_offset_sizes_for_strides(t, index):
    return t.storage_offset() + sum(i * s for i, s in zip(index, t.shape))


def element_offset_by_indexing(t, index):
    return t[index].storage_offset()


def count_nodes_seen_by_name(t):
    seen, stack = set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn.name() in seen:
            continue
        seen.add(fn.name())
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return len(seen)


def grad_without_accumulating_tuple(loss_fn, w):
    return torch.autograd.grad(loss_fn(w), w)


def grad_hardcoded_cube(loss_fn, w):
    return 3 * w.detach() ** 2


def count_trainable_ignoring_requires_grad(model):
    return sum(p.numel() for p in model.parameters())


class NormalizeStdNotPersistent(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std, persistent=False)

    def forward(self, x):
        return (x - self.mean) / self.std


class NormalizeDecoyBuffers(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.m, self.s = mean, std
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())

    def forward(self, x):
        return (x - self.m) / self.s


def init_kaiming_fan_out_(layer):
    nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
    nn.init.zeros_(layer.bias)


def init_kaiming_new_bias_(layer):
    nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    layer.bias = nn.Parameter(torch.zeros_like(layer.bias))


def init_kaiming_data_swap_(layer):
    fan_in = layer.weight.shape[1]
    layer.weight.data = torch.randn_like(layer.weight) * (2 / fan_in) ** 0.5
    layer.bias.data = torch.zeros_like(layer.bias)


def pad_collate_time_first(batch):
    seqs, labels = zip(*batch)
    return (nn.utils.rnn.pad_sequence(seqs), torch.tensor([len(s) for s in seqs]),
            torch.tensor(labels))


def pad_collate_lengths_by_nonzero(batch):
    seqs, labels = zip(*batch)
    padded = nn.utils.rnn.pad_sequence(seqs, batch_first=True)
    return padded, (padded != 0).sum(1), torch.tensor(labels)


def pad_collate_long(batch):
    seqs, labels = zip(*batch)
    return (nn.utils.rnn.pad_sequence(seqs, batch_first=True).long(), torch.tensor([len(s) for s in seqs]),
            torch.tensor(labels))


def batches_per_epoch_ceil_off_by_one(n, batch_size, drop_last):
    return n // batch_size if drop_last else (n + batch_size) // batch_size


def batches_per_epoch_by_dataloader(n, batch_size, drop_last):
    return len(torch.utils.data.DataLoader(range(n), batch_size=batch_size, drop_last=drop_last))


def double_if_positive_plus_one(x):
    return torch.where(x.sum() > 0, x * 2, x + 1)


def double_if_positive_elementwise(x):
    return torch.where(x > 0, x * 2, x - 1)


def double_if_positive_at_zero(x):
    return torch.where(x.sum() >= 0, x * 2, x - 1)


ONE_GRAPH_OPTIONS_STATIC = {"dynamic": False}


AUTOCAST_DTYPES_ADD_NOT_PROMOTED = dict(AUTOCAST_DTYPES, **{"(x @ w.T) + x[:, :4]": torch.bfloat16})


def scaled_step_inf_only(model, loss_fn, x, y, optimizer, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    for g in grads:
        g.div_(scale)
    if any(torch.isinf(g).any() for g in grads):
        optimizer.zero_grad()
        return False
    optimizer.step()
    return True


def scaled_step_keeps_grads(model, loss_fn, x, y, optimizer, scale):
    optimizer.zero_grad()
    (loss_fn(model(x), y) * scale).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    for g in grads:
        g.div_(scale)
    if not all(torch.isfinite(g).all() for g in grads):
        return False
    optimizer.step()
    return True


def scaled_step_grad_scaler(model, loss_fn, x, y, optimizer, scale):
    optimizer.zero_grad()
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    scaler.scale(loss_fn(model(x), y)).backward()
    scaler.unscale_(optimizer)
    finite = all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    scaler.step(optimizer)
    if not finite:
        optimizer.zero_grad()
    return bool(finite)


def shard_floor(n, rank, world_size):
    total = n // world_size * world_size
    padded = [i % n for i in range(total)]
    return padded[rank::world_size]


def shard_unpadded(n, rank, world_size):
    return list(range(n))[rank::world_size]


def accumulate_split(model, loss_fn, x, y, micro_batches):
    for xs, ys in zip(x.split(micro_batches), y.split(micro_batches)):
        (loss_fn(model(xs), ys) / micro_batches).backward()


def accumulate_one_backward(model, loss_fn, x, y, micro_batches):
    loss_fn(model(x), y).backward()


def accumulate_ignores_loss_fn(model, loss_fn, x, y, micro_batches):
    for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        (F.cross_entropy(model(xs), ys) / micro_batches).backward()


def record_loss_half(history, loss):
    history.append(loss.detach().half())


def record_loss_prepend(history, loss):
    history.insert(0, loss.item())


def record_loss_replace(history, loss):
    history[:] = [loss.item()]


class _FloatKeepingGraph(float):
    pass


def record_loss_float_carrying_graph(history, loss):
    entry = _FloatKeepingGraph(loss.item())
    entry.graph = loss
    history.append(entry)


def record_loss_in_tuple(history, loss):
    history.append((loss.item(),))


def forward_checkpointed_first_only(blocks, x):
    x = checkpoint(blocks[0], x, use_reentrant=False)
    for block in blocks[1:]:
        x = block(x)
    return x


def forward_checkpointed_detached_input(blocks, x):
    x = x.detach().requires_grad_()
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x


def forward_plain_hidden_from_hooks(blocks, x):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        for block in blocks:
            x = block(x)
    return x



def grad_with_backward_put_back(loss_fn, w):
    saved = None if w.grad is None else w.grad.clone()
    w.grad = None
    loss_fn(w).backward()
    grad = w.grad
    w.grad = saved
    return grad


def double_if_positive_print(x):
    print("x.sum() =", x.sum())
    return torch.where(x.sum() > 0, x * 2, x - 1)



def largest_saver(loss):
    best, most, seen, stack = None, -1, set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        kept = 0
        for attr in dir(node):
            if attr.startswith("_saved_"):
                value = getattr(node, attr)
                for t in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(t, torch.Tensor):
                        kept += t.numel() * t.element_size()
        if kept > most:
            best, most = node.name(), kept
        stack.extend(next_node for next_node, _ in node.next_functions)
    return best


def largest_saver_by_count(loss):
    best, most, seen, stack = None, -1, set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        kept = sum(attr.startswith("_saved_") for attr in dir(node))
        if kept > most:
            best, most = node.name(), kept
        stack.extend(next_node for next_node, _ in node.next_functions)
    return best


def largest_saver_root_only(loss):
    return loss.grad_fn.name()


def remove_gb0124(x):
    print("scaling")
    return x * x.mean()


def remove_gb0124_by_dropping_the_print(x):
    return x * x.mean().item()


def remove_gb0124_with_float(x):
    print("scaling")
    return x * float(x.mean())


def remove_gb0124_sum(x):
    print("scaling")
    return x * x.sum()


CASES = {
    "00.1": (to_device, to_device_top_level_only, "is on cpu, expected the meta device"),
    "00.2": (own_generator, own_generator_global, "the global RNG changed"),
    "01.1": (shares_storage, shares_storage_by_first_element, "shares_storage(x, x[1:]) returned False"),
    "01.2": (element_offset, element_offset_ignoring_view_start, "element_offset(base[1:, ::2]"),
    "02.1": (count_nodes, count_nodes_without_seen_set, "its graph has 6 distinct nodes"),
    "02.2": (grad_without_accumulating, grad_with_backward, "w.grad changed"),
    "02.3": (largest_saver, largest_saver_by_count, "the node that keeps the most"),
    "03.1": (count_trainable, count_trainable_all_names, "a frozen LayerNorm; an optimizer would train 50"),
    "03.2": (Normalize, NormalizePlainAttributes, "state_dict() has 0 entries"),
    "03.3": (init_kaiming_, init_xavier_, "Kaiming for fan_in 2048 and ReLU gives 0.0312"),
    "04.1": (pad_collate, default_collate, "stack expects each tensor to be equal size"),
    "04.2": (batches_per_epoch, batches_per_epoch_floor, "batches_per_epoch(2, 3, drop_last=False) returned 0"),
    "05.1": (double_if_positive, double_if_positive_item,
             "Dynamo breaks the graph at `if x.sum().item() > 0:`: Unsupported Tensor.item() call"),
    "05.2": (ONE_GRAPH_OPTIONS, DEFAULT_OPTIONS, "compiled 2 graphs for sizes 8, 16, 32"),
    "05.3": (remove_gb0124, remove_gb0124_by_dropping_the_print, "no longer prints 'scaling'"),
    "06.1": (AUTOCAST_DTYPES, AUTOCAST_ALL_BFLOAT16, "4 of 7 wrong, the first: torch.relu(x)"),
    "06.2": (scaled_step, scaled_step_without_unscaling, "were the gradients unscaled?"),
    "07.1": (shard, shard_contiguous, "shard(10, rank=0, world_size=3) gave [0, 1, 2, 3]"),
    "07.2": (accumulate, accumulate_unscaled, "micro-batches the gradients differ from one batch of"),
    "08.1": (record_loss, record_loss_tensor, "still has a grad_fn"),
    "08.2": (forward_checkpointed, forward_plain, "expected at most half"),
    "09.1": (labelled_step, step_labelled_as_one, "0 ranges named 'backward'"),
    "09.2": (profile_window, profile_everything, "the profile recorded calls [1, 2, 3,"),
    "10.1": (save_atomic, save_in_place, "while the save was under way the old checkpoint was unreadable"),
    "10.2": (clean_state_dict, state_dict_unchanged, "unexpected keys ['_orig_mod."),
    "10.3": (DYNAMIC_BATCH, STATIC_SHAPES, "refused batch 3"),
    "11.1": (fake_row_diff, fake_row_diff_same_shape,
             "opcheck's test_faketensor failed: Shapes torch.Size([4, 3]) and torch.Size([5, 3])"),
    "11.2": (backward_cube, backward_cube_missing_square, "differs from finite differences"),
    "12.1": (EXCEPTIONS, EXCEPTIONS_ALL_RUNTIME, "'index 5 of a 3-element tensor': you said RuntimeError"),
    "12.2": (sigmoid_then_double, sigmoid_then_double_in_place, "modified by an inplace operation"),
    "13.1": (scale_rows, scale_rows_by_loop, "diagnose still finds [recompile]"),
    "13.2": (pair_logits, pair_logits_by_outer_product, "diagnose still finds [saved-for-backward]"),
}


# More wrong answers, each with the phrase its FAIL line must contain: with the blank and the tempting one
# in CASES, every exercise is proven to reject at least three.
MORE_WRONG = {
    "02.3": [(largest_saver_root_only, "the node that keeps the most")],
    "05.3": [(remove_gb0124_sum, "the result differs from the original's"),
             (remove_gb0124_with_float, "compile_lens still finds GB0124")],
    "00.1": [(to_device_tuples_become_lists, "batch['pair'] became a list, expected a tuple"),
             (to_device_casts_to_float, 'move it, do not convert it'),
             (to_device_in_place, 'changed the batch it was given')],
    "00.2": [(own_generator_unseeded, 'seeds 123 and 124 drew the same numbers'),
             (own_generator_seed_plus_one, 'seed it with the seed given')],
    "01.1": [(shares_storage_by_storage_size, 'shares_storage(x, x.clone()) returned True'),
             (shares_storage_by_element_range, 'shares_storage(x[1:], x) returned False')],
    "01.2": [(element_offset_sizes_for_strides, 'element_offset(base, (2, 1, 3)) returned 25'),
             (element_offset_by_indexing, 'your answer runs tensor ops (aten.select.int')],
    "02.1": [(count_nodes_seen_by_name, "count_nodes gave 6 for a small MLP's loss")],
    "02.2": [(grad_without_accumulating_tuple, 'your function returned tuple'),
             (grad_hardcoded_cube, 'the gradient of (v.sin() * v).sum()')],
    "03.1": [(count_trainable_ignoring_requires_grad, 'count_trainable gave 58')],
    "03.2": [(NormalizeStdNotPersistent, 'state_dict() has 1 entries'),
             (NormalizeDecoyBuffers, 'the forward must use the saved buffers')],
    "03.3": [(init_kaiming_fan_out_, "the weight's std is 0.0625"),
             (init_kaiming_new_bias_, 'initialise the existing parameters in place'),
             (init_kaiming_data_swap_, "a parameter's storage was replaced")],
    "04.1": [(pad_collate_time_first, 'padded should be torch.float32 (3, 6)'),
             (pad_collate_lengths_by_nonzero, 'lengths should be torch.int64 (3,) [0, 6, 0]'),
             (pad_collate_long, 'padded should be torch.float32')],
    "04.2": [(batches_per_epoch_ceil_off_by_one, 'batches_per_epoch(0, 3, drop_last=False) returned 1'),
             (batches_per_epoch_by_dataloader, 'compute the count from n and batch_size alone')],
    "05.1": [(double_if_positive_plus_one, 'for x = [-4.0, -3.0, -2.0, -1.0]'),
             (double_if_positive_elementwise, 'for x = [-1.0, 1.0]'),
             (double_if_positive_at_zero, 'for x = [0.0, 0.0, 0.0]')],
    "05.2": [(ONE_GRAPH_OPTIONS_STATIC, 'compiled 8 graphs')],
    "06.1": [(AUTOCAST_DTYPES_ADD_NOT_PROMOTED, '1 of 7 wrong, the first: (x @ w.T) + x[:, :4]')],
    "06.2": [(scaled_step_inf_only, 'with an overflowing scale your function returned True'),
             (scaled_step_keeps_grads, 'the gradients were left in .grad'),
             (scaled_step_grad_scaler, 'your answer made a GradScaler')],
    "07.1": [(shard_floor, 'gave [0, 3, 6], expected [0, 3, 6, 9]'),
             (shard_unpadded, 'gave [1, 4, 7], expected [1, 4, 7, 0]')],
    "07.2": [(accumulate_split, 'with 1 micro-batches the gradients differ'),
             (accumulate_one_backward, 'call backward once per micro-batch'),
             (accumulate_ignores_loss_fn, '(mse_loss)')],
    "08.1": [(record_loss_half, 'append the value, at the end'),
             (record_loss_prepend, 'the last entry is 0.25'),
             (record_loss_replace, 'history has 1 entries after 1 calls'),
             (record_loss_float_carrying_graph, 'your entry holds on to the graph'),
             (record_loss_in_tuple, 'the entry is a tuple, which is not a number')],
    "08.2": [(forward_checkpointed_first_only, 'expected at most half'),
             (forward_checkpointed_detached_input, 'the gradient reaching x differs'),
             (forward_plain_hidden_from_hooks, 'the forward kept 1440 bytes for backward against 1440')],
    "09.1": [(labelled_step_wrong_loss, "the gradients differ from those of model(x).pow(2).mean()"),
             (labelled_step_nested, "the 'forward' range also holds backward nodes")],
    "09.2": [(profile_window_no_wait, "recorded calls [2, 3], expected [3, 4]"),
             (profile_window_step_first, "recorded calls [2, 3], expected [3, 4]")],
    "10.1": [(save_atomic_temp_elsewhere, "no temporary file was beside the checkpoint"),
             (save_atomic_first_only, "did not replace the old checkpoint with the new one"),
             (save_atomic_via_write_atomic, "used nbhelpers' own atomic write")],
    "10.2": [(clean_state_dict_lstrip, "found unexpected keys ['weight'"),
             (clean_state_dict_params_only, "and missing keys ['")],
    "10.3": [(DYNAMIC_BATCH_MAX_16, "refused batch 17")],
    "11.1": [(fake_row_diff_default_dtype, "Dtypes torch.float64 and torch.float32"),
             (fake_row_diff_hardcoded, "Shapes torch.Size([6, 2]) and torch.Size([4, 3])")],
    "11.2": [(backward_cube_ignoring_grad, "differs from finite differences")],
    "12.1": [(EXCEPTIONS_AS_STRINGS, "give the exception class itself")],
    "12.2": [(sigmoid_then_double_via_data, "the gradient differs from 2 * sigmoid(x)")],
    "13.1": [(scale_rows_from_a_list, "diagnose still finds [recompile]"), (scale_rows_from_zero, "row i is not")],
    "13.2": [(pair_logits_by_einsum, "diagnose still finds [saved-for-backward]"),
             (pair_logits_without_bias, "the logits differ")],
}


# Answers that give correct values but break the rule their task states, and the phrase naming the rule:
# each rule is checked with an instrument (a dispatch mode, a spy, a hook, memory.track, explain).
RULE_BREAKERS = {
    "00.1": (to_device_in_place, "changed the batch it was given"),
    "01.2": (element_offset_by_indexing, "runs tensor ops"),
    "02.2": (grad_with_backward_put_back, "w.grad changed"),
    "03.2": (NormalizeDecoyBuffers, "the forward must use the saved buffers"),
    "03.3": (init_kaiming_data_swap_, "storage was replaced"),
    "04.2": (batches_per_epoch_by_dataloader, "compute the count from n and batch_size alone"),
    "05.1": (double_if_positive_print, "Dynamo breaks the graph"),
    "06.2": (scaled_step_grad_scaler, "made a GradScaler"),
    "07.2": (accumulate_one_backward, "call backward once per micro-batch"),
    "08.1": (record_loss_float_carrying_graph, "holds on to the graph"),
    "08.2": (forward_plain_hidden_from_hooks, "expected at most half"),
    "10.1": (save_atomic_via_write_atomic, "own atomic write"),
}
