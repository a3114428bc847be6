"""What goes wrong talking to ZooKeeper, for the broker's registration and the group consumer."""

from __future__ import annotations

from ..protocol.errors import LogbrokerError


class ZooKeeperUnavailableError(LogbrokerError):
    """ZooKeeper could not be reached in time, or stayed unreachable: at a broker's or a
    consumer's start, while a broker registers, or for a consumer's explicit commit."""
