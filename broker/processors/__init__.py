"""The broker's request processors: async handler tables over the store and managers.

- :mod:`broker.processors.send`: SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE.
- :mod:`broker.processors.pull`: PULL_MESSAGE and the offset / query requests.

Header parsing and the never-raise wrapper are :mod:`remoting.headers` (shared with the name
server). Response codes for store outcomes come only from :mod:`broker.status_codes`.
"""
