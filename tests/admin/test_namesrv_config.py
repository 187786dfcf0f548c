"""mqadmin getNamesrvConfig, updateNamesrvConfig, updateKvConfig and deleteKvConfig against
in-process name servers (real sockets on 127.0.0.1, the KV file under tmp_path)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from client.admin.admin_client import AdminClient
from common.properties import load_properties
from namesrv.config import NamesrvConfig
from namesrv.route_info import RouteInfoManager
from namesrv.server import NameServer, expire_loop, trio_now_ms
from tests.admin.harness import as_json, fails, ok
from tests.processes import NAMESRV_BOOT, run_cli, start_process, stop_process

LIMIT = 30.0


def kv_path(tmp_path: Path, index: int = 0) -> Path:
    """Where name server ``index`` keeps its KV config."""
    return tmp_path / f"namesrv{index}" / "kvConfig.json"


def store_path(tmp_path: Path, index: int = 0) -> Path:
    """Where name server ``index`` saves its config updates (its ``configStorePath``)."""
    return tmp_path / f"namesrv{index}" / "namesrv.properties"


@asynccontextmanager
async def name_servers(
    tmp_path: Path, count: int = 1, *, config_store: Path | None = None
) -> AsyncIterator[list[NameServer]]:
    """``count`` name servers, each with its own kvConfigPath and configStorePath under
    ``tmp_path`` (or ``config_store`` as every one's configStorePath)."""
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            servers = []
            for index in range(count):
                config = NamesrvConfig(
                    listen_port=0,
                    bind_address="127.0.0.1",
                    kv_config_path=str(kv_path(tmp_path, index)),
                    config_store_path=str(config_store or store_path(tmp_path, index)),
                )
                server = NameServer(config)
                await nursery.start(server.run)
                servers.append(server)
            yield servers
            nursery.cancel_scope.cancel()


def addrs(servers: list[NameServer]) -> str:
    """The ``-n`` value naming ``servers``."""
    return ";".join(f"127.0.0.1:{s.port}" for s in servers)


async def kv_value(servers: list[NameServer], namespace: str, key: str) -> list[str | None]:
    """GET_KV_CONFIG of ``namespace``/``key`` on each of ``servers``."""
    async with AdminClient(addrs(servers)) as admin:
        return [await admin.get_kv_config(f"127.0.0.1:{s.port}", namespace, key) for s in servers]


async def test_kv_config_put_and_delete_survive_a_restart(tmp_path: Path) -> None:
    async with name_servers(tmp_path, 2) as servers:
        out = await ok("updateKvConfig", "-n", addrs(servers), "-s", "ns1", "-k", "k1", "-v", "v 1")
        assert out == "create or update kv config to namespace success.\n"
        await ok("updateKvConfig", "-n", addrs(servers), "-s", "ns1", "-k", "k2", "-v", "v2")
        assert await kv_value(servers, "ns1", "k1") == ["v 1", "v 1"]
    async with name_servers(tmp_path, 2) as servers:  # the same files, read at start
        assert await kv_value(servers, "ns1", "k1") == ["v 1", "v 1"]
        done = await as_json("deleteKvConfig", "-n", addrs(servers), "-s", "ns1", "-k", "k1")
        assert done["namesrvAddrs"] == addrs(servers).split(";")
        assert await kv_value(servers, "ns1", "k1") == [None, None]
    async with name_servers(tmp_path, 2) as servers:
        assert await kv_value(servers, "ns1", "k1") == [None, None]
        assert await kv_value(servers, "ns1", "k2") == ["v2", "v2"]


async def test_delete_of_an_absent_key_succeeds(tmp_path: Path) -> None:
    async with name_servers(tmp_path) as servers:
        out = await ok("deleteKvConfig", "-n", addrs(servers), "-s", "none", "-k", "none")
        assert out == "delete kv config from namespace success.\n"
        assert not kv_path(tmp_path).exists()  # nothing changed, nothing written


async def test_get_namesrv_config_shows_each_name_servers_config(tmp_path: Path) -> None:
    async with name_servers(tmp_path, 2) as servers:
        configs = await as_json("getNamesrvConfig", "-n", addrs(servers))
        assert list(configs) == addrs(servers).split(";")
        for index, config in enumerate(configs.values()):
            assert config["kvConfigPath"] == str(kv_path(tmp_path, index))
            assert config["scanNotActiveBrokerInterval"] == "5000"
        text = await ok("getNamesrvConfig", "-n", addrs(servers))
        assert f"============127.0.0.1:{servers[0].port}============\n" in text
        assert f"{'brokerChannelExpiredTime':<50}=  120000\n" in text


async def test_update_of_a_runtime_key_takes_effect_on_every_name_server(tmp_path: Path) -> None:
    async with name_servers(tmp_path, 2) as servers:
        n = addrs(servers)
        out = await ok(
            "updateNamesrvConfig", "-n", n, "-k", "brokerChannelExpiredTime", "-v", "7000"
        )
        assert out == f"update name server config success![{n.replace(';', ', ')}]\n" + (
            "brokerChannelExpiredTime : 7000\n"
        )
        await ok("updateNamesrvConfig", "-n", n, "-k", "scanNotActiveBrokerInterval", "-v", "250")
        for server in servers:
            assert server.route_info.broker_channel_expired_time_ms == 7000
            assert server.config.scan_not_active_broker_interval_ms == 250
        configs = await as_json("getNamesrvConfig", "-n", n)
        assert {c["brokerChannelExpiredTime"] for c in configs.values()} == {"7000"}
        assert {c["scanNotActiveBrokerInterval"] for c in configs.values()} == {"250"}
    for index in range(2):  # each saved it to its configStorePath
        saved = load_properties(store_path(tmp_path, index))
        assert saved["brokerChannelExpiredTime"] == "7000"
        assert saved["scanNotActiveBrokerInterval"] == "250"


async def test_refused_keys_and_values_change_nothing(tmp_path: Path) -> None:
    async with name_servers(tmp_path) as servers:
        n = addrs(servers)
        err = await fails("updateNamesrvConfig", "-n", n, "-k", "kvConfigPath", "-v", "/tmp/x")
        assert "CODE: 16" in err
        assert "black list: kvConfigPath" in err
        err = await fails("updateNamesrvConfig", "-n", n, "-k", "listenPort", "-v", "1")
        assert "CODE: 29" in err
        assert "'listenPort' is read only at start" in err
        err = await fails("updateNamesrvConfig", "-n", n, "-k", "noSuchKey", "-v", "1")
        assert "'noSuchKey' is unknown" in err
        err = await fails(
            "updateNamesrvConfig", "-n", n, "-k", "scanNotActiveBrokerInterval", "-v", "0"
        )
        assert "scanNotActiveBrokerInterval must be > 0 ms, got 0" in err
        err = await fails("updateNamesrvConfig", "-n", n, "-k", "clusterTest", "-v", "maybe")
        assert "clusterTest" in err
        config = (await as_json("getNamesrvConfig", "-n", n))[n]
        assert config["kvConfigPath"] == str(kv_path(tmp_path))
        assert config["scanNotActiveBrokerInterval"] == "5000"
        assert config["clusterTest"] == "false"


async def test_expire_loop_reads_a_changed_interval(autojump_clock: trio.abc.Clock) -> None:
    """The scan interval is read before each wait: shortened, the scans after the current
    wait come that much sooner."""
    route_info = RouteInfoManager(1000)
    interval = [60_000]

    def register() -> None:
        route_info.register_broker("c", "10.0.0.1:10911", "b", 0, "", {}, trio_now_ms())

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(expire_loop, route_info, lambda: interval[0])
        await trio.sleep_until(start + 1)
        interval[0] = 100
        await trio.sleep_until(start + 60.05)  # the first scan, at 60 s, read 100 ms next
        register()
        await trio.sleep_until(start + 61.5)  # expired at 61.05, found by a 100 ms scan
        assert "10.0.0.1:10911" not in route_info.broker_live_table
        nursery.cancel_scope.cancel()


def test_mqnamesrv_with_a_corrupt_kv_file_exits_1_with_one_line(tmp_path: Path) -> None:
    kv = tmp_path / "kvConfig.json"
    kv.write_text("{not json", encoding="utf-8")
    props = tmp_path / "namesrv.properties"
    props.write_text(f"kvConfigPath={kv}\nlistenPort=0\nbindAddress=127.0.0.1\n", encoding="utf-8")
    done = run_cli("namesrv", "-c", str(props))
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "cannot load the KV config" in last, done.stderr
    assert str(kv) in last, done.stderr


async def run_namesrv_with(conf: Path, log: Path) -> tuple[trio.Process, str]:
    """``mqnamesrv -c conf`` on 127.0.0.1 and a free port (given on the command line)."""
    args = ["namesrv", "-c", str(conf), "--listenPort", "0", "--bindAddress", "127.0.0.1"]
    proc, boot = await start_process(args, log, NAMESRV_BOOT)
    return proc, f"127.0.0.1:{boot[1]}"


async def test_an_update_is_saved_to_the_c_file_and_kept_across_a_restart(tmp_path: Path) -> None:
    """As RocketMQ's NamesrvStartup: the ``-c`` file is the configStorePath, rewritten on an
    update (the old one kept as ``.bak``), so a restart with the same ``-c`` keeps the value;
    the command-line overrides stay out of the file and still win over it."""
    conf = tmp_path / "namesrv.conf"
    original = f"kvConfigPath={tmp_path / 'kv.json'}\nconfigStorePath=/elsewhere.properties\n"
    conf.write_text(original, encoding="utf-8")
    log = tmp_path / "namesrv.log"
    with trio.fail_after(4 * LIMIT):
        proc, addr = await run_namesrv_with(conf, log)
        try:
            assert (await as_json("getNamesrvConfig", "-n", addr))[addr]["configStorePath"] == str(
                conf
            )
            await ok(
                "updateNamesrvConfig", "-n", addr, "-k", "brokerChannelExpiredTime", "-v", "7000"
            )
        finally:
            await stop_process(proc)  # SIGKILL: the update was saved when it was answered
        saved = load_properties(conf)
        assert saved["brokerChannelExpiredTime"] == "7000"
        assert saved["listenPort"] == "9876"  # the file's (default), not --listenPort 0
        assert saved["bindAddress"] == "0.0.0.0"
        assert saved["kvConfigPath"] == str(tmp_path / "kv.json")
        assert conf.with_name("namesrv.conf.bak").read_text(encoding="utf-8") == original
        proc, addr = await run_namesrv_with(conf, log)
        try:
            config = (await as_json("getNamesrvConfig", "-n", addr))[addr]
            assert config["brokerChannelExpiredTime"] == "7000"
            assert config["bindAddress"] == "127.0.0.1"  # the command line still wins
        finally:
            await stop_process(proc)


async def test_an_update_that_cannot_be_saved_changes_nothing(tmp_path: Path) -> None:
    """configStorePath unwritable (its directory is a file): SYSTEM_ERROR naming the cause,
    and the running config is unchanged (a change the next restart would lose is refused)."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("", encoding="utf-8")
    async with name_servers(tmp_path, config_store=blocker / "namesrv.properties") as servers:
        n = addrs(servers)
        err = await fails(
            "updateNamesrvConfig", "-n", n, "-k", "brokerChannelExpiredTime", "-v", "7"
        )
        assert "CODE: 1" in err
        assert "cannot save the config to configStorePath" in err
        assert servers[0].route_info.broker_channel_expired_time_ms == 120_000
        config = (await as_json("getNamesrvConfig", "-n", n))[n]
        assert config["brokerChannelExpiredTime"] == "120000"
        err = await fails("updateNamesrvConfig", "-n", n, "-k", "configStorePath", "-v", "/tmp/x")
        assert "black list: configStorePath" in err


def test_print_config_shows_the_c_file_as_config_store_path(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text("configStorePath=/elsewhere.properties\n", encoding="utf-8")
    done = run_cli("namesrv", "-c", str(conf), "-p")
    assert done.returncode == 0, done.stderr
    assert f"configStorePath={conf}\n" in done.stdout
