"""An AMQP 1.0 message router mesh: stateless, cut-through, end-to-end settlement."""

__version__ = "0.1.0"
