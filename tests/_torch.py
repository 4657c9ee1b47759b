"""PyTorch as a test oracle: skipped where it is not installed, required where CI says so.

Use ``torch = require_torch()`` inside a test (or at module level when every test needs it).
With the environment variable ``HIDDENSTATE_REQUIRE_TORCH`` set (CI sets it to 1), a missing
torch is an ImportError, so parity tests cannot silently turn into skips.
"""
import os

import pytest


def torch_required() -> bool:
    """Whether the environment forbids skipping torch tests."""
    return os.environ.get("HIDDENSTATE_REQUIRE_TORCH", "") not in ("", "0")


def require_torch():
    """Return the ``torch`` module, skipping the calling test if it is missing (unless required)."""
    if torch_required():
        import torch

        return torch
    return pytest.importorskip("torch")
