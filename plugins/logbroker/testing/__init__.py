"""Test and demo support: real servers run as subprocesses (no mocks).

    zookeeper   ZooKeeperServer (Debian's ZooKeeper on a free 127.0.0.1 port), ZkTarget (a chroot
                on it) and expire_session (expire a kazoo session on purpose, the real way)
    broker      BrokerProcess: `logbroker broker` as a subprocess on a free port; stop, kill -9
    hosts       Network: separate hosts on one machine (network namespaces on a private bridge),
                ZooKeeper and brokers on them, and faults: cut, cut_between, pause, kill
    fuzz        a mutation fuzzer for a live broker and the checks of its stored data
    jepsen      a Jepsen-style fault run for replicated topics on such hosts: clients,
                nemesis, history, checker (`make chaos-replication`)
    postgres    PostgresServer: Airflow's database for `make up`, a cluster of its own
    spark_standalone  SparkStandalone: a Spark master and workers on 127.0.0.1 (`make up`)

Plain library code: it imports kazoo but never pytest; the fixtures live in tests/conftest.py.
"""
