"""The installed minimq's version, one string for every place that reports it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def minimq_version() -> str:
    """``pyproject.toml``'s version of the installed distribution (``"unknown"`` when run from
    a tree that is not installed)."""
    try:
        return version("minimq")
    except PackageNotFoundError:
        return "unknown"


__all__ = ["minimq_version"]
