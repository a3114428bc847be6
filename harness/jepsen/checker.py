"""The checks of a fault run, over its history (history.py), and the verdict.

    verdict = check(history)
    verdict["valid"]              True when every check holds
    verdict["reported"]           what is counted and said but is no promise (acks=1 losses)
    print(summary(verdict))       a few lines for people

The checks (each a key of verdict["checks"], with "ok", "count" of violations and up to
EXAMPLES of them):

- `acknowledged_kept`: every write acknowledged with acks=-1 is in the final log of its
  partition, at the offset it was acknowledged at (docs/replication.md: an acks=-1 produce
  survives the loss of every in-sync replica but one). Writes acknowledged with acks=1 (by
  the leader alone) promise less: they are not checked, but reported (below).
- `seen_kept`: every message a reader was handed (below the high watermark of the leader it
  read from) is in the final log at the same offset, with the same value; and each reader
  read each partition as one unbroken chain of offsets (each message starting where the one
  before ended), so none was skipped.
- `replicas_identical`: after the healing, every replica of a partition holds the same bytes
  below the leader's high watermark (sha256), which are also the bytes of the messages read
  from the leader; the final read is one unbroken chain from offset 0 to the high watermark.
- `one_leader_per_epoch`: no leader epoch of a partition had two leaders, in ZooKeeper's
  states as watched or in the brokers' logs (a broker takes writes only in the epoch a state
  gave it); a partition's leader epoch never went down as its state's version went up; the
  replicas agree on where each epoch starts below the high watermark.
- `no_unexplained_copies`: every value in a final log was sent by a producer, and stored at
  most as many times as it was sent (a retried send may be stored twice: "at least once";
  one never retried, never). Unknown writes (not acknowledged: timeouts, lost connections)
  may be there or not; how many are, and the duplicates, are counted in "stats".

Reported, not checked (verdict["reported"], and stats): `acks1_lost`, the writes acknowledged
with acks=1 that are not in the final log at their offset (lost, or found elsewhere), each
with the fault it was acknowledged during or up to AFTER_FAULT_S after (`by_fault`:
"cut_leader_zk", ...; "none" when no fault was that close: a paused leader's writes are
acknowledged after its SIGCONT). A leader that can no longer confirm it leads takes no writes at any acks
(docs/replication.md), so even these should be few.

The checker trusts nothing but the history: it reads no broker and no file.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from logbroker.protocol.message import encode_message

from .history import History

EXAMPLES = 20
AFTER_FAULT_S = 5.0  # an acks=1 write lost this long after a fault ended is the fault's


class _Check:
    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.examples: list[str] = []

    def fail(self, what: str) -> None:
        self.count += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(what)

    def result(self) -> dict[str, Any]:
        return {"ok": self.count == 0, "count": self.count, "examples": self.examples}


def _final_index(history: History) -> dict[int, dict[str, Any]]:
    """partition -> {"at": {offset: (next, value)}, "where": {value: [offsets]}, ...}."""
    out: dict[int, dict[str, Any]] = {}
    for key, final in history.get("final", {}).items():
        at: dict[int, tuple[int, str]] = {}
        where: dict[str, list[int]] = defaultdict(list)
        for offset, next_offset, value in final["messages"]:
            at[offset] = (next_offset, value)
            where[value].append(offset)
        out[int(key)] = {"at": at, "where": where, **final}
    return out


def check(history: History) -> dict[str, Any]:
    final = _final_index(history)
    partitions = range(int(history["meta"]["partitions"]))
    checks = [
        _acknowledged_kept(history, final),
        _seen_kept(history, final),
        _replicas_identical(history, final, partitions),
        _one_leader_per_epoch(history, final, partitions),
    ]
    copies, copy_stats = _no_unexplained_copies(history, final)
    checks.append(copies)
    results = {c.name: c.result() for c in checks}
    missing = [p for p in partitions if p not in final]
    if missing:
        results["final_read"] = {
            "ok": False,
            "count": len(missing),
            "examples": [f"partition {p} was not read at the end" for p in missing],
        }
    if not history.get("recovered", False):
        results["recovered"] = {
            "ok": False,
            "count": 1,
            "examples": [history.get("recovery", "the cluster did not recover")],
        }
    acks1 = _acks1_lost(history, final)
    return {
        "valid": all(r["ok"] for r in results.values()),
        "checks": results,
        "reported": {"acks1_lost": acks1},
        "stats": {
            **_stats(history, final),
            "acks1_lost": acks1["count"],
            "acks1_found_elsewhere": acks1["found_elsewhere"],
            **copy_stats,
        },
    }


def _acks(op: dict[str, Any]) -> int:
    return int(op.get("acks", -1))  # histories written before acks=1 writers: all -1


def _not_kept(op: dict[str, Any], final: dict[int, dict[str, Any]]) -> str | None:
    """None when an acknowledged write is in the final log at its offset (or its partition
    was not read: "final_read" says so), else what became of it."""
    p, value, offset = op["partition"], op["value"], op["offset"]
    log = final.get(p)
    if log is None:
        return None
    found = log["at"].get(offset)
    if found is not None and found[1] == value:
        return None
    elsewhere = log["where"].get(value)
    if elsewhere:
        return f"found at offset(s) {elsewhere} instead"
    return "lost" + (f" (offset {offset} holds {found[1]})" if found is not None else "")


def _acknowledged_kept(history: History, final: dict[int, dict[str, Any]]) -> _Check:
    result = _Check("acknowledged_kept")
    for op in history.get("ops", []):
        if op["type"] != "ok" or _acks(op) != -1:
            continue
        what = _not_kept(op, final)
        if what is not None:
            result.fail(
                f"{op['value']} acknowledged at p{op['partition']} offset {op['offset']} by "
                f"{op['client']} at {op['complete']:.3f}: {what}"
            )
    return result


def _acks1_lost(history: History, final: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The acks=1 writes acknowledged and not kept at their offset, by the fault in force
    when they were acknowledged (reported, not checked)."""
    start = history["meta"]["started"]
    faults = sorted(
        (f for f in history.get("faults", []) if not f.get("skipped")), key=lambda f: f["start"]
    )
    lost = _Check("acks1_lost")
    by_fault: Counter[str] = Counter()
    elsewhere = 0
    for op in history.get("ops", []):
        if op["type"] != "ok" or _acks(op) != 1:
            continue
        what = _not_kept(op, final)
        if what is None:
            continue
        elsewhere += what.startswith("found")
        t = op["complete"]
        last = [f for f in faults if f["start"] <= t]  # faults run one at a time
        fault = last[-1] if last and t <= last[-1]["end"] + AFTER_FAULT_S else None
        by_fault[fault["kind"] if fault else "none"] += 1
        when = "(no fault then)"
        if fault is not None:
            when = (
                f"(during {fault['kind']} of broker {fault['target']})"
                if t <= fault["end"]
                else f"({t - fault['end']:.1f} s after {fault['kind']} of broker "
                f"{fault['target']} ended)"
            )
        lost.fail(
            f"{op['value']} acknowledged (acks=1) at p{op['partition']} offset {op['offset']} "
            f"by {op['client']} at {t - start:.1f} s {when}: {what}"
        )
    return {
        "count": lost.count,
        "found_elsewhere": elsewhere,
        "by_fault": dict(sorted(by_fault.items())),
        "examples": lost.examples,
    }


def _seen_kept(history: History, final: dict[int, dict[str, Any]]) -> _Check:
    result = _Check("seen_kept")
    expected: dict[tuple[str, int], int] = {}
    for read in history.get("reads", []):
        p, value, offset = read["partition"], read["value"], read["offset"]
        chain = (read["client"], p)
        if expected.get(chain, 0) != offset:
            result.fail(
                f"{read['client']} read p{p} at offset {offset} after a message ending at "
                f"{expected.get(chain, 0)}: the chain of offsets broke"
            )
        expected[chain] = read["next"]
        log = final.get(p)
        if log is None:
            continue
        found = log["at"].get(offset)
        if found == (read["next"], value):
            continue
        result.fail(
            f"{value} read by {read['client']} at p{p} offset {offset} at {read['t']:.3f}: "
            + (
                f"later {found[1]} there"
                if found is not None
                else f"gone (the final log ends at {log['high_watermark']})"
            )
        )
    return result


def log_bytes(values: Iterable[str]) -> bytes:
    """The stored bytes of these values, one uncompressed message each, as the producers of
    workload.py send them."""
    return b"".join(encode_message(v.encode()) for v in values)


def _replicas_identical(
    history: History, final: dict[int, dict[str, Any]], partitions: range
) -> _Check:
    result = _Check("replicas_identical")
    for p in partitions:
        log = final.get(p)
        if log is None:
            continue
        hw = log["high_watermark"]
        at = 0
        for offset, next_offset, _ in log["messages"]:
            if offset != at:
                result.fail(f"p{p}: the final read jumps from offset {at} to {offset}")
            at = next_offset
        if at != hw:
            result.fail(f"p{p}: the final read ends at {at}, the high watermark is {hw}")
        read_sha = hashlib.sha256(log_bytes(v for _, _, v in log["messages"])).hexdigest()
        replicas = history.get("replicas", {}).get(str(p), {})
        if len(replicas) < len(history["meta"]["brokers"]):
            result.fail(f"p{p}: replicas of brokers {sorted(replicas)} only were compared")
        for broker, replica in sorted(replicas.items()):
            if replica["end"] < hw:
                result.fail(
                    f"p{p}: broker {broker}'s replica ends at {replica['end']}, below the "
                    f"high watermark {hw}"
                )
            elif replica["sha256"] != read_sha or replica.get("first_difference") is not None:
                result.fail(
                    f"p{p}: broker {broker}'s replica differs below the high watermark {hw}"
                    + (
                        f" from offset {replica['first_difference']}"
                        if replica.get("first_difference") is not None
                        else " from what its leader served"
                    )
                )
    return result


def _one_leader_per_epoch(
    history: History, final: dict[int, dict[str, Any]], partitions: range
) -> _Check:
    result = _Check("one_leader_per_epoch")
    leaders: dict[tuple[int, int], set[str]] = defaultdict(set)
    for state in history.get("states", []):
        if state["leader"] >= 0:
            leaders[(state["partition"], state["epoch"])].add(f"{state['leader']} (ZooKeeper)")
    for p, epoch, broker in history.get("leader_claims", []):
        leaders[(p, epoch)].add(f"{broker} (its log)")
    for (p, epoch), names in sorted(leaders.items()):
        brokers = {name.split()[0] for name in names}
        if len(brokers) > 1:
            result.fail(f"p{p} leader epoch {epoch} had leaders {sorted(names)}")
    last: dict[int, tuple[int, int]] = {}
    for state in sorted(history.get("states", []), key=lambda s: (s["partition"], s["version"])):
        p = state["partition"]
        if p in last and state["epoch"] < last[p][1]:
            result.fail(
                f"p{p}: leader epoch {last[p][1]} at version {last[p][0]}, then "
                f"{state['epoch']} at version {state['version']}"
            )
        last[p] = (state["version"], state["epoch"])
    for p in partitions:
        log = final.get(p)
        if log is None:
            continue
        hw = log["high_watermark"]
        seen: dict[str, list[tuple[int, int]]] = {}
        for broker, replica in history.get("replicas", {}).get(str(p), {}).items():
            seen[broker] = [(e, s) for e, s in replica["epochs"] if s < hw]
        if len({tuple(v) for v in seen.values()}) > 1:
            result.fail(f"p{p}: the replicas' epochs below {hw} differ: {seen}")
    return result


def _no_unexplained_copies(
    history: History, final: dict[int, dict[str, Any]]
) -> tuple[_Check, dict[str, Any]]:
    result = _Check("no_unexplained_copies")
    ops = {op["value"]: op for op in history.get("ops", [])}
    stored: Counter[str] = Counter()
    for log in final.values():
        for _, _, value in log["messages"]:
            stored[value] += 1
    duplicated = retried_duplicates = 0
    for value, count in sorted(stored.items()):
        op = ops.get(value)
        if op is None:
            result.fail(f"{value} is stored ({count} times) but no producer sent it")
            continue
        if count > 1:
            duplicated += 1
            if op["attempts"] > 1:
                retried_duplicates += 1
        if count > op["attempts"]:
            result.fail(
                f"{value} is stored {count} times, sent {op['attempts']} time(s) "
                f"({op['type']}, p{op['partition']})"
            )
    unknown = [op for op in ops.values() if op["type"] != "ok"]
    stats = {
        "unknown": len(unknown),
        "unknown_stored": sum(1 for op in unknown if stored[op["value"]]),
        "unknown_absent": sum(1 for op in unknown if not stored[op["value"]]),
        "duplicated_values": duplicated,
        "duplicated_after_retry": retried_duplicates,
    }
    return result, stats


def _stats(history: History, final: dict[int, dict[str, Any]]) -> dict[str, Any]:
    ops = history.get("ops", [])
    faults: Counter[str] = Counter()
    effective: Counter[str] = Counter()
    for event in history.get("faults", []):
        if not event.get("skipped"):
            faults[event["kind"]] += 1
            effective[event["kind"]] += bool(event.get("took_effect"))
    epochs = {(s["partition"], s["epoch"]) for s in history.get("states", [])}
    return {
        "writes": len(ops),
        "acknowledged": sum(1 for op in ops if op["type"] == "ok" and _acks(op) == -1),
        "acks1_writes": sum(1 for op in ops if _acks(op) == 1),
        "acks1_acknowledged": sum(1 for op in ops if op["type"] == "ok" and _acks(op) == 1),
        "retried_sends": sum(1 for op in ops if op["attempts"] > 1),
        "reads": len(history.get("reads", [])),
        "read_errors": len(history.get("read_errors", [])),
        "stored": sum(len(log["messages"]) for log in final.values()),
        "faults": dict(sorted(faults.items())),
        "faults_with_effect": dict(sorted(effective.items())),
        "faults_skipped": sum(1 for e in history.get("faults", []) if e.get("skipped")),
        "leader_epochs_seen": len(epochs),
    }


def summary(verdict: dict[str, Any]) -> str:
    """A few lines for people: the verdict, the figures, the first violations."""
    stats = verdict["stats"]
    acks1 = verdict["reported"]["acks1_lost"]
    lines = [
        "VALID" if verdict["valid"] else "INVALID",
        f"  writes {stats['writes']}: acknowledged {stats['acknowledged']} with acks=-1 and "
        f"{stats['acks1_acknowledged']} with acks=1 (of {stats['acks1_writes']}), unknown "
        f"{stats['unknown']} ({stats['unknown_stored']} stored, {stats['unknown_absent']} not), "
        f"retried {stats['retried_sends']}",
        f"  acks=1 acknowledged and lost (reported, not checked): {acks1['count']}"
        + (
            " ("
            + ", ".join(f"{kind} {n}" for kind, n in acks1["by_fault"].items())
            + (
                f"; {acks1['found_elsewhere']} found at another offset"
                if acks1["found_elsewhere"]
                else ""
            )
            + ")"
            if acks1["count"]
            else ""
        ),
        f"  stored {stats['stored']}, duplicated values {stats['duplicated_values']} "
        f"(after a retry: {stats['duplicated_after_retry']}); reads {stats['reads']}, "
        f"reader errors {stats['read_errors']}",
        "  faults (with effect): "
        + (
            ", ".join(
                f"{k} {v} ({stats['faults_with_effect'].get(k, 0)})"
                for k, v in stats["faults"].items()
            )
            or "none"
        )
        + (f" (skipped {stats['faults_skipped']})" if stats["faults_skipped"] else "")
        + f"; leader epochs seen {stats['leader_epochs_seen']}",
    ]
    for name, result in verdict["checks"].items():
        lines.append(f"  {name}: " + ("ok" if result["ok"] else f"{result['count']} violation(s)"))
        lines += [f"    {example}" for example in result["examples"][:5]]
    lines += [f"    acks=1 lost: {example}" for example in acks1["examples"][:5]]
    return "\n".join(lines)
