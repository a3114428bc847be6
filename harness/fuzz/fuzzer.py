"""The fuzzer's side of a run: one connection, the requests sent on it and their answers.

`Fuzzer` loads known data with acked produces, sends one valid or mutated request at a
time, each followed where it can be by a sync METADATA request with a unique topic so
that the end of its effects is known (one stream in ten is sent in pieces, so that the
broker sees frames split across reads), checks liveness on a fresh connection and fetches
the known data back at the end. Everything it sees is counted in a `FuzzReport`.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable

from logbroker.protocol.errors import LogbrokerError
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import (
    AckedProduceRequest,
    FetchRequest,
    MetadataRequest,
    MultiProduceRequest,
    ProduceRequest,
    Request,
    encode_request,
)
from logbroker.protocol.responses import (
    decode_acked_produce_response,
    decode_fetch_response,
    decode_metadata_response,
)

from .answers import check_response
from .connection import BadResponse, Closed, Connection
from .frames import split_frames
from .mutators import mutate
from .report import FuzzReport
from .requests import PARTITIONS, RequestGenerator, Rng

BROKER_OVERRIDES = {"num.partitions": str(PARTITIONS)}


def _expects_response(req: Request) -> bool:
    return not isinstance(req, ProduceRequest | MultiProduceRequest)


class Fuzzer:
    """The traffic of one run against the broker at `address`, counted in `report`."""

    def __init__(
        self,
        address: tuple[str, int],
        rng: Rng,
        report: FuzzReport,
        topics: tuple[str, ...],
        partitions: int,
        timeout: float,
        max_request_bytes: int,
    ) -> None:
        self.address = address
        self.rng = rng
        self.report = report
        self.topics = topics
        self.partitions = partitions
        self.timeout = timeout
        self.max_request_bytes = max_request_bytes
        self.gen = RequestGenerator(rng, topics, partitions)
        self.conn: Connection | None = None
        self.sync_counter = 0
        self.recent: deque[str] = deque(maxlen=8)  # hex of the last requests, for a crash
        self.mutations: Counter[str] = Counter()
        self.framing: Counter[str] = Counter()

    # -- connections ------------------------------------------------------------------

    def connection(self) -> Connection:
        if self.conn is None:
            try:
                self.conn = Connection(self.address, self.timeout)
            except OSError as exc:
                raise Closed(f"cannot connect: {exc}") from None
            self.report.connections_opened += 1
        return self.conn

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def sync_frame(self) -> tuple[bytes, str]:
        self.sync_counter += 1
        marker = f"fuzz.sync.{self.sync_counter}"
        return encode_request(MetadataRequest((marker,))), marker

    @staticmethod
    def is_sync(body: bytes, marker: str) -> bool:
        try:
            meta = decode_metadata_response(body)
        except LogbrokerError:
            return False
        return len(meta.topics) == 1 and meta.topics[0].topic == marker

    # -- load -------------------------------------------------------------------------

    def load(self) -> list[tuple[str, int, int, bytes]]:
        """Acked, fsynced produces of every kind of set to every partition."""
        known = []
        produces = []
        for topic in self.topics:
            for partition in range(self.partitions):
                for magic, codec in ((0, 0), (1, 0), (1, 1), (1, 2), (1, 0), (0, 0)):
                    payloads = [
                        b"known %s-%d %d" % (topic.encode(), partition, i) for i in range(3)
                    ]
                    produces.append(
                        ProduceRequest(topic, partition, build_message_set(payloads, codec, magic))
                    )
        conn = self.connection()
        conn.send(encode_request(AckedProduceRequest(True, tuple(produces))))
        body = conn.read_frame(time.monotonic() + 30)
        if body is None:
            raise RuntimeError("the broker did not answer the loading PRODUCE_ACK")
        results = decode_acked_produce_response(body)
        for req, result in zip(produces, results, strict=True):
            if result.error:
                raise RuntimeError(
                    f"loading {req.topic}-{req.partition} failed with error {result.error}: "
                    f"start the broker with {BROKER_OVERRIDES}"
                )
            data = bytes(req.messages)
            known.append((req.topic, req.partition, result.offset, data))
            self.gen.add_boundary(req.topic, req.partition, result.offset)
            self.gen.add_boundary(req.topic, req.partition, result.next_offset)
        return known

    # -- one request ------------------------------------------------------------------

    def send_valid(self) -> None:
        report = self.report
        req = self.gen.request()
        frame = encode_request(req)
        self.recent.append(f"valid {type(req).__name__} {frame.hex()}")
        report.valid_requests += 1
        try:
            conn = self.connection()
            if not _expects_response(req):
                sync, marker = self.sync_frame()
                conn.send(frame + sync)
                self.await_sync(conn, marker, valid=True)
                return
            conn.send(frame)
            body = conn.read_frame(time.monotonic() + self.timeout)
        except Closed as exc:
            self.drop()
            report.connections_closed_by_broker += 1
            report.valid_failures += 1
            report.note(f"the broker closed the connection on a valid request ({exc}): {req!r}")
            return
        except BadResponse as exc:
            self.drop()
            report.valid_failures += 1
            report.note(f"bad response to a valid request ({exc}): {req!r}")
            return
        if body is None:
            self.drop()
            report.timeouts += 1
            report.valid_failures += 1
            report.note(f"no answer to a valid request in {self.timeout:g} s: {req!r}")
            return
        report.responses_received += 1
        problem = check_response(req, body, self.gen)
        if problem:
            report.valid_failures += 1
            report.note(f"{problem}: {req!r}")

    def send_mutated(self) -> None:
        report = self.report
        req = self.gen.request()
        frame, names = mutate(self.rng, encode_request(req))
        self.mutations.update(names)
        report.mutated_requests += 1
        sync, marker = self.sync_frame()
        stream = frame + sync
        frames, ending = split_frames(stream, self.max_request_bytes)
        aligned = ending == "complete" and frames[-1] == (len(frame), len(stream))
        self.framing["sync aligned" if aligned else ending] += 1
        self.recent.append(f"mutated {type(req).__name__} {'+'.join(names)} {frame.hex()}")
        if self.conn is not None and self.rng.random() < 0.1:
            self.drop()  # a fresh connection now and then, even when this one is fine
        try:
            conn = self.connection()
            cuts: list[int] = []
            if len(stream) > 1 and self.rng.random() < 0.1:  # frames split across reads
                cuts = self.rng.sample(range(1, len(stream)), min(3, len(stream) - 1))
                report.split_sends += 1
            conn.send(stream, cuts)
            if aligned:
                self.await_sync(conn, marker, valid=False)
            else:
                if ending != "bad_size":
                    conn.half_close()  # the broker would wait for the rest of a frame
                self.await_close(conn, ending)
        except Closed:
            self.drop()
            report.connections_closed_by_broker += 1

    def await_sync(self, conn: Connection, marker: str, valid: bool) -> None:
        """Read responses until the sync answer; on close or timeout drop the connection."""
        report = self.report
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                body = conn.read_frame(deadline)
                if body is None:
                    self.drop()
                    report.timeouts += 1
                    self.timed_out()
                    if valid:
                        report.valid_failures += 1
                        report.note("no answer to the sync after a valid produce")
                    return
                if self.is_sync(body, marker):
                    return
                report.responses_received += 1
        except Closed:
            self.drop()
            report.connections_closed_by_broker += 1
            if valid:
                report.valid_failures += 1
                report.note(
                    f"the broker closed the connection on a valid produce: {self.recent[-1]}"
                )
        except BadResponse as exc:
            self.drop()
            report.note(f"bad response frame ({exc}) after {self.recent[-1]}")

    def timed_out(self) -> None:
        if len(self.report.timeout_samples) < 20:
            self.report.timeout_samples.append(self.recent[-1])

    def await_close(self, conn: Connection, ending: str) -> None:
        """Read responses until the broker closes the connection (or give up on it)."""
        report = self.report
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                body = conn.read_frame(deadline)
                if body is None:
                    report.timeouts += 1
                    self.timed_out()
                    break
                report.responses_received += 1
        except Closed:
            if ending == "bad_size":
                report.connections_closed_by_broker += 1
            else:
                report.closed_after_client_eof += 1
        except BadResponse as exc:
            report.note(f"bad response frame ({exc}) after {self.recent[-1]}")
        self.drop()

    # -- liveness ---------------------------------------------------------------------

    def alive(self) -> str | None:
        """None if a fresh connection gets a METADATA answer naming our topics; else why not."""
        try:
            conn = Connection(self.address, self.timeout)
        except OSError as exc:
            return f"cannot connect: {exc}"
        try:
            conn.send(encode_request(MetadataRequest(self.topics)))
            body = conn.read_frame(time.monotonic() + max(self.timeout, 5.0))
            if body is None:
                return "no METADATA answer"
            meta = decode_metadata_response(body)
            names = [t.topic for t in meta.topics]
            if names != list(self.topics) or any(len(t.partitions) == 0 for t in meta.topics):
                return f"METADATA answered {meta!r}"
            return None
        except (Closed, BadResponse, LogbrokerError) as exc:
            return f"METADATA failed: {exc}"
        finally:
            conn.close()

    def check_liveness(self, broker_alive: Callable[[], bool] | None) -> bool:
        """Count a crash if the broker died or does not answer; False if it is gone for good."""
        report = self.report
        report.liveness_checks += 1
        dead = broker_alive is not None and not broker_alive()
        reason = "the broker process died" if dead else self.alive()
        if reason is None:
            return True
        report.crashes += 1
        report.note(
            f"broker crash after {report.requests_sent} requests: {reason}; last requests: "
            + " | ".join(self.recent)
        )
        self.drop()
        if dead:
            return False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if self.alive() is None:
                return True
        return False

    def verify_known(self, known: list[tuple[str, int, int, bytes]]) -> None:
        """Fetch every set loaded at the start back: the same bytes at the same offset."""
        report = self.report
        self.drop()
        for topic, partition, offset, data in known:
            report.known_sets += 1
            try:
                conn = self.connection()
                conn.send(encode_request(FetchRequest(topic, partition, offset, len(data))))
                body = conn.read_frame(time.monotonic() + max(self.timeout, 5.0))
            except (Closed, BadResponse) as exc:
                self.drop()
                body = None
                report.note(f"re-fetching {topic}-{partition}@{offset} failed: {exc}")
            if body is None:
                report.known_sets_mismatched += 1
                continue
            fetched = decode_fetch_response(body)
            if fetched.error or bytes(fetched.messages) != data:
                report.known_sets_mismatched += 1
                report.note(
                    f"{topic}-{partition}@{offset}: fetched set differs from the one loaded"
                )
        self.drop()
