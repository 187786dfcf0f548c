"""Types and pure codecs shared by every minimq process (RocketMQ's ``common`` module).

Nothing in this package imports from ``store``, ``broker``, ``namesrv`` or ``client``.
"""
