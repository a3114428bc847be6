"""A mutation fuzzer over valid request frames: for the decoder, the handlers and a live broker.

    gen = RequestGenerator(random.Random(1))
    frame = encode_request(gen.request())                 # a valid frame of one of the 8 types
    mutated, names = mutate(rng, frame)                   # the same frame, damaged 1-3 times
    report = run_fuzz(broker.address, broker.log_dir, requests=2000, seed=1)
    assert report.crashes == 0 and report.bytes_changed_by_invalid == 0

    requests     RequestGenerator: valid requests of all 8 types over TOPICS x PARTITIONS
    frames       frame_fields (where the fields of a valid frame are), split_frames (how the
                 broker cuts a byte stream into frames)
    mutators     the mutators (MUTATORS) and mutate, which applies 1-3 of them to a frame
    connection   a blocking client connection with a deadline on every read
    answers      what the answer to a valid request must be
    report       FuzzReport: counters, findings, the verdict (ok)
    segments     snapshot_segments / verify_segments: stored bytes unchanged and valid
    fuzzer       Fuzzer: load known data, send valid and mutated requests, liveness checks
    runner       run_fuzz: a whole run against a live broker; count_broker_errors

What must never happen is damaged bytes stored or bytes already stored changed
(`bytes_changed_by_invalid`), a broker crash, or a valid request failing. The broker must be
started with `BROKER_OVERRIDES` (two partitions per topic). Library code: no pytest here.
"""

from .frames import NUMERIC_SIZES, Field, frame_fields, interesting_values, split_frames
from .fuzzer import BROKER_OVERRIDES
from .mutators import MUTATORS, Mutator, mutate
from .report import FuzzReport
from .requests import PARTITIONS, TOPICS, RequestGenerator, Rng
from .runner import BROKER_ERROR_MARKERS, count_broker_errors, run_fuzz
from .segments import SEGMENT_SUFFIX, SegmentSnapshot, snapshot_segments, verify_segments

__all__ = [
    "BROKER_ERROR_MARKERS",
    "BROKER_OVERRIDES",
    "MUTATORS",
    "NUMERIC_SIZES",
    "PARTITIONS",
    "SEGMENT_SUFFIX",
    "TOPICS",
    "Field",
    "FuzzReport",
    "Mutator",
    "RequestGenerator",
    "Rng",
    "SegmentSnapshot",
    "count_broker_errors",
    "frame_fields",
    "interesting_values",
    "mutate",
    "run_fuzz",
    "snapshot_segments",
    "split_frames",
    "verify_segments",
]
