"""Which of minimq's modules this installation runs compiled.

``make wheel`` builds a wheel whose hot path (the frame codec, the remoting shell, the store's
put and dispatch, the batch-body checks, the broker's send handler and the client's producer
path: the list is the mypyc build hook's ``include`` in ``pyproject.toml``) is compiled to C
extension modules with mypyc; an editable install or a plain ``pip install .`` runs every
module as Python. Both behave the same; the compiled build spends less CPU per request.
Processes report which one they run (``mqbroker``'s boot line, ``mqadmin brokerStatus``,
``mqbench``'s machine line) because a benchmark figure means little without it.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
from collections.abc import Iterable

PACKAGES = ("broker", "client", "common", "namesrv", "remoting", "store")
"""minimq's top-level packages."""

PURE = "pure Python"


def compiled_modules(packages: Iterable[str] = PACKAGES) -> tuple[str, ...]:
    """The dotted names of the modules of ``packages`` that are extension modules beside or
    instead of their ``.py`` (what ``import`` loads first), sorted; empty for a pure install.

    mypyc's shared runtime library (``<hash>__mypyc.*.so``) is not a module of ours and is not
    listed. Nothing is imported but the top-level packages themselves.
    """
    found: list[str] = []
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        for location in spec.submodule_search_locations:
            found.extend(_extension_modules(package, location))
    return tuple(sorted(set(found)))


def _extension_modules(package: str, root: str) -> Iterable[str]:
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
        rel = os.path.relpath(directory, root)
        prefix = package if rel == "." else f"{package}.{rel.replace(os.sep, '.')}"
        for filename in filenames:
            stem = _extension_stem(filename)
            if stem is not None:
                yield f"{prefix}.{stem}"


def _extension_stem(filename: str) -> str | None:
    """``"commitlog"`` for ``commitlog.cpython-311-x86_64-linux-gnu.so``; None otherwise."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            return None if "__mypyc" in stem or "." in stem else stem
    return None


@functools.cache
def installed_compiled_modules() -> tuple[str, ...]:
    """:func:`compiled_modules` of minimq's packages, looked up once per process (an
    installation does not change under a running process)."""
    return compiled_modules()


def build_description(modules: tuple[str, ...] | None = None) -> str:
    """``"pure Python"`` or ``"mypyc: 31 modules compiled"`` for ``modules`` (default: this
    installation's, :func:`installed_compiled_modules`)."""
    names = installed_compiled_modules() if modules is None else modules
    if not names:
        return PURE
    return f"mypyc: {len(names)} module{'s' if len(names) != 1 else ''} compiled"


__all__ = [
    "PACKAGES",
    "PURE",
    "build_description",
    "compiled_modules",
    "installed_compiled_modules",
]
