"""Tests for namesrv: route tables and config, pure (no trio, no sockets)."""
