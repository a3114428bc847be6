"""Producer and simple consumer against real broker subprocesses (and ZooKeeper)."""

from __future__ import annotations

import threading
import time

import pytest

from logbroker.client.brokers import StaticBrokers, parse_broker_list
from logbroker.client.partitioner import default_partitioner, java_string_hash
from logbroker.client.producer import AsyncProducer, ProduceError, Producer
from logbroker.client.simple_consumer import MessageTooLargeError, SimpleConsumer
from logbroker.protocol.errors import MessageSizeTooLargeError, OffsetOutOfRangeError
from logbroker.protocol.requests import FetchRequest


def consume_all(broker, topic, partition, **kwargs):
    with SimpleConsumer(broker.host, broker.port, **kwargs) as consumer:
        return list(consumer.iter_messages(topic, partition, 0))


def wait_for_end(broker, topic, partition, end, timeout=10.0):
    deadline = time.monotonic() + timeout
    with SimpleConsumer(broker.host, broker.port) as consumer:
        while consumer.latest_offset(topic, partition) < end:
            assert time.monotonic() < deadline, f"{topic}-{partition} never reached {end}"
            time.sleep(0.01)


def test_partitioner_is_java_compatible_and_stable():
    assert java_string_hash("hello") == 99162322  # "hello".hashCode() in Java
    assert java_string_hash("") == 0
    assert java_string_hash("user-42") == java_string_hash("user-42")
    assert {default_partitioner("user-42", 8) for _ in range(20)} == {
        abs(java_string_hash("user-42")) % 8
    }
    assert parse_broker_list("0:127.0.0.1:9092,5:h:1") == [(0, "127.0.0.1", 9092), (5, "h", 1)]
    with pytest.raises(ValueError, match="broker list entry"):
        parse_broker_list("nonsense")


def test_acked_producer_reports_offsets_and_keys_pin_partitions(broker_factory):
    broker = broker_factory(num_partitions=4)
    with Producer(broker_list=f"{broker.host}:{broker.port}", num_partitions=4, acks="ack") as p:
        first = p.send("users", [b"a", b"bb"], key="user-7")
        second = p.send("users", b"ccc", key="user-7")
    partition = abs(java_string_hash("user-7")) % 4
    assert [(r.partition, r.offset, r.next_offset) for r in first] == [(partition, 0, 11 + 12)]
    assert [(r.partition, r.offset, r.next_offset) for r in second] == [(partition, 23, 36)]
    assert [m.payload for m in consume_all(broker, "users", partition)] == [b"a", b"bb", b"ccc"]


def test_a_fire_and_forget_list_is_one_set_in_one_request_to_one_partition(broker_factory):
    broker = broker_factory(num_partitions=4)
    unkeyed = [f"u{i}".encode() for i in range(50)]
    keyed = [f"k{i}".encode() for i in range(30)]
    with Producer(broker_list=f"{broker.host}:{broker.port}", num_partitions=4) as p:
        assert p.send("ff", unkeyed) == []
        assert (p.stats.sent_messages, p.stats.sent_sets, p.stats.sent_requests) == (50, 1, 1)
        assert p.send("ff", []) == [] and p.stats.sent_requests == 1  # nothing to send
        p.send("ff", keyed, key="user-7")
        p.send("ff", tuple(keyed[:3]), key="user-7")  # any other iterable: the general path
        assert (p.stats.sent_messages, p.stats.sent_sets, p.stats.sent_requests) == (83, 3, 3)
    pinned = abs(java_string_hash("user-7")) % 4
    wait_for_end(broker, "ff", pinned, sum(10 + len(m) for m in keyed + keyed[:3]))
    # one connection's sets are appended in order: the unkeyed one is in by now
    seen = {part: [m.payload for m in consume_all(broker, "ff", part)] for part in range(4)}
    assert seen[pinned][-33:] == keyed + keyed[:3]
    # the unkeyed list went whole, in order, to one partition (the pinned one, or another)
    holders = [p for p, payloads in seen.items() if unkeyed[0] in payloads]
    assert len(holders) == 1 and seen[holders[0]][:50] == unkeyed


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
def test_compressed_sets_round_trip_with_the_resume_rule(broker_factory, codec):
    broker = broker_factory()
    payloads = [f"event {i}".encode() * 5 for i in range(100)]
    with Producer(
        broker_list=f"{broker.host}:{broker.port}", compression_codec=codec, acks="fsync"
    ) as p:
        [result] = p.send("events", payloads)
    messages = consume_all(broker, "events", 0)
    assert [m.payload for m in messages] == payloads
    # inside the wrapper every message resumes at the wrapper, the last one after it
    assert {m.offset for m in messages} == {result.offset}
    assert [m.next_offset for m in messages[:-1]] == [result.offset] * 99
    assert messages[-1].next_offset == result.next_offset


def test_batches_hold_what_iter_messages_yields_and_chain_by_next_offset(broker_factory):
    broker = broker_factory()
    plain = [f"plain {i}".encode() * 20 for i in range(2000)]
    squeezed = [f"gz {i}".encode() * 5 for i in range(50)]
    with Producer(broker_list=f"{broker.host}:{broker.port}", acks="ack") as p:
        p.send("mixed", plain[:1000])
    with Producer(
        broker_list=f"{broker.host}:{broker.port}", compression_codec="gzip", acks="ack"
    ) as p:
        [wrapper] = p.send("mixed", squeezed)
    with Producer(broker_list=f"{broker.host}:{broker.port}", acks="ack") as p:
        [last] = p.send("mixed", plain[1000:])
    expected = consume_all(broker, "mixed", 0)
    with SimpleConsumer(broker.host, broker.port, fetch_size=64 * 1024) as consumer:
        batches = list(consumer.iter_batches("mixed", 0, 0))
    assert len(batches) > 3  # a 64 KiB fetch at a time
    assert [p for b in batches for p in b.payloads] == plain[:1000] + squeezed + plain[1000:]
    assert [o for b in batches for o in b.offsets] == [m.offset for m in expected]
    assert wrapper.offset in {o for b in batches for o in b.offsets}
    starts = [0] + [b.next_offset for b in batches[:-1]]
    assert [b.offsets[0] for b in batches] == starts  # each batch starts where the last ended
    assert batches[-1].next_offset == last.next_offset


def test_compressed_topics_only(broker_factory):
    broker = broker_factory()
    with Producer(
        broker_list=f"{broker.host}:{broker.port}",
        compression_codec="gzip",
        compressed_topics=["squeezed"],
        acks="ack",
    ) as p:
        plain = p.send("plain", [b"x" * 100] * 10)[0]
        squeezed = p.send("squeezed", [b"x" * 100] * 10)[0]
    assert plain.next_offset == 10 * 110  # ten plain messages
    assert squeezed.next_offset < 200  # one small gzip wrapper


def test_a_large_message_grows_the_fetch_size_up_to_the_maximum(broker_factory):
    broker = broker_factory(max_message_size=6_000_000, max_socket_request_bytes=10_000_000)
    big = bytes(range(256)) * (5 * 1024 * 1024 // 256)  # 5 MiB
    with Producer(broker_list=f"{broker.host}:{broker.port}", acks="ack") as p:
        p.send("big", [b"small"])
        p.send("big", big)
    messages = consume_all(broker, "big", 0, fetch_size=300 * 1024, max_fetch_size=8 << 20)
    assert [len(m.payload) for m in messages] == [5, len(big)]
    with pytest.raises(MessageTooLargeError) as info:
        consume_all(broker, "big", 0, fetch_size=300 * 1024, max_fetch_size=1 << 20)
    text = str(info.value)
    assert (
        "big-0" in text and "offset 15" in text and str(len(big) + 4 + 6) in text
    )  # entry: size, header, payload


def test_broker_refusal_is_an_error_for_the_acked_caller(broker_factory):
    broker = broker_factory(max_message_size=100)
    with Producer(broker_list=f"{broker.host}:{broker.port}", acks="ack") as p:
        with pytest.raises(MessageSizeTooLargeError, match="refused 1 messages"):
            p.send("t", b"y" * 101)
        assert p.stats.failed_messages == 1


def test_simple_consumer_requests(broker_factory):
    broker = broker_factory(num_partitions=2)
    with Producer(broker_list=f"{broker.host}:{broker.port}", num_partitions=2, acks="ack") as p:
        p.send_batch([("t", "k1", b"one"), ("t", "k1", b"two")])
    partition = abs(java_string_hash("k1")) % 2
    with SimpleConsumer(broker.host, broker.port) as c:
        assert c.offsets_before("t", partition, -1, 10) == [26, 0]
        assert c.earliest_offset("t", partition) == 0
        with pytest.raises(OffsetOutOfRangeError, match=f"t-{partition} at offset 999"):
            c.fetch("t", partition, 999)
        ok, bad = c.multifetch(
            [FetchRequest("t", partition, 0, 100), FetchRequest("t", partition, 999, 10)]
        )
        assert [m.payload for m in ok.messages()] == [b"one", b"two"]
        assert isinstance(bad, OffsetOutOfRangeError)
        meta = c.metadata(["t"])
        assert [(pm.partition, pm.latest_offset) for pm in meta.topics[0].partitions][
            partition
        ] == (partition, 26)


def test_waiting_fetch_returns_as_soon_as_data_arrives(broker_factory):
    broker = broker_factory()
    with Producer(broker_list=f"{broker.host}:{broker.port}", acks="ack") as p:
        p.send("live", b"first")
        # max_wait is 10 minutes and the socket gives up after 60 s: only a fetch woken by
        # the append answers in time (or one that arrives after it, which is fine too)
        with SimpleConsumer(broker.host, broker.port, timeout=60) as c:
            got: list = []
            fetcher = threading.Thread(
                target=lambda: got.extend(c.fetch_messages("live", 0, 15, max_wait_ms=600_000)[0])
            )
            fetcher.start()
            p.send("live", b"second")
            fetcher.join(90)
            assert not fetcher.is_alive(), "the waiting fetch was not woken by the append"
    assert [m.payload for m in got] == [b"second"]


def test_waiting_iterator_follows_the_log_message_by_message_and_in_bulk(broker_factory):
    # stop_at_end=False: small answers (caught up) are handed over before the next waiting
    # fetch goes out, full ones are pipelined; either way every message comes once, in order
    broker = broker_factory()
    with Producer(broker_list=f"{broker.host}:{broker.port}", acks="ack") as p:
        p.send("follow", b"m0")
        with SimpleConsumer(broker.host, broker.port, fetch_size=4096, timeout=60) as c:
            stream = c.iter_messages("follow", 0, 0, stop_at_end=False, max_wait_ms=600_000)
            assert next(stream).payload == b"m0"
            for i in range(1, 4):  # one at a time, each sent while the iterator waits
                p.send("follow", b"m%d" % i)
                assert next(stream).payload == b"m%d" % i
            bulk = [b"b%03d" % i for i in range(500)]  # many fetches of 4096 bytes
            p.send("follow", bulk)
            got = [next(stream).payload for _ in bulk]
            stream.close()
    assert got == bulk


def test_async_producer_batches_and_flushes(broker_factory):
    broker = broker_factory()
    producer = Producer(broker_list=f"{broker.host}:{broker.port}")
    with AsyncProducer(producer, batch_size=100, queue_time_ms=50) as sender:
        for i in range(1000):
            assert sender.send("async", f"m{i}".encode())
        sender.flush()
        assert producer.stats.sent_messages == 1000
        assert producer.stats.sent_requests <= 20  # batched, not one request per message
    wait_for_end(broker, "async", 0, sum(10 + len(f"m{i}") for i in range(1000)))
    assert [m.payload for m in consume_all(broker, "async", 0)] == [
        f"m{i}".encode() for i in range(1000)
    ]


def test_async_producer_can_drop_and_count_when_full(tmp_path):
    # No broker at all: the sender thread blocks on retries, the queue fills, sends drop.
    producer = Producer(StaticBrokers("127.0.0.1:1"), retries=50, retry_backoff_ms=1000)
    sender = AsyncProducer(producer, batch_size=1, queue_size=2, enqueue_timeout_ms=0)
    results = [sender.send("t", b"x") for _ in range(10)]
    assert results.count(False) >= 7
    assert producer.stats.dropped_messages == results.count(False)
    # close() does not wait out 50 retries: it stops them, counts the rest, ends the thread
    sender.close(timeout_s=0)
    assert not sender.running
    assert producer.stats.failed_messages == results.count(True)
    assert sender.errors and all(isinstance(e, ProduceError) for e in sender.errors)


def test_retries_back_off_through_the_injected_sleep():
    slept: list[float] = []
    producer = Producer(
        StaticBrokers("127.0.0.1:1"), retries=3, retry_backoff_ms=100, sleep=slept.append
    )
    with pytest.raises(ProduceError, match="not sent after 3 retries") as info:
        producer.send("t", [b"a", b"b"])
    assert slept == pytest.approx([0.1, 0.2, 0.4])  # doubling, no real waiting
    assert info.value.lost == 2 and producer.stats.failed_messages == 2
    assert producer.stats.retried_sets == 3
    producer.close()


def test_a_producer_at_its_defaults_retries_for_the_delivery_timeout():
    """Kafka's producer since KIP-91: no retry count by default, but two minutes of retries,
    the wait doubling from retry.backoff.ms up to retry.backoff.max.ms; enough to outlast a
    failover, which waits for a dead leader's ZooKeeper session to expire."""
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    producer = Producer(StaticBrokers("127.0.0.1:1"), acks="ack", sleep=sleep, clock=lambda: now[0])
    with pytest.raises(ProduceError, match=r"delivery.timeout.ms=120000") as info:
        producer.send("t", [b"a"])
    assert slept[:5] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert set(slept[4:]) == {1.0}
    assert 119 < sum(slept) <= 120  # the last retry is the last that fits in the timeout
    assert info.value.lost == 1 and producer.stats.retried_sets == len(slept)
    producer.close()


def test_a_closed_producer_refuses_every_send_and_counts_it(broker_factory):
    broker = broker_factory()
    p = Producer(broker_list=f"{broker.host}:{broker.port}")
    p.send("t", [b"a", b"b"])  # the route and the connection are cached
    p.send("t", b"c")
    p.close()
    for payloads, lost in (([b"d", b"e"], 2), (b"f", 1)):
        with pytest.raises(ProduceError, match="the producer is closed") as info:
            p.send("t", payloads)
        assert info.value.lost == lost
    assert p.stats.failed_messages == 3 and p.stats.sent_messages == 3


def test_close_stops_a_send_that_is_retrying_in_another_thread():
    producer = Producer(StaticBrokers("127.0.0.1:1"), retries=1000, retry_backoff_ms=1000)
    errors: list[Exception] = []

    def send() -> None:
        try:
            producer.send("t", [b"a"])
        except ProduceError as exc:
            errors.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    producer.close()
    sender.join(60)  # a deadline for a hung thread, not a measurement
    assert not sender.is_alive(), "the retry loop went on after close()"
    assert len(errors) == 1 and errors[0].lost == 1
    assert producer.stats.failed_messages == 1


def test_unkeyed_sends_fail_over_to_a_live_broker(broker_factory):
    alive = broker_factory(0)
    dead = broker_factory(1)
    dead_port = dead.port
    dead.stop()
    brokers = StaticBrokers(f"0:{alive.host}:{alive.port},1:127.0.0.1:{dead_port}")
    with Producer(brokers, acks="ack", retry_backoff_ms=10, delivery_timeout_ms=300) as p:
        results = [r for _ in range(10) for r in p.send("t", b"m")]
        assert {r.broker_id for r in results} == {0}
        assert p.stats.sent_messages == 10
        # a key pinned to the dead broker cannot move: it fails after the retries, counted
        with pytest.raises(ProduceError) as info:
            p.send_batch([("t", key, b"k") for key in ("a", "b", "c", "d", "e", "f")])
        assert info.value.lost > 0
        assert p.stats.failed_messages == info.value.lost
        assert p.stats.retried_sets > 0


def test_pipelined_fetches_read_the_answer_asked_for_and_drop_the_others(broker_factory):
    """PipelinedFetches (the Spark reader's fetch loop): an answer asked for ahead is the one
    `get` returns; one asked for and not used is read and dropped (0.7 answers in order, so
    it would otherwise be taken for the next); `close` with an answer on its way drops the
    connection; a broker gone is an error at `get`, not at the early `ask`."""
    from logbroker.client.connection import BrokerUnavailableError

    broker = broker_factory()
    with Producer(broker_list=f"{broker.host}:{broker.port}", acks="ack") as p:
        p.send("t", [b"one", b"two", b"three"])  # entries of 13, 13 and 15 bytes
    with SimpleConsumer(broker.host, broker.port) as c:
        fetches = c.pipelined("t", 0)
        whole = bytes(fetches.get(0, 1000))
        assert len(whole) == 41
        fetches.ask(13, 1000)
        assert bytes(fetches.get(13, 1000)) == whole[13:]
        fetches.ask(0, 5)  # asked for, then another fetch is wanted
        assert bytes(fetches.get(26, 1000)) == whole[26:]
        fetches.ask(999, 10)
        with pytest.raises(OffsetOutOfRangeError, match="t-0 at offset 999"):
            fetches.get(999, 10)
        fetches.ask(0, 1000)
        fetches.close()  # its answer is never read: the connection goes, the next is clean
        assert c.latest_offset("t", 0) == 41
        assert bytes(c.fetch("t", 0, 13, 13).data) == whole[13:26]
        broker.kill()
        fetches.ask(0, 1000)  # nobody there: not raised here ...
        with pytest.raises(BrokerUnavailableError):
            fetches.get(0, 1000)  # ... but here


def test_acknowledgement_settings_0_8_keys_and_the_0_7_modes_they_map():
    props = {"broker.list": "127.0.0.1:1", "request.required.acks": "-1"}
    p = Producer.from_properties(
        props
        | {"request.timeout.ms": "500", "message.send.max.retries": "7", "retry.backoff.ms": "5"}
    )
    assert (p.required_acks, p.fsync, p.request_timeout_ms, p.retries) == (-1, False, 500, 7)
    assert p.retry_backoff_s == 0.005
    levels = {
        mode: (q.required_acks, q.fsync)
        for mode in ("none", "ack", "fsync")
        for q in [Producer(StaticBrokers("127.0.0.1:1"), acks=mode)]
    }
    assert levels == {"none": (0, False), "ack": (1, False), "fsync": (1, True)}
    both = Producer.from_properties(props | {"acks": "fsync"})  # -1, and the leader fsyncs
    assert (both.required_acks, both.fsync) == (-1, True)
    with pytest.raises(ValueError, match=r"request.required.acks must be 0, 1 or -1, got 2"):
        Producer.from_properties(props | {"request.required.acks": "2"})
    with pytest.raises(ValueError, match=r"retry.backoff.ms='soon' is not an integer"):
        Producer.from_properties(props | {"retry.backoff.ms": "soon"})
    with pytest.raises(ValueError, match="acks=fsync needs an answer"):
        Producer(StaticBrokers("127.0.0.1:1"), acks="fsync", request_required_acks=0)
