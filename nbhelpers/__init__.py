"""Helpers that make PyTorch's internals visible in the notebook series "PyTorch from the Inside".

Importing the package does nothing: no seeding, no threads, no downloads. Import the module for the
idea you need, e.g. ``from nbhelpers import devices, data``.
"""
__all__: list[str] = []
__version__ = "0.1.0"
