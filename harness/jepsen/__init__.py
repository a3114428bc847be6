"""A Jepsen-style fault suite for replicated topics, on separate hosts (harness/hosts.py).

    cluster    ZooKeeper and three brokers, each on a host of its own, their settings, and a
               watcher of ZooKeeper's states (who led what, in which epoch, when)
    workload   the clients, processes on hosts of their own: producers (acks=-1, and
               acks=1 beside them; unique values, every outcome written down) and readers
               (every partition from its leader, every message with its offset); their
               history files
    nemesis    the faults on a seeded schedule: kill -9 a leader or the controller, pause a
               leader past its ZooKeeper session, cut a follower from its leader, cut a
               leader from ZooKeeper only, flip a bit or tear the end of a stopped
               follower's replica; each undone (stopped brokers started again)
    history    the run's history (history.json): the checker's only input
    checker    the checks (no acks=-1 acknowledged write lost, nothing seen lost, replicas
               byte-identical, one leader per epoch, no unexplained copies), the verdict,
               and the acks=1 acknowledged writes lost (counted, not checked)
    timeline   a PNG of faults, leaders and throughput (with matplotlib)
    run        a run from start to verdict; `python -m harness.jepsen.run`

docs/chaos.md ("Replication under faults") says how to run it and read its verdict. Library
code: no pytest here (tests/replication/test_jepsen_faults.py runs it).
"""
