"""The package version (one place; ``pyproject.toml`` repeats it for the build)."""

__all__ = ["__version__"]

__version__ = "0.3.0"
