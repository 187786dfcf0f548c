"""minimq's name server (RocketMQ's ``namesrv`` module): the routing registry.

The core (:mod:`namesrv.route_info`, :mod:`namesrv.config`) is pure and synchronous: tables and
functions of ``now``. Networking lives in separate shell modules.
"""
