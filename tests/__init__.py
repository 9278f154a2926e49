"""The test suite. `REPO` is the repository root, for every test that reads a file of the project."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
