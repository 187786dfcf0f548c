"""``mqadmin``: minimq's admin tool with RocketMQ's command names (see :mod:`client.admin.cli`),
and :class:`~client.admin.admin_client.AdminClient`, the trio-native requests behind it."""

from client.admin.admin_client import AdminClient

__all__ = ["AdminClient"]
