"""Transactional messages on the broker: half messages, decisions and the check service.

:mod:`broker.transaction.messages` builds the records (pure), :mod:`broker.transaction.service`
keeps the state and runs the checks; the requests are in :mod:`broker.processors.end_transaction`.
"""

from broker.transaction.messages import SYS_TRANS_GROUP, is_prepared, to_half_message
from broker.transaction.service import EndOutcome, PutFailedError, TransactionService

__all__ = [
    "SYS_TRANS_GROUP",
    "EndOutcome",
    "PutFailedError",
    "TransactionService",
    "is_prepared",
    "to_half_message",
]
