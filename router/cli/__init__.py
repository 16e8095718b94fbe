"""Command-line interfaces: argument parsing and rendering only (no protocol or routing logic)."""
