"""End-to-end tests: real ``mqnamesrv`` / ``mqbroker`` processes and the blocking client."""
