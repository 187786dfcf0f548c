"""Reading docker-compose.yml the way ``docker compose`` does, for tests without a Docker engine.

Only what our compose file uses: ``${VAR}`` / ``${VAR:-default}`` interpolation (and ``$$``),
YAML merge keys, ``"host:container"`` port strings, ``source:target[:ro]`` volumes.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.processes import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"
VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
"""The interpolation forms we support; any other ``$`` use is an error in :func:`interpolate`."""


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """``value`` with ``${VAR}`` / ``${VAR:-default}`` replaced from ``env`` and ``$$`` -> ``$``."""

    def sub(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        name, default = match[1], match[2]
        got = env.get(name)
        if got:  # ":-" also applies to an empty value
            return got
        if default is None:
            raise KeyError(f"${{{name}}} has no value and no default")
        return default

    rest = VARIABLE.sub("", value)
    if "$" in rest:
        raise ValueError(f"unsupported interpolation in {value!r}")
    return VARIABLE.sub(sub, value)


def _walk(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_walk(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _walk(value, env) for key, value in node.items()}
    return node


def load_compose(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The compose document, interpolated with ``env`` (default: no variables set)."""
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(raw, dict)
    doc: dict[str, Any] = _walk(raw, env or {})
    return doc


@dataclass(frozen=True)
class Port:
    """One ``ports:`` entry."""

    host: int
    container: int


def ports(service: Mapping[str, Any]) -> list[Port]:
    """The service's published ports (``"host:container"`` strings only)."""
    out = []
    for entry in service.get("ports", []):
        host, _, container = str(entry).partition(":")
        out.append(Port(int(host), int(container)))
    return out


def bind_mounts(service: Mapping[str, Any]) -> dict[str, Path]:
    """Container path -> repo path of the service's bind mounts (sources starting with ``.``)."""
    out = {}
    for entry in service.get("volumes", []):
        source, target, *_ = str(entry).split(":")
        if source.startswith("."):
            out[target] = (COMPOSE_FILE.parent / source).resolve()
    return out


def named_volumes(service: Mapping[str, Any]) -> dict[str, str]:
    """Volume name -> container path of the service's named volumes."""
    out = {}
    for entry in service.get("volumes", []):
        source, target, *_ = str(entry).split(":")
        if not source.startswith((".", "/")):
            out[source] = target
    return out


def host_command(service: Mapping[str, Any]) -> list[str]:
    """The service's command with container paths of bind-mounted files replaced by repo paths."""
    command = service["command"]
    assert isinstance(command, list), "commands are exec-form lists"
    mounts = bind_mounts(service)
    return [str(mounts.get(arg, arg)) for arg in command]


def console_scripts() -> dict[str, str]:
    """``[project.scripts]`` of pyproject.toml."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    scripts: dict[str, str] = project["scripts"]
    return scripts


def parse_printed_config(text: str) -> dict[str, str]:
    """``key=value`` lines as printed by ``-p``."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out
