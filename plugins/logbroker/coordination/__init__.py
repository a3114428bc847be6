"""ZooKeeper coordination: Kafka 0.7's znode paths and value formats, and the rebalance assignment."""
