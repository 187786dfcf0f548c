"""Request/response/language codes against RocketMQ's numbers (facts §5.1-§5.3)."""

from __future__ import annotations

import pytest

from remoting.codes import LanguageCode, RequestCode, ResponseCode


@pytest.mark.parametrize(
    ("code", "number"),
    [
        (RequestCode.SEND_MESSAGE, 10),
        (RequestCode.PULL_MESSAGE, 11),
        (RequestCode.QUERY_MESSAGE, 12),
        (RequestCode.UPDATE_CONSUMER_OFFSET, 15),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, 29),
        (RequestCode.GET_MAX_OFFSET, 30),
        (RequestCode.HEART_BEAT, 34),
        (RequestCode.CONSUMER_SEND_MSG_BACK, 36),
        (RequestCode.GET_CONSUMER_LIST_BY_GROUP, 38),
        (RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, 50),
        (RequestCode.DELETE_ACL_CONFIG, 51),
        (RequestCode.GET_BROKER_CLUSTER_ACL_INFO, 52),
        (RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, 53),
        (RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, 54),
        (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 40),
        (RequestCode.REGISTER_BROKER, 103),
        (RequestCode.UNREGISTER_BROKER, 104),
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, 105),
        (RequestCode.GET_BROKER_CLUSTER_INFO, 106),
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, 205),
        (RequestCode.ADD_WRITE_PERM_OF_BROKER, 327),
        (RequestCode.SEND_MESSAGE_V2, 310),
        (RequestCode.SEND_BATCH_MESSAGE, 320),
        (RequestCode.LITE_PULL_MESSAGE, 361),
        (RequestCode.POP_MESSAGE, 200050),
        (RequestCode.ACK_MESSAGE, 200051),
    ],
)
def test_request_codes(code: RequestCode, number: int) -> None:
    assert code == number
    assert RequestCode(number) is code


@pytest.mark.parametrize(
    ("code", "number"),
    [
        (ResponseCode.SUCCESS, 0),
        (ResponseCode.SYSTEM_ERROR, 1),
        (ResponseCode.SYSTEM_BUSY, 2),
        (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 3),
        (ResponseCode.TRANSACTION_FAILED, 4),
        (ResponseCode.FLUSH_DISK_TIMEOUT, 10),
        (ResponseCode.SLAVE_NOT_AVAILABLE, 11),
        (ResponseCode.FLUSH_SLAVE_TIMEOUT, 12),
        (ResponseCode.TOPIC_NOT_EXIST, 17),
        (ResponseCode.PULL_NOT_FOUND, 19),
        (ResponseCode.PULL_RETRY_IMMEDIATELY, 20),
        (ResponseCode.PULL_OFFSET_MOVED, 21),
        (ResponseCode.QUERY_NOT_FOUND, 22),
        (ResponseCode.SUBSCRIPTION_NOT_EXIST, 24),
        (ResponseCode.INVALID_PARAMETER, 29),
        (ResponseCode.TRANSACTION_STATE_UNKNOW, 202),
        (ResponseCode.FLOW_CONTROL, 215),
        (ResponseCode.GO_AWAY, 1500),
        (ResponseCode.RPC_TIME_OUT, -1006),
    ],
)
def test_response_codes(code: ResponseCode, number: int) -> None:
    assert code == number
    assert ResponseCode(number) is code


def test_language_codes() -> None:
    assert LanguageCode.JAVA.value == 0
    assert LanguageCode.PYTHON.value == 3
    assert LanguageCode.GO.value == 9
    assert LanguageCode.NODE_JS.value == 13
    assert [c.value for c in LanguageCode] == list(range(14))


@pytest.mark.parametrize("enum_cls", [RequestCode, ResponseCode, LanguageCode])
def test_numbers_are_unique(enum_cls: type[RequestCode | ResponseCode | LanguageCode]) -> None:
    # An IntEnum with a repeated value silently makes an alias; every name must be its own member.
    assert len(enum_cls.__members__) == len(list(enum_cls))


def test_table_sizes() -> None:
    # Every code of facts §5.2 / §5.3 is present (63 request codes, 45 response codes), plus
    # RocketMQ's UPDATE_NAMESRV_CONFIG / GET_NAMESRV_CONFIG (318, 319) and minimq's own
    # GET_PENDING_HALF_MESSAGES (100001, outside RocketMQ's range), plus RocketMQ 4.x's five
    # plain-ACL admin codes (50-54).
    assert len(RequestCode) == 63 + 2 + 1 + 5
    assert (RequestCode.UPDATE_NAMESRV_CONFIG, RequestCode.GET_NAMESRV_CONFIG) == (318, 319)
    assert RequestCode.GET_PENDING_HALF_MESSAGES == 100001
    assert len(ResponseCode) == 45
