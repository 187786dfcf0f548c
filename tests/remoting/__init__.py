"""Tests for the pure remoting core (remoting/codes.py, command.py, frame.py, errors.py)."""
