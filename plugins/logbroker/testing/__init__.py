"""Test and demo support: real servers run as subprocesses (no mocks).

    zookeeper   ZooKeeperServer (Debian's ZooKeeper on a free 127.0.0.1 port), ZkTarget (a chroot
                on it) and expire_session (expire a kazoo session on purpose, the real way)

Plain library code: it imports kazoo but never pytest; the fixtures live in tests/conftest.py.
"""
