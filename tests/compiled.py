"""What the tests know of the compiled build (``make test-compiled``).

``make test-compiled`` runs part of the suite against the wheel whose hot path mypyc compiled,
with ``MINIMQ_EXPECT_COMPILED=1``; the conftest then checks, before any test runs, that exactly
the modules of the mypyc hook in ``pyproject.toml`` are compiled. A compiled class checks its
attributes' declared types when they are set, so a test that builds a deliberately ill-typed
object sees a ``TypeError`` there instead of the error the pure code raises later.
"""

from __future__ import annotations

import importlib
import os
import tomllib
from pathlib import Path

import pytest

from common.compiled import compiled_modules

EXPECT_ENV = "MINIMQ_EXPECT_COMPILED"

COMPILED = frozenset(compiled_modules())
"""The modules this run imports compiled (empty in a pure run)."""


def is_compiled(module: str) -> bool:
    """Whether ``module`` (dotted name) runs compiled in this test run."""
    return module in COMPILED


def hook_files(pyproject: Path) -> list[str]:
    """The paths (``remoting/frame.py``...) of the modules the mypyc build hook compiles."""
    doc = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    include: list[str] = doc["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"][
        "include"
    ]
    return include


def hook_modules(pyproject: Path) -> list[str]:
    """The dotted names of the modules the mypyc build hook compiles."""
    return sorted(path.removesuffix(".py").replace("/", ".") for path in hook_files(pyproject))


def installed_source(rel: str) -> Path:
    """The ``.py`` of ``rel`` (``remoting/frame.py``) in the installation this run imports (the
    wheel ships the sources of its compiled modules beside them)."""
    package = importlib.import_module(rel.split("/", 1)[0])
    return Path(next(iter(package.__path__))).parent / rel


def compiled_build_problem(pyproject: Path) -> str | None:
    """Why this run is not the compiled build ``MINIMQ_EXPECT_COMPILED`` asks for (None if it
    is, or if no compiled build was asked for)."""
    if not os.environ.get(EXPECT_ENV):
        return None
    expected, found = hook_modules(pyproject), sorted(COMPILED)
    if expected == found:
        return None
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    return (
        f"{EXPECT_ENV} is set but the compiled modules are not the mypyc hook's: "
        f"missing {missing}, unexpected {extra} (is the compiled wheel first on PYTHONPATH?)"
    )


def pure_only(module: str, patched: str) -> pytest.MarkDecorator:
    """Skip a test under the compiled build when it patches ``patched`` (a method of a class of
    ``module``) on an instance: a compiled class's methods cannot be replaced that way."""
    return pytest.mark.skipif(
        is_compiled(module), reason=f"patches {patched}, which a compiled class does not allow"
    )


def refused_type(pure_message: str) -> str:
    """A ``pytest.raises(TypeError, match=...)`` pattern for an argument of the wrong type:
    the pure build's own message, or the compiled build's check of the declared type, which
    comes first and names no argument (``"str or None object expected; got int"``)."""
    return f"{pure_message}|object expected; got "
