"""One member of a consumer group, run as a subprocess by test_group_consumer.py.

    python group_member.py ZK_CONNECT GROUP TOPIC OUT [--streams N] [--session-ms MS]
                           [--autocommit-ms MS] [--backoff-ms MS]

Writes its consumer id to OUT.id once it has joined, then one line per message to OUT,
"partition offset payload", flushed at once (so a kill -9 loses nothing it delivered).
SIGTERM closes the consumer cleanly and exits 0. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from logbroker.client.group_consumer import GroupConsumer, MessageStream


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("zk_connect")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("out", type=Path)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--session-ms", type=int, default=4000)
    parser.add_argument("--autocommit-ms", type=int, default=1000)
    parser.add_argument("--backoff-ms", type=int, default=300)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(threadName)s %(message)s"
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer = GroupConsumer(
        args.group,
        args.zk_connect,
        zk_session_timeout_ms=args.session_ms,
        autocommit_interval_ms=args.autocommit_ms,
        rebalance_backoff_ms=args.backoff_ms,
        rebalance_retries_max=10,
        consumer_timeout_ms=200,
    )
    out = args.out.open("a", buffering=1)
    lock = threading.Lock()

    def read(stream: MessageStream) -> None:
        while not stop.is_set():
            for message in stream:  # ends after 200 ms without messages
                with lock:
                    out.write(f"{message.partition} {message.offset} {message.payload.decode()}\n")
                    out.flush()
                if stop.is_set():
                    break

    try:
        streams = consumer.create_message_streams({args.topic: args.streams})[args.topic]
        Path(f"{args.out}.id").write_text(consumer.consumer_id)
        readers = [threading.Thread(target=read, args=(s,), daemon=True) for s in streams]
        for reader in readers:
            reader.start()
        while not stop.wait(0.2):
            pass
        for reader in readers:
            reader.join()
    finally:
        consumer.close()
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
