"""Access control (RocketMQ's plain ACL, ``acl`` module), hardened as reliability-plan §4.1-4.2.

Pure code, no trio and no I/O but reading the accounts file when asked:

- :mod:`remoting.acl.permission`: RocketMQ's ``Permission`` bits and checks.
- :mod:`remoting.acl.address`: ``whiteRemoteAddress`` patterns (``RemoteAddressStrategy``).
- :mod:`remoting.acl.config`: ``plain_acl.yml`` parsed into accounts (``PlainPermissionManager``).
- :mod:`remoting.acl.resource`: request code -> resources and the permission each needs
  (``PlainAccessValidator#parse``), and the admin-only codes (``Permission.ADMIN_CODE``).
- :mod:`remoting.acl.signing`: request signing (``AclClientRPCHook``, ``AclSigner``) with
  HMAC-SHA256 over a canonical msgpack, a timestamp and a nonce.
- :mod:`remoting.acl.validator`: one request checked end to end (``PlainAccessValidator``).
"""
