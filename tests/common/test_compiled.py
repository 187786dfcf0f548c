"""common.compiled: which modules an installation runs compiled, and the build hook's list."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import tomllib
from pathlib import Path

import pytest

from common.compiled import PURE, build_description, compiled_modules
from tests.compiled import COMPILED, EXPECT_ENV, hook_files, hook_modules, installed_source

REPO = Path(__file__).resolve().parents[2]
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _fake_package(root: Path, name: str, files: list[str]) -> None:
    for rel in files:
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")


def test_lists_extension_modules_of_a_package_and_its_subpackages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_package(
        tmp_path,
        "fakepkg",
        [
            "__init__.py",
            "pure.py",
            "fast.py",
            f"fast{SUFFIX}",
            "sub/__init__.py",
            f"sub/deep{SUFFIX}",
            "sub/plain.so.txt",
            f"__pycache__/cached{SUFFIX}",
        ],
    )
    (tmp_path / f"0123abcd__mypyc{SUFFIX}").write_bytes(b"")  # mypyc's runtime library
    monkeypatch.syspath_prepend(str(tmp_path))
    found = compiled_modules(["fakepkg", "no_such_package_here"])
    assert found == ("fakepkg.fast", "fakepkg.sub.deep")
    assert build_description(found) == "mypyc: 2 modules compiled"
    assert build_description(("fakepkg.fast",)) == "mypyc: 1 module compiled"
    assert build_description(()) == PURE


def test_a_pure_package_has_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_package(tmp_path, "purepkg", ["__init__.py", "a.py", "b/__init__.py", "b/c.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    assert compiled_modules(["purepkg"]) == ()


def test_every_module_the_hook_compiles_exists() -> None:
    modules = hook_modules(REPO / "pyproject.toml")
    assert len(modules) >= 20
    assert [m for m in modules if importlib.util.find_spec(m) is None] == []


def test_this_run_is_the_build_it_says() -> None:
    """A pure run compiles nothing; a compiled run (``make test-compiled``) compiles exactly the
    hook's modules (the conftest stops the run otherwise; this says so once more)."""
    if os.environ.get(EXPECT_ENV):
        assert sorted(COMPILED) == hook_modules(REPO / "pyproject.toml")
        assert build_description().startswith("mypyc: ")
    else:
        assert frozenset() == COMPILED
        assert build_description() == PURE


def test_no_compiled_module_raises_from() -> None:
    """mypyc compiles ``raise X from Y`` as ``raise X``: the cause is lost in the compiled build
    only. The hook's modules chain with ``common.errors.caused_by`` instead."""
    offending = [
        f"{rel}:{node.lineno}"
        for rel in hook_files(REPO / "pyproject.toml")
        for node in ast.walk(ast.parse(installed_source(rel).read_text(), rel))
        if isinstance(node, ast.Raise) and node.cause is not None
    ]
    assert offending == []


def test_ruff_lets_exactly_the_compiled_modules_chain_without_from() -> None:
    """Ruff's B904 (``raise`` in ``except`` without ``from``) is off for exactly the hook's
    modules, which must chain with ``caused_by``; everywhere else ``from`` stays required."""
    doc = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    ignores = doc["tool"]["ruff"]["lint"]["per-file-ignores"]
    assert sorted(path for path, rules in ignores.items() if "B904" in rules) == sorted(
        hook_files(REPO / "pyproject.toml")
    )
