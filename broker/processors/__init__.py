"""The broker's request processors: async handler tables over the store and managers.

- :mod:`broker.processors.send`: SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE; the
  message checks it runs first (properties, batch bodies) are :mod:`broker.processors.send_checks`.
- :mod:`broker.processors.pull`: PULL_MESSAGE and the offset / query requests.
- :mod:`broker.processors.client`: HEART_BEAT / UNREGISTER_CLIENT / GET_CONSUMER_LIST_BY_GROUP.
- :mod:`broker.processors.admin`: topic administration and broker introspection.
- :mod:`broker.processors.send_back`: CONSUMER_SEND_MSG_BACK (retry and dead-letter topics).
- :mod:`broker.processors.group_admin`: subscription group create / list / delete.
- :mod:`broker.processors.lock`: LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (orderly consumption).

Header parsing and the never-raise wrapper are :mod:`remoting.headers` (shared with the name
server). Response codes for store outcomes come only from :mod:`broker.status_codes`.
"""
