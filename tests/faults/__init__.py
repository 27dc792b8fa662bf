"""Fault tests: leases and the Redis issuer under crashes, pauses, outages and clock jumps."""
