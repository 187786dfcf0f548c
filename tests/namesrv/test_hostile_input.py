"""Hostile input against a live in-process name server (the reliability plan's R5).

Valid requests of every code a broker or client sends to a name server, with one or two header
fields replaced by wrong values or removed, or with bytes of the body (the register body, a
msgpack map of topic configs) overwritten at random: every one is answered, none costs a
handler traceback in the log, and the routes the name server serves afterwards still decode.
"""

from __future__ import annotations

import logging
import random

import pytest
import trio

from common.route import TopicConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.route_bodies import decode_cluster_info_body, encode_register_body
from tests.broker.inprocess import req, running_namesrv
from tests.broker.test_hostile_input import REQUESTS, SEED, mutated

BROKER = {
    "brokerName": "broker-h",
    "brokerAddr": "127.0.0.1:10911",
    "clusterName": "HostileCluster",
    "brokerId": "0",
}


def valid_requests() -> list[RemotingCommand]:
    """One valid request of each code brokers and clients send to a name server."""
    body = encode_register_body({"T1": TopicConfig("T1", 4, 4), "T2": TopicConfig("T2", 2, 2)})
    return [
        RemotingCommand.request(
            RequestCode.REGISTER_BROKER, {**BROKER, "haServerAddr": ""}, body, opaque=0
        ),
        RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(BROKER), opaque=0),
        req(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T1"),
        req(RequestCode.GET_BROKER_CLUSTER_INFO),
        req(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
        req(RequestCode.GET_TOPICS_BY_CLUSTER, cluster="HostileCluster"),
        req(RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="T2"),
        req(RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="broker-h"),
        req(RequestCode.ADD_WRITE_PERM_OF_BROKER, brokerName="broker-h"),
    ]


def body_flipped(rng: random.Random, template: RemotingCommand, opaque: int) -> RemotingCommand:
    """``template`` with one to four bytes of its body overwritten."""
    body = bytearray(template.body)
    for _ in range(rng.randint(1, 4)):
        body[rng.randrange(len(body))] = rng.randrange(256)
    return RemotingCommand.request(
        template.code, dict(template.ext_fields), bytes(body), opaque=opaque
    )


async def test_valid_requests_with_bad_fields_or_bodies_are_answered_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    rng = random.Random(SEED + 2)
    templates = valid_requests()
    with trio.fail_after(60):
        async with running_namesrv() as addr, RemotingClient(default_timeout_s=10) as client:
            for template in templates:
                response = await client.invoke(addr, template.with_opaque(1, 0))
                assert response.code != ResponseCode.SYSTEM_ERROR, (template.code, response)
            for opaque in range(1, REQUESTS + 1):
                template = rng.choice(templates)
                if template.body and rng.random() < 0.5:
                    request = body_flipped(rng, template, opaque)
                else:
                    request = mutated(rng, template, opaque)
                await client.invoke(addr, request)
            info = await client.invoke(addr, req(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert info.code == ResponseCode.SUCCESS
            decode_cluster_info_body(info.body)  # what it keeps still makes a valid answer
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
    assert tracebacks == [], [r.getMessage() for r in tracebacks[:5]]
