"""Helpers shared by the test suites (third-party peers, threads, recording doubles)."""
