"""`logbroker preferred-replica-election`: leaders back to each partition's first replica
(like kafka-preferred-replica-election).

The command writes the partitions into `/replication/admin/preferred_replica_election`
(coordination/replication_state.py); the controller moves each one's leadership to its first replica when
that replica is alive and in the ISR, then deletes the node. The command waits for that and
prints, per partition, what moved and, for what did not, why.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from . import (
    add_command_config,
    add_logging_args,
    command_cluster,
    formatter,
    int_at_least,
    topic_name,
)

if TYPE_CHECKING:
    from ..client.cluster import Cluster, ReplicatedPartition

NAME = "preferred-replica-election"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        NAME,
        help="move leaderships back to each partition's preferred replica",
        formatter_class=formatter,
        description="After brokers failed and came back, the leaders of replicated partitions\n"
        "pile up on the brokers that stayed. This asks the controller to give each partition\n"
        "back to its preferred replica (the first of its replica list, where `topics create`\n"
        "spread the leaders evenly) when that replica is alive and in sync, waits for it, and\n"
        "prints what moved.",
        epilog="examples:\n"
        "  logbroker preferred-replica-election --zookeeper 127.0.0.1:2181/live\n"
        "  logbroker preferred-replica-election --zookeeper 127.0.0.1:2181/live --topic orders\n"
        "  logbroker preferred-replica-election --zookeeper 127.0.0.1:2181/live \\\n"
        "      --topic orders --partition 3\n\n"
        "Without --topic, every partition of every replicated topic. A partition whose\n"
        "preferred replica is out of the ISR keeps its leader (the line says so): wait until\n"
        "`logbroker topics describe --under-replicated-partitions` no longer names it.",
    )
    p.add_argument("--zookeeper", required=True, metavar="CONNECT", help="host:port[/chroot]")
    add_command_config(p)
    p.add_argument("--topic", type=topic_name, help="a replicated topic (default: every one)")
    p.add_argument(
        "--partition", type=int_at_least(0), metavar="P", help="one partition of --topic"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds to wait for the controller (default 30)",
    )
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..protocol.errors import LogbrokerError

    if args.partition is not None and args.topic is None:
        print(f"logbroker {NAME}: --partition needs --topic", file=sys.stderr)
        return 2
    try:
        with command_cluster(args) as cluster:
            before = _partitions(cluster, args.topic, args.partition)
            if not before:
                print("no replicated partitions: nothing to elect")
                return 0
            _elect(cluster, [(p.topic, p.partition) for p in before], args.timeout)
            live = set(cluster.live_brokers())
            after = {
                (p.topic, p.partition): p
                for topic in sorted({p.topic for p in before})
                for p in cluster.describe_replicated(topic)
            }
    except (LogbrokerError, ValueError) as exc:
        print(f"logbroker {NAME}: {exc}", file=sys.stderr)
        return 1
    moved = 0
    for old in before:
        new = after[(old.topic, old.partition)]
        preferred = new.replicas[0]
        name = f"{new.topic}-{new.partition}"
        if new.leader == preferred and old.leader != preferred:
            moved += 1
            print(
                f"{name}: leader {_leader(old.leader)} -> {preferred} "
                f"(leader epoch {new.state.leader_epoch if new.state else '-'})"
            )
        elif new.leader == preferred:
            print(f"{name}: leader {preferred}, the preferred replica already")
        else:
            why = (
                "is not alive"
                if preferred not in live
                else f"is not in the ISR {','.join(map(str, new.isr))}"
                if preferred not in new.isr
                else "is shutting down"
            )
            print(
                f"{name}: leader {_leader(new.leader)} stays: preferred replica {preferred} {why}"
            )
    print(f"moved {moved} of {len(before)} partitions to their preferred replica")
    return 0


def _leader(broker: int) -> str:
    return "none" if broker < 0 else str(broker)


def _partitions(
    cluster: Cluster, topic: str | None, partition: int | None
) -> list[ReplicatedPartition]:
    """The partitions asked for, as they are now; an unknown topic or partition is an error."""
    from ..protocol.errors import LogbrokerError

    if topic is None:
        return [p for t in cluster.replicated_topics() for p in cluster.describe_replicated(t)]
    described = cluster.describe_replicated(topic)
    if not described:
        raise LogbrokerError(f"{topic!r} is not a replicated topic (topics describe lists them)")
    if partition is None:
        return described
    if partition >= len(described):
        raise LogbrokerError(
            f"topic {topic!r} has partitions 0 to {len(described) - 1}, not {partition}"
        )
    return [described[partition]]


def _elect(cluster: Cluster, partitions: list[tuple[str, int]], timeout: float) -> None:
    """Write the election and wait for the controller to delete it."""
    from kazoo.exceptions import NodeExistsError, NoNodeError

    from ..coordination import replication_state as state
    from ..protocol.errors import LogbrokerError

    path = state.PREFERRED_REPLICA_ELECTION
    try:
        cluster.zk.create(path, state.encode_election(partitions), makepath=True)
    except NodeExistsError:
        raise LogbrokerError(
            f"a preferred replica election is under way already ({path}): wait for it"
        ) from None
    deadline = time.monotonic() + timeout
    while cluster.zk.exists(path):
        if time.monotonic() >= deadline:
            try:
                cluster.zk.delete(path)
            except NoNodeError:
                return  # done just now
            raise LogbrokerError(
                f"no controller took the election in {timeout:g} s (--timeout): is a broker "
                "of this version running? Nothing was moved"
            )
        time.sleep(0.05)
