"""All the logs of one broker (`log/LogManager.scala`).

    <log.dir>/
        .kafka_cleanshutdown     present only after a clean shutdown; removed at start
        <topic>-<partition>/     one directory per partition log (see log.py)

At start every partition directory is loaded. A directory whose name is not
`<legal topic>-<partition>` (e.g. `emoji😀-0`, left by a version that allowed such names) is
named in a warning and skipped, never served and never fatal for the other logs. Without the
clean-shutdown marker every segment of every log is recovered (recovery.py) before anything is
served; with it, the segments whose files changed after the marker was written (bytes flipped
or a file cut while the broker was down). Topics are
created on their first produce with `num.partitions` partitions, or the count that
`topic.partition.count.map` gives. Two background threads keep the logs: the flusher
(fsync every `log.default.flush.interval.ms`, and at once when a log has
`log.flush.interval` unflushed messages) and the cleaner (retention every
`log.cleanup.interval.mins`, by age `log.retention.hours` and by size `log.retention.size`).
Both call `flush_due`/`cleanup`, which tests call directly with an injected clock.

Replicas of replicated partitions (docs/replication.md) live here too, as `<topic>-<p>` with
the global partition number p. What makes a directory a replica's is a file that the
replication package writes into it before it opens the log (`replica_marker`, its epoch file;
the broker names it): this module only looks for the name. Replica logs are kept apart from
0.7 topics' logs: `lookup`, `get_log`, `get_or_create_log` and `topics()` are 0.7's (a produce
never creates a replica), `replica_log`, `open_replica` and `replicated_topics()` the
replicas'; flushing, retention and shutdown cover both. A replica's log is in its topic's
message format (docs/protocol.md, "Message formats"): 0.7's `Log` (`*.kafka` segments, byte
offsets) or 0.8's `LogicalLog` (`*.log` and `*.index`, logical offsets); at start the files
say which, and `open_replica` is told.
"""

from __future__ import annotations

import logging
import random
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..config import BrokerConfig
from ..protocol.errors import WrongPartitionError
from ..protocol.topics import parse_partition_dir_name, partition_dir_name, validate_topic
from .log import Clock, Log, LogConfig
from .logical_log import LogicalLog
from .open_files import OpenFiles
from .segment import LogSegment

PartitionLog = Log | LogicalLog  # a replica's, in its topic's format

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
HOUR_MS = 3600 * 1000


def _older_than(cutoff_ms: int) -> Callable[[LogSegment], bool]:
    return lambda segment: segment.last_modified_ms < cutoff_ms


def open_files_capacity(configured: int) -> int:
    """max.open.segment.files, but at most half the descriptor limit: the other half is for
    client connections, ZooKeeper and everything else the broker opens."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max(1, configured)
    return max(1, min(configured, soft // 2))


def system_clock() -> int:
    return time.time_ns() // 1_000_000


class LogManager:
    """Loads, creates, flushes and cleans every partition log under `log.dir`."""

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock = system_clock,
        on_new_topic: Callable[[str, int], None] | None = None,
        log_dir: Path | None = None,
        replica_marker: str | None = None,
    ) -> None:
        """`replica_marker`: the file that marks a replica's directory (see the module doc);
        None: this broker holds no replicas."""
        self.config = config
        self.replica_marker = replica_marker
        self.clock = clock
        self.log_dir = Path(log_dir) if log_dir is not None else config.log_path
        self.on_new_topic = on_new_topic
        self.log_config = LogConfig(
            segment_bytes=config.log_file_size,
            roll_ms=config.log_roll_hours * HOUR_MS,
            flush_interval_messages=config.log_flush_interval,
            flush_interval_ms=config.log_default_flush_interval_ms,
        )
        self.files = OpenFiles(open_files_capacity(config.max_open_segment_files))
        self._logs: dict[tuple[str, int], Log] = {}  # 0.7 topics' partitions
        self._replicas: dict[tuple[str, int], PartitionLog] = {}  # replicas' logs
        self._create_lock = threading.Lock()
        self._flush_wanted: set[PartitionLog] = set()
        self._wake = threading.Condition()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.recovered: list[PartitionLog] = []
        self.skipped: dict[str, str] = {}  # directory in log.dir that is not a log -> why
        self._load()

    # -- start and stop ---------------------------------------------------------------

    def _load(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        marker = self.log_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        # what changed after the clean shutdown was not checked by this broker: check it now
        marked_ns = marker.stat().st_mtime_ns if clean else None
        for path in sorted(self.log_dir.iterdir()):
            if not path.is_dir():
                continue
            try:
                topic, partition = parse_partition_dir_name(path.name)
            except ValueError as exc:  # left by an older version, or by hand: serve the rest
                self.skipped[path.name] = str(exc)
                log.warning("skipped directory %s in log.dir: %s; it is not served", path, exc)
                continue
            replica = self.replica_marker is not None and (path / self.replica_marker).exists()
            part_log = self._open_log(
                topic,
                partition,
                recover=not clean,
                checked_ns=marked_ns,
                replica=replica,
                message_format="0.8" if replica and any(path.glob("*.log")) else "0.7",
            )
            if part_log.recovery is not None and part_log.recovery.truncated:
                self.recovered.append(part_log)
        # Remove the marker only now: a crash during loading must recover again next time.
        if clean:
            marker.unlink()
        loaded = len(self._logs) + len(self._replicas)
        if clean or not loaded:  # a new, empty log.dir has nothing to recover
            log.info(
                "loaded %d logs from %s (%s); at most %d segment files open at once",
                loaded,
                self.log_dir,
                "clean shutdown" if clean else "no logs yet",
                self.files.capacity,
            )
        else:
            log.warning(
                "loaded %d logs from %s after an unclean shutdown (no %s): every segment of "
                "each was validated; %d were cut",
                loaded,
                self.log_dir,
                CLEAN_SHUTDOWN_MARKER,
                len(self.recovered),
            )

    def _open_log(
        self,
        topic: str,
        partition: int,
        recover: bool,
        checked_ns: int | None = None,
        replica: bool = False,
        message_format: str = "0.7",
    ) -> PartitionLog:
        """`recover`: check every segment; `checked_ns`: those modified after then."""
        kind = LogicalLog if message_format == "0.8" else Log
        part_log = kind(
            self.log_dir / partition_dir_name(topic, partition),
            topic,
            partition,
            self.log_config,
            self.clock,
            recover=recover,
            modified_after_ns=checked_ns,
            request_flush=self._want_flush,
            files=self.files,
        )
        if replica:
            self._replicas[(topic, partition)] = part_log
        else:
            assert isinstance(part_log, Log)
            self._logs[(topic, partition)] = part_log
        return part_log

    def start_background(self) -> None:
        """Start the flusher and cleaner threads."""
        for name, target in (("log-flusher", self._flusher), ("log-cleaner", self._cleaner)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def shutdown(self) -> None:
        """Stop the threads, flush and close every log, and write the clean-shutdown marker."""
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
        for part_log in self.logs():
            part_log.flush()
            part_log.close()
        (self.log_dir / CLEAN_SHUTDOWN_MARKER).touch()
        log.info("flushed and closed %d logs; clean shutdown marked", len(self.logs()))

    # -- finding and creating logs ----------------------------------------------------

    def logs(self) -> list[PartitionLog]:
        """Every log here: 0.7 topics' partitions and replicas."""
        return [*self._logs.values(), *self._replicas.values()]

    def topics(self) -> list[str]:
        """0.7's topics here (replicated ones are not: replicated_topics)."""
        return sorted({topic for topic, _ in self._logs})

    def replicated_topics(self) -> list[str]:
        return sorted({topic for topic, _ in self._replicas})

    def partition_dir(self, topic: str, partition: int) -> Path:
        """Where a partition's log lives (validated name)."""
        validate_topic(topic)
        return self.log_dir / partition_dir_name(topic, partition)

    def replica_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._replicas.get((topic, partition))

    def open_replica(self, topic: str, partition: int, message_format: str = "0.7") -> PartitionLog:
        """The log of this broker's replica of `topic`'s `partition`, in `message_format`,
        opened if it is not. Its directory must hold the replica marker already (the
        replication package writes it first); a 0.7 topic's partition of that name, or a
        replica in the other format that holds data, is refused."""
        directory = self.partition_dir(topic, partition)
        if self.replica_marker is None or not (directory / self.replica_marker).exists():
            raise WrongPartitionError(f"{directory} is not marked as a replica's")
        with self._create_lock:
            if (topic, partition) in self._logs:
                raise WrongPartitionError(
                    f"{topic}-{partition} is a 0.7 topic's partition here, not a replica"
                )
            found = self._replicas.get((topic, partition))
            if found is not None and found.message_format.name == message_format:
                return found
            if found is not None:  # opened at start from its files: in the other format
                if found.end_offset or found.size_in_bytes:
                    raise WrongPartitionError(
                        f"{directory} holds {found.message_format.name}-format data, but "
                        f"{topic} is a {message_format}-format topic"
                    )
                found.close()  # empty (made, then stopped before its first segment)
                for stray in directory.iterdir():
                    if stray.suffix in (".kafka", ".log", ".index"):
                        stray.unlink()
            part_log = self._open_log(
                topic, partition, recover=False, replica=True, message_format=message_format
            )
        log.info("opened replica %s", part_log.name)
        return part_log

    def partition_count(self, topic: str) -> int:
        """Partitions of `topic` here: the configured count, or more if the disk has more."""
        existing = [p for t, p in self._logs if t == topic]
        return max(self.config.partitions_for(topic), max(existing, default=-1) + 1)

    def check_partition(self, topic: str, partition: int) -> None:
        validate_topic(topic)
        count = self.partition_count(topic)
        if not 0 <= partition < count:
            raise WrongPartitionError(
                f"partition {partition} of topic {topic!r} does not exist "
                f"(this broker has partitions 0 to {count - 1})"
            )

    def choose_partition(self, topic: str) -> int:
        """A random partition, for produce requests that ask for partition -1."""
        return random.randrange(self.partition_count(topic))

    def lookup(self, topic: str, partition: int) -> Log | None:
        """The log if it exists, with no checks at all: the hot path of every produce."""
        return self._logs.get((topic, partition))

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The log if it exists; validates the topic and partition; never creates."""
        found = self._logs.get((topic, partition))
        if found is None:
            self.check_partition(topic, partition)
        return found

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        found = self._logs.get((topic, partition))
        if found is not None:
            return found
        self.check_partition(topic, partition)
        with self._create_lock:
            found = self._logs.get((topic, partition))
            if found is not None:
                return found
            new_topic = not any(t == topic for t, _ in self._logs)
            part_log = self._open_log(topic, partition, recover=False)
            assert isinstance(part_log, Log)  # a 0.7 topic's
            log.info("created log %s", part_log.name)
        if new_topic and self.on_new_topic is not None:
            self.on_new_topic(topic, self.partition_count(topic))
        return part_log

    def create_topic(self, topic: str, partitions: int) -> int:
        """Create partitions 0..partitions-1 of `topic` (never fewer than it has); returns the
        count. Partition directories on disk are what makes a count above the configured one
        stick across restarts."""
        validate_topic(topic)
        most = self.config.max_partitions_per_topic
        if not 1 <= partitions <= most:
            raise WrongPartitionError(
                f"a topic has 1 to {most} partitions per broker (max.partitions.per.topic), "
                f"not {partitions}"
            )
        with self._create_lock:
            for partition in range(partitions):
                if (topic, partition) not in self._logs:
                    self._open_log(topic, partition, recover=False)
            count = self.partition_count(topic)
        log.info("topic %s has %d partitions here", topic, count)
        if self.on_new_topic is not None:
            self.on_new_topic(topic, count)
        return count

    # -- flushing ---------------------------------------------------------------------

    def _want_flush(self, part_log: PartitionLog) -> None:
        if part_log in self._flush_wanted:
            # Asked already and not taken yet (the flusher takes it under the lock, then
            # flushes): that flush covers this append too. While an fsync runs, every
            # socket read's append would otherwise wake the flusher again for nothing.
            return
        with self._wake:
            self._flush_wanted.add(part_log)
            self._wake.notify()

    def flush_due(self, now: int | None = None) -> list[PartitionLog]:
        """Flush logs asked for by message count, and those unflushed for too long."""
        now = self.clock() if now is None else now
        with self._wake:
            due = set(self._flush_wanted)
            self._flush_wanted.clear()
        for part_log in self.logs():
            if (
                part_log.unflushed_messages
                and now - part_log.last_flush_ms >= self.log_config.flush_interval_ms
            ):
                due.add(part_log)
        failed: list[tuple[PartitionLog, OSError]] = []
        for part_log in due:
            try:
                part_log.flush()
            except OSError as exc:
                failed.append((part_log, exc))
        if failed:  # one line per round, however many logs (they retry next round)
            log.error(
                "flushing %d logs failed, %s first: %s; they are tried again next round",
                len(failed),
                failed[0][0].name,
                failed[0][1],
            )
        return sorted(due, key=lambda lg: lg.name)

    def _flusher(self) -> None:
        interval = self.config.log_default_flush_scheduler_interval_ms / 1000
        while not self._stopping.is_set():
            with self._wake:
                if not self._flush_wanted:
                    self._wake.wait(timeout=interval)
            if self._stopping.is_set():
                return
            self.flush_due()

    # -- retention --------------------------------------------------------------------

    def retention_ms(self, topic: str) -> int:
        hours = self.config.topic_log_retention_hours.get(topic, self.config.log_retention_hours)
        return int(hours) * HOUR_MS

    def cleanup(self, now: int | None = None) -> list[LogSegment]:
        """Apply retention by age, then by size, to every log; returns what was deleted."""
        now = self.clock() if now is None else now
        deleted: list[LogSegment] = []
        for part_log in self.logs():
            deleted += part_log.delete_segments_while(
                _older_than(now - self.retention_ms(part_log.topic))
            )
            deleted += self._cleanup_by_size(part_log)
        for segment in deleted:
            log.info("retention deleted %s (%d bytes)", segment.path, segment.size)
        return deleted

    def _cleanup_by_size(self, part_log: PartitionLog) -> list[LogSegment]:
        limit = self.config.log_retention_size
        if limit < 0:
            return []
        excess = part_log.size_in_bytes - limit

        def over(segment: LogSegment) -> bool:
            nonlocal excess
            if excess - segment.size < 0:
                return False
            excess -= segment.size
            return True

        return list(part_log.delete_segments_while(over))

    def _cleaner(self) -> None:
        interval = self.config.log_cleanup_interval_mins * 60
        while not self._stopping.wait(timeout=interval):
            try:
                self.cleanup()
            except OSError:
                log.exception("retention failed")
