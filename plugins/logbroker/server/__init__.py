"""The network server, request handlers and broker registration in ZooKeeper."""
