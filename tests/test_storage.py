"""nbhelpers.storage: describe() agrees with torch, and the lifetime recorder is exact."""

import pytest
import torch

from nbhelpers import storage



def test_describe_matches_torch_for_a_transposed_slice():
    x = torch.arange(12.0).view(3, 4)
    v = x.t()[1:3]
    info = storage.describe(v)
    assert (info.shape, info.stride, info.storage_offset) == ((2, 3), (1, 4), 1)
    assert info.storage_ptr == x.untyped_storage().data_ptr() and info.storage_nbytes == 48
    assert info.is_view and not info.is_contiguous and info.grad_fn is None and info.version == 0


def test_describe_reads_autograd_state():
    leaf = torch.ones(2, requires_grad=True)
    info = storage.describe(leaf * 2)
    assert info.requires_grad and not info.is_leaf and info.grad_fn == "MulBackward0"


@pytest.mark.parametrize("bad", [[1, 2], 3.0, None])
def test_describe_rejects_non_tensors(bad):
    with pytest.raises(TypeError, match="takes a torch.Tensor"):
        storage.describe(bad)


def test_shares_storage():
    x = torch.zeros(4)
    assert storage.shares_storage(x, x[1:]) and storage.shares_storage(x, x.detach())
    assert not storage.shares_storage(x, x.clone())
    assert storage.shares_storage(x[:2], x[2:])                                  # one storage, no common byte
    assert not storage.shares_storage(torch.empty(0), torch.empty(0))            # both data pointers are 0
    assert not storage.shares_storage(torch.empty(2, device="meta"), torch.empty(2, device="meta"))
    with pytest.raises(TypeError, match="b must be a torch.Tensor"):
        storage.shares_storage(x, [0.0])


def test_recorder_sees_exactly_the_allocations_and_frees():
    with storage.record_lifetimes() as rec:
        with rec.step("alloc"):
            a = torch.empty(1000, dtype=torch.uint8)
            b = torch.empty(250, dtype=torch.float32)
        with rec.step("views"):
            views = a.view(10, 100), b[::2], b.detach()
        with rec.step("del a, b"):
            del a, b                                        # the views still hold both storages
        with rec.step("del views"):
            del views
    got = [(e.kind, e.nbytes, e.step) for e in rec.events]
    assert got == [("alloc", 1000, "alloc"), ("alloc", 1000, "alloc"),
                   ("free", 1000, "del views"), ("free", 1000, "del views")]
    assert {rec.events[0].ptr, rec.events[1].ptr} == {rec.events[2].ptr, rec.events[3].ptr}
    assert [e.time_ns for e in rec.events] == sorted(e.time_ns for e in rec.events)


def test_recorder_stops_the_profiler_even_when_the_block_raises():
    with pytest.raises(ZeroDivisionError):
        with storage.record_lifetimes():
            assert torch.autograd.profiler._is_profiler_enabled
            _ = 1 / 0
    assert not torch.autograd.profiler._is_profiler_enabled
    with storage.record_lifetimes() as rec:                    # and a new recording works
        torch.empty(8)
    assert [e.nbytes for e in rec.events] == [32, 32]


def test_plots_return_axes_and_reject_what_they_cannot_draw():
    x = torch.arange(12.0).view(3, 4)
    ax = storage.plot_strides(x.t())
    assert len(ax.patches) == 12 and ax.get_title() == "shape (4, 3), stride (1, 4), offset 0"
    with pytest.raises(ValueError, match="at most 2 dims and 64 elements"):
        storage.plot_strides(torch.zeros(10, 10))
    with storage.record_lifetimes() as rec:
        with rec.step("one"):
            y = torch.empty(100)
        del y
    assert storage.plot_lifetimes(rec.events).get_ylabel() == "net bytes allocated"
    with pytest.raises(ValueError, match="no cuda allocations"):
        storage.plot_lifetimes(rec.events, only="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_recorder_sees_cuda_allocations():
    with storage.record_lifetimes("cuda") as rec:
        z = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        del z
    cuda = [(e.kind, e.nbytes) for e in rec.events if e.device.startswith("cuda")]
    assert cuda == [("alloc", 1 << 20), ("free", 1 << 20)]


def test_the_two_recorders_agree_on_what_both_can_see():
    """Every storage memory.track counts in a step is an allocation the profiler's allocator events show,
    of the same size; the allocator also shows allocations made inside ops, which no dispatch mode sees."""
    import collections

    import torch.nn.functional as F

    from nbhelpers import memory, models

    torch.manual_seed(0)
    model, x, y = models.mlp(), torch.rand(16, 784), torch.randint(0, 10, (16,))

    def step():
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    step()                                                     # the same state for both recordings
    with memory.track() as tracked:
        step()
    with storage.record_lifetimes() as recorded:
        step()
    dispatched = collections.Counter(a.nbytes for a in tracked.allocations)
    allocated = collections.Counter(e.nbytes for e in recorded.events if e.kind == "alloc" and e.device.startswith("cpu"))
    assert dispatched and not dispatched - allocated              # a sub-multiset: the same sizes, and more
    assert sum(allocated.values()) >= sum(dispatched.values())
