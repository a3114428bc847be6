"""The test harness: what the tests, the chaos runs and the fuzz benchmark drive the system with.

    hosts       Network: separate hosts on one machine (network namespaces on a private bridge),
                ZooKeeper and brokers on them, and faults: cut, cut_between, pause, kill
    sessions    expire_session: a ZooKeeper session expired on the server, the real way
    faults      the chaos run's faults on a PipelineStack (`make chaos`, scripts/chaos.py)
    fuzz        a mutation fuzzer for a live broker and the checks of its stored data
    jepsen      a Jepsen-style fault run for replicated topics on such hosts: clients,
                nemesis, history, checker (`make chaos-replication`)
    browser     headless Chromium over the DevTools protocol (the UI journeys)

It builds on the stacks of `logbroker.stack` (ZooKeeper, brokers, the pipeline) and on the
library; nothing installed imports it, and it is not installed: neither the wheel nor the
Airflow plugins folder ships it. It is imported from the checkout's root, where pytest
(`pythonpath`), `python -m harness.jepsen.run`, `python -m scripts.chaos` and
`python -m bench.fuzz_broker` find it. Plain code: it never imports pytest; the fixtures live in
tests/conftest.py and tests/fixtures_*.py.
"""
