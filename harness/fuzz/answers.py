"""What the broker's answer to a valid request must be: it decodes and reports no error.

A fetch may answer OFFSET_OUT_OF_RANGE (the generator asks for such offsets on purpose)
and its data must validate; an acked produce must succeed for every produce, and its
offsets are fed back to the generator as fetch boundaries.
"""

from __future__ import annotations

from typing import Any

from logbroker.protocol.errors import LogbrokerError
from logbroker.protocol.message_set import validate
from logbroker.protocol.requests import (
    AckedProduceRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    OffsetsRequest,
    Request,
    WaitingFetchRequest,
)
from logbroker.protocol.responses import (
    decode_acked_produce_response,
    decode_fetch_response,
    decode_metadata_response,
    decode_multifetch_response,
    decode_offsets_response,
)

from .requests import RequestGenerator


def check_response(req: Request, body: bytes, gen: RequestGenerator) -> str | None:
    """Why the answer to a valid request is wrong, or None."""
    try:
        if isinstance(req, FetchRequest):
            return check_fetched(req, decode_fetch_response(body))
        if isinstance(req, MultiFetchRequest | WaitingFetchRequest):
            sets = decode_multifetch_response(body, len(req.fetches))
            for f, s in zip(req.fetches, sets, strict=True):
                problem = check_fetched(f, s)
                if problem:
                    return problem
        elif isinstance(req, OffsetsRequest):
            decode_offsets_response(body)
        elif isinstance(req, AckedProduceRequest):
            results = decode_acked_produce_response(body)
            if len(results) != len(req.produces):
                return f"{len(results)} results for {len(req.produces)} produces"
            for result in results:
                if result.error:
                    return f"a valid acked produce failed with error {result.error}"
                gen.add_boundary(result.topic, result.partition, result.offset)
                gen.add_boundary(result.topic, result.partition, result.next_offset)
        elif isinstance(req, MetadataRequest):
            decode_metadata_response(body)
    except LogbrokerError as exc:
        return f"the response does not decode ({exc})"
    return None


def check_fetched(req: FetchRequest, fetched: Any) -> str | None:
    if fetched.error not in (0, 1):
        return f"fetch answered error {fetched.error}"
    if fetched.error == 0:
        check = validate(fetched.messages)
        if check.error is not None:
            return f"fetched data at {req.offset} does not validate: {check.error}"
    return None
