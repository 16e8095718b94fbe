"""The `topology` command: a management client that shows the router network (never imports
the routing core)."""
