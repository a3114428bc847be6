"""The replication metrics, scraped from three real brokers' /metrics endpoints: who is the
controller, who leads, how far each follower is behind in bytes, and the ISR shrinking when
a follower dies and growing when it is back."""

from __future__ import annotations

import re
import urllib.request

from three_brokers import SESSION_MS, leads, produce, wait_until

from logbroker.client.cluster import Cluster
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import find_free_port

SAMPLE = re.compile(r'^(logbroker_\w+)\{broker="\d+",?(.*)\} (\S+)$')


def scrape(broker: BrokerProcess) -> dict[str, float]:
    """`name{labels but broker, sorted}` -> value, from the broker's real endpoint."""
    port = broker.settings()["metrics.port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    samples = {}
    for m in filter(None, map(SAMPLE.match, lines)):
        labels = ",".join(sorted(re.findall(r'\w+="[^"]*"', m[2])))
        samples[f"{m[1]}{{{labels}}}"] = float(m[3])
    return samples


def test_controller_leaders_lag_and_isr_changes(broker_factory, zk_chroot) -> None:
    running = {
        i: broker_factory(
            broker_id=i,
            zk=zk_chroot,
            zk_sessiontimeout_ms=SESSION_MS,
            metrics_port=find_free_port(),
        )
        for i in range(3)
    }
    with Cluster(zk_chroot.connect) as cluster:
        [p] = cluster.create_replicated_topic("m", 1, 3)
        leader = running[p.leader]
        dead, alive = (r for r in p.replicas if r != p.leader)
        lag = 'logbroker_follower_lag_bytes{{follower="{}",partition="0",topic="m"}}'
        wait_until("the leader's role", lambda: leads(leader, "m", 0))
        wait_until(
            "both followers caught up",
            lambda: (
                scrape(leader).get(lag.format(dead)) == scrape(leader).get(lag.format(alive)) == 0
            ),
        )
        scraped = {b: scrape(running[b]) for b in running}
        assert sum(s["logbroker_active_controller_count{}"] for s in scraped.values()) == 1
        assert {b: s["logbroker_leader_count{}"] for b, s in scraped.items()} == {
            b: int(b == p.leader) for b in running
        }
        assert scraped[p.leader]["logbroker_under_replicated_partitions{}"] == 0

        start = scraped[p.leader]['logbroker_log_end_offset{partition="0",topic="m"}']
        running[dead].kill()
        end = produce(leader, "m", 0, [b"y" * 1000])
        wait_until(
            "the ISR to shrink", lambda: scrape(leader)["logbroker_isr_shrinks_total{}"] == 1
        )
        now = scrape(leader)
        assert now["logbroker_under_replicated_partitions{}"] == 1
        assert now[lag.format(dead)] == end - start  # it fetched nothing since the kill
        wait_until("the live follower to catch up", lambda: scrape(leader)[lag.format(alive)] == 0)

        running[dead].start()
        wait_until("the ISR to grow", lambda: scrape(leader)["logbroker_isr_expands_total{}"] == 1)
        now = scrape(leader)
        assert now["logbroker_under_replicated_partitions{}"] == 0 and now[lag.format(dead)] == 0
