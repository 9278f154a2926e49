"""nbhelpers.data: the shipped digits equal their npm source, and damage is caught with a clear error."""
import importlib.util
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from nbhelpers import data

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "digits_sample.json").read_text())
GZ_FILES = sorted(p.name for p in data.DATA_DIR.glob("*.gz"))


def _prepare_module():
    spec = importlib.util.spec_from_file_location("prepare_digits", data.DATA_DIR / "prepare_digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def data_copy(tmp_path):
    """A private copy of data/ (no cache), safe to damage."""
    return shutil.copytree(data.DATA_DIR, tmp_path / "data", ignore=shutil.ignore_patterns("cache"))


def test_sizes_and_types():
    train, test = data.digits(train=True), data.digits(train=False)
    assert (len(train), len(test)) == (8000, 2000)
    assert train.data.shape == (8000, 28, 28) and train.data.dtype == torch.uint8
    assert test.targets.dtype == torch.int64


def test_pixels_equal_the_npm_source_after_uint8_rounding():
    splits = {"train": data.digits(train=True), "test": data.digits(train=False)}
    assert len(FIXTURE["samples"]) == 40
    for s in FIXTURE["samples"]:
        expected = torch.tensor([round(v * 255) for v in s["values"]], dtype=torch.uint8).view(28, 28)
        ds = splits[s["split"]]
        assert torch.equal(ds.data[s["position"]], expected), s["source"] + f"[{s['source_index']}]"
        assert ds.targets[s["position"]].item() == s["label"]


def test_split_is_stratified_and_matches_the_manifest():
    manifest = json.loads((data.DATA_DIR / "digits_manifest.json").read_text())
    for train, name in ((True, "train"), (False, "test")):
        counts = torch.bincount(data.digits(train=train).targets, minlength=10).tolist()
        assert counts == manifest["class_counts"][name]
    totals = [a + b for a, b in zip(*manifest["class_counts"].values())]
    assert all(abs(t - 0.2 * n) < 1 for t, n in zip(manifest["class_counts"]["test"], totals))


@pytest.mark.parametrize("name", GZ_FILES)
def test_one_flipped_byte_raises_the_checksum_error(data_copy, tmp_path, name):
    blob = bytearray((data_copy / name).read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (data_copy / name).write_bytes(bytes(blob))
    with pytest.raises(data.DataIntegrityError, match=rf"{name} is corrupted.*git checkout -- data/"):
        data.digits(train=name.startswith("train"), source=data_copy, root=tmp_path / "cache")


def test_missing_file_is_named_with_the_fix(data_copy, tmp_path):
    (data_copy / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(data.DataIntegrityError, match=r"train-labels-idx1-ubyte.gz is missing.*prepare_digits"):
        data.digits(source=data_copy, root=tmp_path / "cache")


def test_a_damaged_unpacked_file_is_unpacked_again(tmp_path):
    first = data.digits(train=False, root=tmp_path).data.clone()
    raw = tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    raw.write_bytes(raw.read_bytes()[:1000])                   # a half-written file from a crash
    assert torch.equal(data.digits(train=False, root=tmp_path).data, first)
    assert not list(raw.parent.glob(".*.tmp"))                 # no temporary file left behind


def test_train_must_be_a_bool():
    with pytest.raises(TypeError, match="`train` must be True"):
        data.digits(train="yes")


def test_prepare_split_quota_sums_exactly_and_stays_within_one_per_class():
    prepare = _prepare_module()
    counts = dict(enumerate([1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]))
    quota = prepare.test_quota(counts)
    assert sum(quota.values()) == 2000
    assert all(abs(quota[d] - 0.2 * n) < 1 for d, n in counts.items())


def test_prepare_refuses_pixels_that_do_not_round_trip():
    prepare = _prepare_module()
    assert prepare.to_uint8([0.0, 1.0, 0.498]) == bytes([0, 255, 127])
    with pytest.raises(SystemExit, match="round-trip"):
        prepare.to_uint8([0.5])                                 # 127.5 is between two bytes


def test_prepare_writes_idx_headers_torchvision_reads(tmp_path):
    prepare = _prepare_module()
    images = {3: [bytes(range(0, 784 % 256)) + bytes(784 - 784 % 256)]}
    pixels, labels = prepare.idx_bytes(images, [(3, 0)])
    assert pixels[:16] == bytes.fromhex("00000803 00000001 0000001c 0000001c")
    assert labels == bytes.fromhex("00000801 00000001 03")


def test_lazy_digits_equal_torchvision_and_open_nothing_until_indexed():
    for train in (True, False):
        lazy, eager = data.LazyDigits(train=train), data.digits(train=train)
        assert len(lazy) == len(eager) and lazy.opened_in is None
        for i in (0, 1, len(lazy) - 1):
            image, label = lazy[i]
            assert image.shape == (1, 28, 28) and image.dtype == torch.float32
            assert torch.equal(image[0], eager.data[i].float() / 255) and label == int(eager.targets[i])
        assert lazy.opened_in == os.getpid()
    with pytest.raises(IndexError):
        lazy[len(lazy)]


def test_lazy_digits_pickle_without_their_memory_map():
    lazy = data.LazyDigits(train=False)
    lazy[0]
    copy = pickle.loads(pickle.dumps(lazy))
    assert copy.opened_in is None and copy._images is None and len(copy) == 2000
    assert torch.equal(copy[5][0], lazy[5][0])


def test_lazy_digits_check_the_files_like_digits(data_copy, tmp_path):
    (data_copy / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(data.DataIntegrityError, match="t10k-labels-idx1-ubyte.gz is missing"):
        data.LazyDigits(train=True, root=tmp_path / "cache", source=data_copy)
    with pytest.raises(TypeError, match="`train` must be True"):
        data.LazyDigits(train="yes")
