"""common.deferred: a value handed over later through one callback (pure, no event loop)."""

from __future__ import annotations

import pytest

from common.deferred import Deferred


def test_a_callback_registered_first_runs_when_resolved() -> None:
    got: list[int] = []
    d: Deferred[int] = Deferred()
    d.on_resolved(got.append)
    assert not d.resolved
    assert got == []
    d.resolve(7)
    assert d.resolved
    assert got == [7]


def test_a_callback_registered_after_the_value_runs_at_once() -> None:
    got: list[str] = []
    d: Deferred[str] = Deferred()
    d.resolve("v")
    d.on_resolved(got.append)
    assert got == ["v"]


def test_resolving_twice_and_a_second_callback_are_refused() -> None:
    d: Deferred[int] = Deferred()
    d.on_resolved(lambda _: None)
    with pytest.raises(RuntimeError, match="one callback"):
        d.on_resolved(lambda _: None)
    d.resolve(1)
    with pytest.raises(RuntimeError, match="twice"):
        d.resolve(2)


def test_map_applies_the_function_and_falls_back_instead_of_raising() -> None:
    got: list[object] = []
    d: Deferred[int] = Deferred()
    d.map(lambda v: v * 2, lambda v, exc: -1).on_resolved(got.append)
    d.resolve(21)
    assert got == [42]

    def boom(v: int) -> int:
        raise ValueError(f"bad {v}")

    seen: list[object] = []
    broken: Deferred[int] = Deferred()
    broken.map(boom, lambda v, exc: f"{v}: {exc}").on_resolved(seen.append)
    broken.resolve(3)  # the resolver sees no exception
    assert seen == ["3: bad 3"]
