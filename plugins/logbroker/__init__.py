"""logbroker: a Kafka 0.7-compatible distributed commit log.

Layers (imports point down only, see docs/design.md §2):
    protocol   bytes: messages, message sets, compression, requests and responses
    storage    segment files, the log, recovery, retention, flushing
    server     the network server and broker registration in ZooKeeper
    client     connections, producers and consumers
"""

__version__ = "0.1.0"
