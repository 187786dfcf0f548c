"""Queue locks for orderly consumption (RocketMQ's ``AdminBrokerProcessor#lockBatchMQ`` /
``unlockBatchMQ``).

::

    LOCK_BATCH_MQ    41  body {"consumerGroup", "clientId", "mqSet": [{"topic", "brokerName",
                         "queueId"}]} -> body {"lockOKMQSet": [...]} (the queues now held)
    UNLOCK_BATCH_MQ  42  same body -> SUCCESS

Bodies are :mod:`remoting.client_bodies`' lock codecs; the table is
:class:`broker.rebalance_lock.RebalanceLockManager` (60 s expiry, renewal by the holder).
"""

from __future__ import annotations

from broker.rebalance_lock import RebalanceLockManager
from remoting.channel import Channel, Handler
from remoting.client_bodies import LockedQueue, decode_lock_batch, encode_lock_batch_response
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import guarded


class LockProcessor:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ over one lock table."""

    def __init__(self, locks: RebalanceLockManager[LockedQueue]) -> None:
        self.locks = locks

    async def lock_batch(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """LOCK_BATCH_MQ: lock or renew what is free for the client; answer what it holds."""
        body = decode_lock_batch(request.body)
        locked = self.locks.try_lock_batch(body.consumer_group, body.mqs, body.client_id)
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=encode_lock_batch_response(sorted(locked))
        )

    async def unlock_batch(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """UNLOCK_BATCH_MQ: release the client's own locks."""
        body = decode_lock_batch(request.body)
        self.locks.unlock_batch(body.consumer_group, body.mqs, body.client_id)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def handlers(self) -> dict[int, Handler]:
        """The ``{request code: handler}`` table."""
        return {
            int(RequestCode.LOCK_BATCH_MQ): guarded(self.lock_batch),
            int(RequestCode.UNLOCK_BATCH_MQ): guarded(self.unlock_batch),
        }
