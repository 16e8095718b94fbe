"""Inter-router protocol and route computation over the router graph (sans-IO)."""
