"""docker-compose.yml checked without a Docker engine: structure, commands, ports and addresses,
and the same services run as local processes forming a working cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from tests.deploy.compose import (
    COMPOSE_FILE,
    VARIABLE,
    console_scripts,
    host_command,
    interpolate,
    load_compose,
    named_volumes,
    parse_printed_config,
    ports,
)
from tests.processes import REPO, console_script

BROKERS = ("broker-a", "broker-b")
NAMESRV_PORT = 9876


def services() -> dict[str, Any]:
    found: dict[str, Any] = load_compose()["services"]
    return found


def print_config(service: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, str]:
    """Run the service's command with ``-p`` (its environment included) and parse the output."""
    command = host_command(service)
    full_env = {**os.environ, **service.get("environment", {}), **(env or {})}
    done = subprocess.run(
        [console_script(command[0]), *command[1:], "-p"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=full_env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return parse_printed_config(done.stdout)


def test_services_volumes_and_interpolations() -> None:
    doc = load_compose()
    assert set(doc["services"]) == {"namesrv", *BROKERS}
    declared = set(doc["volumes"])
    used = {name for s in doc["services"].values() for name in named_volumes(s)}
    assert used == declared
    # one image for every service, built from this repo's Dockerfile
    assert {s["image"] for s in doc["services"].values()} == {"minimq:0.1.0"}
    assert {s["build"] for s in doc["services"].values()} == {"."}
    # every ${...} is a form our interpolation (and compose) understands
    text = COMPOSE_FILE.read_text()
    assert "BROKER_IP" in {m[1] for m in VARIABLE.finditer(text)}
    assert interpolate(text, {}) != text


def test_interpolate() -> None:
    env = {"A": "x", "E": ""}
    assert interpolate("${A:-d}/${B:-d}/${E:-d}/$${A}", env) == "x/d/d/${A}"
    with pytest.raises(KeyError):
        interpolate("${B}", env)
    with pytest.raises(ValueError, match="unsupported"):
        interpolate("$A", env)


@pytest.mark.parametrize("name", ["namesrv", *BROKERS])
def test_command_is_a_console_script_with_valid_options(name: str) -> None:
    service = services()[name]
    command = host_command(service)
    assert command[0] in console_scripts()
    for path in (arg for arg in command if arg.startswith(str(REPO))):
        assert Path(path).is_file(), f"{name}: bind-mounted file {path} is missing"
    config = print_config(service)
    published = ports(service)
    assert {p.host for p in published} == {p.container for p in published}, "host == container"
    if name == "namesrv":
        assert int(config["listenPort"]) == NAMESRV_PORT
        assert [p.container for p in published] == [NAMESRV_PORT]
        return
    # the advertised address is brokerIP1:listenPort and listenPort is published as itself
    assert config["brokerName"] == name
    listen, metrics = int(config["listenPort"]), int(config["metricsPort"])
    assert {p.container for p in published} == {listen, metrics}
    assert config["brokerIP1"] == "127.0.0.1"  # the BROKER_IP default: clients on the host
    assert config["namesrvAddr"] == f"namesrv:{NAMESRV_PORT}"
    assert config["storePathRootDir"] in named_volumes(service).values()


def test_broker_ip_comes_from_the_environment() -> None:
    doc = load_compose({"BROKER_IP": "192.168.1.20"})
    for name in BROKERS:
        config = print_config(doc["services"][name])
        assert config["brokerIP1"] == "192.168.1.20"


def test_host_ports_are_distinct() -> None:
    published = [p.host for s in services().values() for p in ports(s)]
    assert len(published) == len(set(published))


def test_healthchecks_and_start_order() -> None:
    found = services()
    namesrv_check = found["namesrv"]["healthcheck"]["test"]
    assert namesrv_check[:2] == ["CMD", "python"]
    assert f"('127.0.0.1', {NAMESRV_PORT})" in namesrv_check[-1]
    for name in BROKERS:
        service = found[name]
        assert service["depends_on"] == {"namesrv": {"condition": "service_healthy"}}
        kind, shell = service["healthcheck"]["test"]
        assert kind == "CMD-SHELL"
        namesrv = service["environment"]["NAMESRV_ADDR"]
        assert shell == f"mqadmin clusterList -n {namesrv} --json | grep -q '\"{name}\"'"


def test_namesrv_healthcheck_fails_without_a_server() -> None:
    """The name server's healthcheck command fails with nothing listening (a real check)."""
    check = services()["namesrv"]["healthcheck"]["test"]
    code = check[-1].replace("9876", "1")  # port 1: nothing listens there
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=30, check=False
    )
    assert done.returncode != 0


def test_dockerfile_ships_what_the_build_needs() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "\nFROM python:3.11-slim\n" in dockerfile
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    needed = set(pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])
    needed |= {"pyproject.toml", pyproject["project"]["readme"]}
    assert not needed & ignored
    # what the compose file mounts exists at the paths the image expects
    assert "/home/minimq/store" in dockerfile


def test_readme_lists_every_broker_key() -> None:
    """The README's configuration reference names every key ``mqbroker -p`` prints."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    missing = [k for k in BrokerConfig.property_keys() if f"`{k}`" not in readme]
    assert missing == []
