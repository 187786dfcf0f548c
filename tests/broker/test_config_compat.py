"""broker/config.py and ``mqbroker``'s command line against RocketMQ's conventions: stock keys
(``brokerRole``, ``bindAddress``), RocketMQ's clamps, error messages that name the key and the
value, ``-p`` output that reads back with ``-c``. Command-line cases run real ``python -m
broker`` / ``python -m namesrv`` processes with a controlled environment."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from client.admin.admin_client import AdminClient
from tests.processes import (
    BROKER_BOOT,
    REPO,
    read_log,
    start_namesrv,
    start_process,
    stop_process,
)

STOCK_BROKER_CONF = """\
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = ASYNC_FLUSH
"""
"""RocketMQ's distributed ``conf/broker.conf``."""


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <args>`` with ``env`` added to an environment without NAMESRV_ADDR or
    MINIMQ_BUSY_POLL_US."""
    base = {k: v for k, v in os.environ.items() if k not in ("NAMESRV_ADDR", "MINIMQ_BUSY_POLL_US")}
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def printed(*args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """``mqbroker -p <args>`` as a key -> raw line value map (exit 0 asserted)."""
    out = cli("broker", "-p", *args, env=env)
    assert out.returncode == 0, out.stderr
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


# --------------------------------------------------------------------- cleanFileForciblyEnable


def test_clean_file_forcibly_enable_is_a_store_key(tmp_path: Path) -> None:
    """RocketMQ's ``cleanFileForciblyEnable`` (default true): printed by ``-p``, set by a
    ``-c`` file and overridden by ``--cleanFileForciblyEnable``; a bad value names it."""
    conf = tmp_path / "forcibly.conf"
    conf.write_text("cleanFileForciblyEnable=false\n", encoding="utf-8")
    assert BrokerConfig().store_config().clean_file_forcibly_enable is True
    assert BrokerConfig.load(conf, None, {}, {}).store_config().clean_file_forcibly_enable is False
    assert printed()["cleanFileForciblyEnable"] == "true"
    assert printed("-c", str(conf))["cleanFileForciblyEnable"] == "false"
    assert printed("--cleanFileForciblyEnable", "false")["cleanFileForciblyEnable"] == "false"
    overridden = printed("-c", str(conf), "--cleanFileForciblyEnable", "true")
    assert overridden["cleanFileForciblyEnable"] == "true"
    out = cli("broker", "-p", "--cleanFileForciblyEnable", "no")
    assert out.returncode == 1
    assert "cleanFileForciblyEnable" in out.stderr


def test_delete_commit_log_files_interval_is_a_store_key() -> None:
    """RocketMQ's ``deleteCommitLogFilesInterval`` (100 ms): a RocketMQ broker.conf that sets
    it used to stop mqbroker with "unknown broker property"."""
    assert printed()["deleteCommitLogFilesInterval"] == "100"
    assert printed("--deleteCommitLogFilesInterval", "0")["deleteCommitLogFilesInterval"] == "0"
    out = cli("broker", "-p", "--deleteCommitLogFilesInterval", "-1")
    assert out.returncode == 1
    assert "deleteCommitLogFilesInterval must be >= 0" in out.stderr


def test_destroy_maped_file_interval_forcibly_is_an_accepted_store_key(tmp_path: Path) -> None:
    """RocketMQ's ``destroyMapedFileIntervalForcibly`` (120000 ms): a RocketMQ broker.conf that
    sets it used to stop mqbroker with "unknown broker property". It has no effect in minimq
    (no reader ever holds up a file's destruction), but reads back and is checked."""
    conf = tmp_path / "destroy.conf"
    conf.write_text("destroyMapedFileIntervalForcibly=60000\n", encoding="utf-8")
    assert printed()["destroyMapedFileIntervalForcibly"] == "120000"
    loaded = BrokerConfig.load(conf, None, {}, {}).store_config()
    assert loaded.destroy_maped_file_interval_forcibly == 60000
    assert printed("-c", str(conf))["destroyMapedFileIntervalForcibly"] == "60000"
    out = cli("broker", "-p", "--destroyMapedFileIntervalForcibly", "-1")
    assert out.returncode == 1
    assert "destroyMapedFileIntervalForcibly must be >= 0" in out.stderr


def test_redelete_hanged_file_interval_is_an_accepted_store_key(tmp_path: Path) -> None:
    """RocketMQ's ``redeleteHangedFileInterval`` (120000 ms), set by widely copied RocketMQ
    broker.conf files, used to stop mqbroker with "unknown broker property". It has no effect
    (no reader holds up a deletion; a failed unlink is retried by the next retention pass),
    but reads back and is checked."""
    conf = tmp_path / "redelete.conf"
    conf.write_text("redeleteHangedFileInterval=60000\n", encoding="utf-8")
    assert printed()["redeleteHangedFileInterval"] == "120000"
    loaded = BrokerConfig.load(conf, None, {}, {}).store_config()
    assert loaded.redelete_hanged_file_interval == 60000
    assert printed("-c", str(conf))["redeleteHangedFileInterval"] == "60000"
    out = cli("broker", "-p", "--redeleteHangedFileInterval", "-1")
    assert out.returncode == 1
    assert "redeleteHangedFileInterval must be >= 0" in out.stderr


def sample_conf(root: Path) -> str:
    """A RocketMQ broker.conf as widely copied (RocketMQ's sample keys, paths under ``root``)."""
    return f"""\
brokerClusterName=rocketmq-cluster
brokerName=broker-a
brokerId=0
deleteWhen=04
fileReservedTime=120
destroyMapedFileIntervalForcibly=120000
redeleteHangedFileInterval=120000
storePathRootDir={root}
storePathCommitLog={root}/commitlog
storePathConsumeQueue={root}/consumequeue/
storePathIndex={root}/index
storeCheckpoint={root}/checkpoint
abortFile={root}/abort
flushCommitLogLeastPages=4
flushConsumeQueueThoroughInterval=60000
sendMessageThreadPoolNums=128
pullMessageThreadPoolNums=128
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
"""


def test_rocketmq_sample_conf_starts_with_a_warning_per_key_without_effect(
    tmp_path: Path,
) -> None:
    """RocketMQ's path keys naming minimq's own paths are accepted silently; its thread-pool
    and flush-pages keys are accepted and each named in a startup warning saying why it has
    no effect. ``-p`` prints them back."""
    conf = tmp_path / "broker.conf"
    conf.write_text(sample_conf(tmp_path / "store"), encoding="utf-8")
    config = BrokerConfig.load(conf, None, {}, {})
    assert config.store_config().commitlog_dir == tmp_path / "store" / "commitlog"
    warned = config.compat_warnings()
    assert [w.split("=")[0] for w in warned] == [
        "flushCommitLogLeastPages",
        "flushConsumeQueueThoroughInterval",
        "sendMessageThreadPoolNums",
        "pullMessageThreadPoolNums",
    ]
    assert "sendMessageThreadPoolNums=128 has no effect: " in warned[2]
    assert printed("-c", str(conf))["sendMessageThreadPoolNums"] == "128"
    elsewhere = config.load(conf, None, {}, {"storeCheckpoint": "/elsewhere/checkpoint"})
    warned = elsewhere.compat_warnings()
    assert any(w.startswith("storeCheckpoint=/elsewhere/checkpoint has no effect") for w in warned)


BOOT_WITHOUT_NAMESRV = re.compile(r"The broker\[broker-a, 127\.0\.0\.1:(\d+)\] boot success\..*")


def test_rocketmq_sample_conf_broker_boots_and_logs_the_warnings(tmp_path: Path) -> None:
    """``mqbroker -c`` with the sample file serves, logging the keys without effect."""
    conf = tmp_path / "broker.conf"
    conf.write_text(sample_conf(tmp_path / "store"), encoding="utf-8")
    stderr_path = tmp_path / "broker.log"
    argv = ["broker", "-c", str(conf), "--listenPort", "0", "--bindAddress", "127.0.0.1"]
    argv += ["--brokerIP1", "127.0.0.1", "--diskMaxUsedSpaceRatio", "95"]

    async def boot() -> None:
        proc, _ = await start_process(argv, stderr_path, BOOT_WITHOUT_NAMESRV)
        await stop_process(proc)

    trio.run(boot)
    assert "sendMessageThreadPoolNums=128 has no effect" in read_log(stderr_path)


def test_store_paths_elsewhere_and_replicated_modes_are_refused_by_name(tmp_path: Path) -> None:
    """A commitlog elsewhere than storePathRootDir/commitlog is refused (RocketMQ would honour
    it); DLedger and controller modes are refused as such, before their other keys; a
    misspelt key is still refused, naming the key it resembles."""
    with pytest.raises(ValueError, match="storePathCommitLog must be storePathRootDir's"):
        BrokerConfig.load(None, None, {}, {"storePathCommitLog": "/data/commitlog"})
    for switch in ("enableDLegerCommitLog", "enableControllerMode"):
        with pytest.raises(ValueError, match=f"{switch}=true is not supported: minimq brokers"):
            BrokerConfig.load(None, None, {}, {switch: "true", "dLegerGroup": "g"})
        assert BrokerConfig.load(None, None, {}, {switch: "false"}).compat_warnings() == []
    with pytest.raises(ValueError, match="did you mean 'mappedFileSizeCommitLog'"):
        BrokerConfig.load(None, None, {}, {"mapedFileSizeCommitLog": "1073741824"})
    with pytest.raises(ValueError, match="unknown broker property 'sendMessageThreadPoolNum'"):
        BrokerConfig.load(None, None, {}, {"sendMessageThreadPoolNum": "8"})


# --------------------------------------------------------------------------- brokerRole


def test_rocketmq_stock_broker_conf_is_accepted(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(STOCK_BROKER_CONF, encoding="utf-8")
    config = BrokerConfig.load(conf, None, {}, {})
    assert config.broker_role == "ASYNC_MASTER"
    assert config.store_config().file_reserved_time == 48
    assert printed("-c", str(conf))["brokerRole"] == "ASYNC_MASTER"


@pytest.mark.parametrize("role", ["SYNC_MASTER", "SLAVE"])
def test_replicated_roles_are_refused_by_name(role: str) -> None:
    with pytest.raises(ValueError, match=f"brokerRole {role} is not supported: minimq brokers"):
        BrokerConfig.load(None, None, {}, {"brokerRole": role})
    out = cli("broker", "-p", "--brokerRole", role)
    assert out.returncode == 1
    assert "have no replication" in out.stderr


def test_unknown_role_names_the_key_and_value() -> None:
    with pytest.raises(ValueError, match="brokerRole must be ASYNC_MASTER, got 'MASTER'"):
        BrokerConfig.load(None, None, {}, {"brokerRole": "MASTER"})


# --------------------------------------------------------------------------- bindAddress


def test_bind_address_is_a_key_the_option_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "bind.conf"
    conf.write_text("bindAddress=127.0.0.1\n", encoding="utf-8")
    assert BrokerConfig().bind_address == "0.0.0.0"
    assert BrokerConfig.load(conf, None, {}, {}).bind_address == "127.0.0.1"
    assert printed()["bindAddress"] == "0.0.0.0"
    assert printed("-c", str(conf))["bindAddress"] == "127.0.0.1"
    assert printed("-c", str(conf), "--bindAddress", "127.0.0.3")["bindAddress"] == "127.0.0.3"


def listening_addresses(pid: int, port: int) -> list[str]:
    """The IPv4 addresses process ``pid`` listens on at ``port`` (``/proc/<pid>/net/tcp``)."""
    found = []
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        hex_addr, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.append(str(ipaddress.IPv4Address(bytes.fromhex(hex_addr)[::-1])))
    return found


async def test_broker_listens_on_the_files_bind_address_and_warns_of_clamps(
    tmp_path: Path,
) -> None:
    """bindAddress from -c is where the broker listens (127.0.0.1, not the default 0.0.0.0,
    read off the kernel's table of listening sockets); a disk ratio outside RocketMQ's bounds
    gives one startup WARNING with both values."""
    conf = tmp_path / "b.conf"
    conf.write_text("bindAddress=127.0.0.1\ndiskSpaceWarningLevelRatio=5\n", encoding="utf-8")
    stderr_path = tmp_path / "stderr.log"
    procs: list[trio.Process] = []
    try:
        ns, ns_addr = await start_namesrv(stderr_path)
        procs.append(ns)
        broker_args = ["broker", "-c", str(conf), "-n", ns_addr]
        broker_args += ["--listenPort", "0", "--brokerIP1", "127.0.0.1"]
        broker_args += ["--storePathRootDir", str(tmp_path / "store")]
        broker_args += ["--mappedFileSizeCommitLog", "1048576"]
        broker, match = await start_process(broker_args, stderr_path, BROKER_BOOT)
        procs.append(broker)
        port = int(match[1])
        with trio.fail_after(10):
            assert listening_addresses(broker.pid, port) == ["127.0.0.1"]
            broker.send_signal(signal.SIGTERM)
            assert await broker.wait() == 0
    finally:
        for proc in procs:
            await stop_process(proc)
    warning = "diskSpaceWarningLevelRatio=5 is outside RocketMQ's range [35, 90]: using 35"
    lines = [line for line in read_log(stderr_path).splitlines() if warning in line]
    assert len(lines) == 1, read_log(stderr_path)
    assert "WARNING" in lines[0]


async def test_a_master_given_a_nonzero_broker_id_registers_as_the_master(
    tmp_path: Path,
) -> None:
    """RocketMQ's BrokerStartup sets an ASYNC_MASTER's brokerId to 0. A broker given
    ``brokerId=1`` used to register as id 1: its route had no master, so no client could send
    to it ("No route info"). It registers as 0, with a startup warning."""
    stderr_path = tmp_path / "stderr.log"
    procs: list[trio.Process] = []
    try:
        ns, ns_addr = await start_namesrv(stderr_path)
        procs.append(ns)
        broker_args = ["broker", "-n", ns_addr, "--brokerId", "1", "--listenPort", "0"]
        broker_args += ["--bindAddress", "127.0.0.1", "--brokerIP1", "127.0.0.1"]
        broker_args += ["--storePathRootDir", str(tmp_path / "store")]
        broker_args += ["--mappedFileSizeCommitLog", "1048576", "--diskMaxUsedSpaceRatio", "95"]
        broker, match = await start_process(broker_args, stderr_path, BROKER_BOOT)
        procs.append(broker)
        async with AdminClient(ns_addr) as admin:
            route = await admin.topic_route("TBW102")
        assert [b.broker_addrs for b in route.broker_datas] == [{0: f"127.0.0.1:{match[1]}"}]
    finally:
        for proc in procs:
            await stop_process(proc)
    assert "brokerId=1 is used as 0" in read_log(stderr_path)


# --------------------------------------------------------------------------- clamps


def test_disk_ratios_are_clamped_as_rocketmq() -> None:
    config = BrokerConfig.load(
        None,
        None,
        {},
        {
            "diskMaxUsedSpaceRatio": "5",
            "diskSpaceWarningLevelRatio": "100",
            "diskSpaceCleanForciblyRatio": "0",
        },
    )
    store = config.store_config()
    assert store.disk_max_used_space_ratio == 10
    assert store.disk_space_warning_level_ratio == 90
    assert store.disk_space_clean_forcibly_ratio == 30
    assert config.clamped_settings() == [
        "diskMaxUsedSpaceRatio=5 is outside RocketMQ's range [10, 95]: using 10",
        "diskSpaceWarningLevelRatio=100 is outside RocketMQ's range [35, 90]: using 90",
        "diskSpaceCleanForciblyRatio=0 is outside RocketMQ's range [30, 85]: using 30",
    ]
    assert "diskSpaceCleanForciblyRatio=30\n" in config.to_properties()  # the value used
    within = {"diskMaxUsedSpaceRatio": "10", "diskSpaceWarningLevelRatio": "90"}
    assert BrokerConfig.load(None, None, {}, within).clamped_settings() == []
    with pytest.raises(ValueError, match="diskSpaceCleanForciblyRatio must be a percentage"):
        BrokerConfig.load(None, None, {}, {"diskSpaceCleanForciblyRatio": "101"})


def test_consume_queue_file_size_is_rounded_up_to_whole_units_as_rocketmq() -> None:
    """RocketMQ's ``getMappedFileSizeConsumeQueue`` rounds up to a multiple of the 20-byte
    unit; minimq refused such a size. ``-p`` prints the size used, with a startup warning."""
    config = BrokerConfig.load(None, None, {}, {"mappedFileSizeConsumeQueue": "1000010"})
    assert config.store_config().mapped_file_size_consume_queue == 1000020
    assert "mappedFileSizeConsumeQueue=1000020\n" in config.to_properties()
    assert config.clamped_settings() == [
        "mappedFileSizeConsumeQueue=1000010 is not a multiple of the 20-byte consume queue "
        "unit: using 1000020"
    ]
    whole = {"mappedFileSizeConsumeQueue": "6000"}
    assert BrokerConfig.load(None, None, {}, whole).clamped_settings() == []
    assert printed("--mappedFileSizeConsumeQueue", "30")["mappedFileSizeConsumeQueue"] == "40"


def test_register_period_has_a_floor_also_at_runtime() -> None:
    with pytest.raises(
        ValueError, match=r"registerNameServerPeriod must be at least 100 ms .*, got 1$"
    ):
        BrokerConfig.load(None, None, {}, {"registerNameServerPeriod": "1"})
    config = BrokerConfig.load(None, None, {}, {"registerNameServerPeriod": "100"})
    assert config.register_name_server_period_ms == 100
    with pytest.raises(ValueError, match="registerNameServerPeriod must be at least 100 ms"):
        dataclasses.replace(config, register_name_server_period_ms=99)  # updateBrokerConfig
    with pytest.raises(ValueError, match=r"registerNameServerPeriod must be > 0 ms, got 0"):
        dataclasses.replace(config, register_name_server_period_ms=0)


# --------------------------------------------------------------------- shortPollingTimeMills


def test_short_polling_time_is_a_broker_key(tmp_path: Path) -> None:
    """RocketMQ's ``shortPollingTimeMills`` (default 1000): printed by ``-p``, set by a ``-c``
    file and overridden by ``--shortPollingTimeMills``; 0 (RocketMQ's hold service would spin)
    and more than a long poll's 120 s cap are refused, naming the key and the value."""
    conf = tmp_path / "short.conf"
    conf.write_text("longPollingEnable=false\nshortPollingTimeMills=500\n", encoding="utf-8")
    assert BrokerConfig().short_polling_time_ms == 1000
    assert BrokerConfig.load(conf, None, {}, {}).short_polling_time_ms == 500
    assert printed()["shortPollingTimeMills"] == "1000"
    assert printed("-c", str(conf))["shortPollingTimeMills"] == "500"
    overridden = printed("-c", str(conf), "--shortPollingTimeMills", "2500")
    assert overridden["shortPollingTimeMills"] == "2500"
    for bad, rule in (("0", "got 0"), ("120001", "got 120001"), ("-1", "got -1")):
        out = cli("broker", "-p", "--shortPollingTimeMills", bad)
        assert out.returncode == 1
        assert "shortPollingTimeMills must be in [1, 120000] ms" in out.stderr
        assert out.stderr.rstrip().endswith(rule)
    out = cli("broker", "-p", "--shortPollingTimeMills", "1s")
    assert out.returncode == 1
    assert "property 'shortPollingTimeMills': expected an integer, got '1s'" in out.stderr


# --------------------------------------------------------------------------- messages


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("mappedFileSizeCommitLog", "-5", "must be at least 4096 bytes, got -5"),
        ("mappedFileSizeConsumeQueue", "0", "must be > 0, got 0"),
        ("maxHashSlotNum", "-7", "must be >= 1, got -7"),
        ("maxIndexNum", "1", "must be >= 2, got 1"),
        ("serverMaxConnections", "-1", "must be >= 0, got -1"),
        ("serverMaxPendingRequests", "0", "must be >= 1, got 0"),
        ("serverMaxPendingRequestsPerConnection", "-3", "must be >= 1, got -3"),
        ("transactionCheckMax", "-2", "must be >= 0, got -2"),
        ("transactionTimeOut", "-1", "must be >= 0, got -1"),
        ("brokerClusterName", "", "must not be empty, got ''"),
        ("brokerName", " ", "must not be empty, got ''"),
    ],
)
def test_errors_name_the_key_and_the_value(key: str, value: str, rule: str) -> None:
    """One check per key (finding 6: several keys shared one message without the value)."""
    with pytest.raises(ValueError, match=re.escape(f"{key} {rule}") + "$"):
        BrokerConfig.load(None, None, {}, {key: value})


def test_cli_errors_name_the_file_line_and_environment(tmp_path: Path) -> None:
    conf = tmp_path / "b.conf"
    conf.write_text("brokerId=0\n\nbrokerName=b\\uZZ12\n", encoding="utf-8")
    out = cli("broker", "-c", str(conf), "-p")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f'mqbroker: error: bad config: {conf}:3: malformed \\uXXXX escape "\\uZZ12" '
        "(four hex digits expected)"
    )
    out = cli("broker", "-p", env={"NAMESRV_ADDR": "foo"})
    assert out.returncode == 1
    assert "NAMESRV_ADDR: expected host:port, got 'foo'" in out.stderr
    out = cli("broker", "-p", env={"MINIMQ_BUSY_POLL_US": "abc"})
    assert out.returncode == 1
    assert "MINIMQ_BUSY_POLL_US must be" in out.stderr
    assert "'busyPollMicros'" not in out.stderr


def test_latin1_file_is_read_as_java_reads_it(tmp_path: Path) -> None:
    conf = tmp_path / "latin1.conf"
    conf.write_bytes(b"brokerName=br\xe9ker\n")
    assert printed("-c", str(conf))["brokerName"] == "bréker"


# --------------------------------------------------------------------------- -p round trip


def test_print_config_reads_back_with_c(tmp_path: Path) -> None:
    """``mqbroker -p > f; mqbroker -c f -p`` gives f again, backslashes and all."""
    first = cli("broker", "-p", "--storePathRootDir", "C:\\data\\new", "--brokerName", "a#b=c")
    assert first.returncode == 0, first.stderr
    assert "storePathRootDir=C:\\\\data\\\\new\n" in first.stdout
    conf = tmp_path / "x.conf"
    conf.write_text(first.stdout, encoding="utf-8")
    again = cli("broker", "-c", str(conf), "-p")
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout


def test_namesrv_print_config_reads_back_with_c(tmp_path: Path) -> None:
    first = cli("namesrv", "-p", "-c", str(_write_kv(tmp_path)))
    assert first.returncode == 0, first.stderr
    conf = tmp_path / "again.conf"
    conf.write_text(first.stdout, encoding="utf-8")
    again = cli("namesrv", "-c", str(conf), "-p")
    # the one difference: the -c file is the configStorePath (RocketMQ's NamesrvStartup)
    assert f"configStorePath={tmp_path / 'ns.conf'}\n" in first.stdout
    assert again.stdout == first.stdout.replace(str(tmp_path / "ns.conf"), str(conf))
    assert "kvConfigPath=C:\\\\kv\\\\new.json\n" in again.stdout


def _write_kv(tmp_path: Path) -> Path:
    path = tmp_path / "ns.conf"
    path.write_text("kvConfigPath=C:\\\\kv\\\\new.json\n", encoding="utf-8")
    return path


def test_precedence_from_the_command_line(tmp_path: Path) -> None:
    """RocketMQ's order: NAMESRV_ADDR and MINIMQ_BUSY_POLL_US are defaults; -c, -n, --key win."""
    conf = tmp_path / "b.conf"
    conf.write_text("namesrvAddr=10.0.0.1:9876\nbusyPollMicros=100\n", encoding="utf-8")
    env = {"NAMESRV_ADDR": "10.0.0.2:9876", "MINIMQ_BUSY_POLL_US": "0"}
    assert printed(env=env)["namesrvAddr"] == "10.0.0.2:9876"
    assert printed(env=env)["busyPollMicros"] == "0"
    from_file = printed("-c", str(conf), env=env)
    assert from_file["namesrvAddr"] == "10.0.0.1:9876"
    assert from_file["busyPollMicros"] == "100"
    assert printed("-c", str(conf), "-n", "10.0.0.3:9876", env=env)["namesrvAddr"] == (
        "10.0.0.3:9876"
    )
    assert printed("-c", str(conf), "--busyPollMicros", "7", env=env)["busyPollMicros"] == "7"


def test_an_empty_namesrv_addr_on_the_command_line_clears_the_file_and_env(tmp_path: Path) -> None:
    """RocketMQ's ``commandLine2Properties`` passes ``-n ""`` on as an empty ``namesrvAddr``:
    neither the ``-c`` file's address nor ``NAMESRV_ADDR`` is kept."""
    conf = tmp_path / "b.conf"
    conf.write_text("namesrvAddr=10.0.0.1:9876\n", encoding="utf-8")
    env = {"NAMESRV_ADDR": "10.0.0.2:9876"}
    for flag in ("-n", "--namesrvAddr"):
        assert printed("-c", str(conf), flag, "", env=env)["namesrvAddr"] == ""
        assert printed(flag, "", env=env)["namesrvAddr"] == ""
