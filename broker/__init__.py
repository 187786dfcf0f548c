"""minimq's broker (RocketMQ's ``broker`` module).

The building blocks here are pure and synchronous: configuration (:mod:`broker.config`), the
topic table (:mod:`broker.topic_config`) and consumer offsets (:mod:`broker.consumer_offset`),
persisted as JSON by :mod:`broker.json_store`. Networking lives in separate shell modules.
"""

from broker.config import BrokerConfig
from broker.consumer_offset import ConsumerOffsetManager
from broker.topic_config import TopicConfigManager

__all__ = ["BrokerConfig", "ConsumerOffsetManager", "TopicConfigManager"]
