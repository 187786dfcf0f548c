"""Hypothesis strategies for remoting tests."""

from __future__ import annotations

from hypothesis import strategies as st

from remoting.command import INT32_MAX, INT32_MIN, ExtValue, RemotingCommand

int32s = st.integers(INT32_MIN, INT32_MAX)

ext_values: st.SearchStrategy[ExtValue] = st.one_of(
    st.text(max_size=20),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.binary(max_size=20),
    st.none(),
)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    """A valid command with random header fields, remark, ext_fields and body."""
    return RemotingCommand(
        code=draw(int32s),
        opaque=draw(int32s),
        flag=draw(st.integers(0, 3)),
        remark=draw(st.text(max_size=30)),
        ext_fields=draw(st.dictionaries(st.text(max_size=10), ext_values, max_size=6)),
        body=draw(st.binary(max_size=300)),
        language=draw(st.integers(0, 13)),
        version=draw(int32s),
    )
