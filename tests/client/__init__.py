"""Tests for the pure client modules (client/)."""
