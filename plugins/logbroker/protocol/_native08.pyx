# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Kafka 0.8's message-set walks, compiled (issue 44).

Each function here is the compiled twin of `<name>_python` in kafka08/message_set.py, which
stays the reference: same results, same errors, same messages for the same bytes
(tests/protocol run both and compare them). kafka08/message_set.py picks these when this
module imports, unless LOGBROKER_PURE_PYTHON=1 (protocol/native.py). The layout is
kafka08/message_set.py's: an entry is offset int64 | size int32 | message (crc uint32, magic
int8, attributes int8, key length int32, key, value length int32, value), big-endian.

Here: validate (the leader's check of a producer's set, recovery's and a follower's check
of stored entries), assign_offsets (the leader's offsets written into a copy of the set),
and the sizes-only walks entry_headers, whole_entries and index_points (the offset index's
points of an append, a follower's copy, a recovered or reopened segment); and the Spark
reader's columns over a fetch (keyed_entries, gather_spans, digest_keyed: twins of
spark_apps/source/keyed_kernels.py's `<name>_python`, tests/spark/test_keyed_kernels.py).
Only the loops are here: a run of intact plain entries is walked without a Python object per message.
What is rare and not per message stays in Python and is called from here: building the
error of a damaged entry (kafka08/message.py's decode_message names it), inflating a
wrapper's inner set (message_set._inflate) and compressing it again (message_set._wrap);
and any buffer that is not one block of bytes (a strided view, not a buffer at all), handed
whole to the reference (which reads a copy of its bytes). CRC-32 is _crc32.h's, as in
_native.pyx.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport INT64_MIN, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset


cdef extern from "_crc32.h":
    # zlib's crc32, or the same CRC folded with carry-less multiplies (see the header)
    uint32_t lb_crc32(uint32_t crc, const unsigned char *buf, size_t len) nogil
    const char *lb_crc32_setup()

# which CRC-32 runs here: "pclmulqdq" (this CPU has it) or "zlib"
CRC32 = (<bytes>lb_crc32_setup()).decode()

from logbroker.protocol.errors import CorruptMessageError, InvalidMessageError

# kafka08/message.py's and message_set.py's constants (a .pyx cannot cimport them from a .py)
cdef enum:
    ENTRY_OVERHEAD = 12  # offset int64, size int32
    MESSAGE_HEADER = 14  # the smallest message: crc, magic, attributes, two lengths of -1
    MIN_ENTRY = 26
    CODEC_MASK = 7

# kafka08/message_set's names, looked up on first use: it imports native.py, which imports
# this module, so this one cannot import it at its top.
cdef object _Validation = None
cdef object _Assigned = None
cdef object _InflateBudget = None
cdef object _decode_message = None
cdef object _inflate = None
cdef object _wrap = None
cdef object _validate_python = None
cdef object _assign_offsets_python = None
cdef object _entry_headers_python = None
cdef object _whole_entries_python = None
cdef object _index_points_python = None


cdef void _bind() except *:
    global _Validation, _Assigned, _InflateBudget, _decode_message, _inflate, _wrap
    global _validate_python, _assign_offsets_python, _entry_headers_python
    global _whole_entries_python, _index_points_python
    from logbroker.protocol.kafka08 import message, message_set

    _Validation = message_set.Validation
    _Assigned = message_set.Assigned
    _InflateBudget = message_set.InflateBudget
    _decode_message = message.decode_message
    _inflate = message_set._inflate
    _wrap = message_set._wrap
    _validate_python = message_set.validate_python
    _assign_offsets_python = message_set.assign_offsets_python
    _entry_headers_python = message_set.entry_headers_python
    _whole_entries_python = message_set.whole_entries_python
    _index_points_python = message_set.index_points_python


cdef inline int32_t _int32(const unsigned char *p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline uint32_t _uint32(const unsigned char *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int64_t _int64(const unsigned char *p) noexcept nogil:
    return <int64_t>((<uint64_t>_uint32(p) << 32) | _uint32(p + 4))


cdef inline void _put_int64(unsigned char *w, int64_t value) noexcept nogil:
    cdef uint64_t v = <uint64_t>value
    cdef int k
    for k in range(8):
        w[k] = <unsigned char>(v >> (56 - 8 * k))


cdef inline void _put_int32(unsigned char *w, int32_t value) noexcept nogil:
    cdef uint32_t v = <uint32_t>value
    w[0] = <unsigned char>(v >> 24)
    w[1] = <unsigned char>(v >> 16)
    w[2] = <unsigned char>(v >> 8)
    w[3] = <unsigned char>v


cdef inline bint _get(object buffer, Py_buffer *pybuf):
    """Borrow `buffer`'s bytes as one block; False when it is not one (the reference then
    takes the call, and raises what it raises for it)."""
    try:
        PyObject_GetBuffer(buffer, pybuf, PyBUF_SIMPLE)
    except (BufferError, TypeError):
        return False
    return True


cdef object _byte_view(object buffer):
    """The reference's view of `buffer` (one block of bytes here): its bytes, one dimension."""
    view = memoryview(buffer)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


# -- validate ------------------------------------------------------------------------------


cdef Py_ssize_t _plain_run(
    const unsigned char *data,
    Py_ssize_t pos,
    Py_ssize_t length,
    bint stored,
    Py_ssize_t *entries,
    Py_ssize_t *largest,
    int64_t *first_offset,
    int64_t *last_offset,
) noexcept nogil:
    """Past the whole, intact, plain entries from `pos` (stored: each above the previous
    offset): where they end. Counts them in `entries`, the largest in `largest`, and keeps
    the offsets as the reference does. Anything else is left to the general path."""
    cdef int64_t offset
    cdef int32_t size, key_length, value_length
    cdef Py_ssize_t end, value_at
    while length - pos >= MIN_ENTRY:
        size = _int32(data + pos + 8)
        end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
        if size < MESSAGE_HEADER or end > length:
            break
        if data[pos + 16] or data[pos + 17]:  # magic 0, attributes 0 (no codec)
            break
        key_length = _int32(data + pos + 18)
        if key_length < -1:
            break
        value_at = pos + 22 + (<Py_ssize_t>key_length if key_length > 0 else 0)
        if value_at + 4 > end:
            break
        value_length = _int32(data + value_at)
        if value_length < -1:
            break
        if value_at + 4 + (<Py_ssize_t>value_length if value_length > 0 else 0) != end:
            break
        offset = _int64(data + pos)
        if stored and last_offset[0] >= 0 and offset <= last_offset[0]:
            break
        if lb_crc32(0, data + pos + 16, <size_t>(end - pos - 16)) != _uint32(data + pos + 12):
            break
        if first_offset[0] < 0:
            first_offset[0] = offset
        last_offset[0] = offset
        if end - pos > largest[0]:
            largest[0] = end - pos
        entries[0] += 1
        pos = end
    return pos


def validate(buffer, *, budget=None, bint inflate=True, bint stored=False):
    """message_set.validate_python, compiled: the same Validation, or the same error in it."""
    cdef Py_buffer pybuf
    if _Validation is None:
        _bind()
    if not _get(buffer, &pybuf):
        return _validate_python(buffer, budget=budget, inflate=inflate, stored=stored)
    try:
        return _validate(
            buffer, <const unsigned char *>pybuf.buf, pybuf.len, budget, inflate, stored
        )
    finally:
        PyBuffer_Release(&pybuf)


cdef object _validate(
    object buffer,
    const unsigned char *data,
    Py_ssize_t length,
    object budget,
    bint inflate,
    bint stored,
):
    cdef Py_ssize_t pos = 0, end, value_at, before
    cdef Py_ssize_t entries = 0, messages = 0, largest = 0, compressed = 0
    cdef int64_t offset, first_offset = -1, last_offset = -1
    cdef int32_t size, key_length, value_length
    cdef unsigned char attributes, codec, last_codec = 0
    cdef bint intact
    cdef object error = None, view = None, where = None, inner, first_inner, counted
    cdef list inflated = []
    while length - pos >= ENTRY_OVERHEAD:
        before = entries
        pos = _plain_run(data, pos, length, stored, &entries, &largest, &first_offset, &last_offset)
        messages += entries - before
        if length - pos < ENTRY_OVERHEAD:
            break
        # Anything but an intact plain entry: the reference's steps, one by one.
        offset = _int64(data + pos)
        size = _int32(data + pos + 8)
        end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
        if size < MESSAGE_HEADER:
            error = CorruptMessageError(
                f"entry at byte {pos} (offset {offset}) declares {size} bytes, under the 0.8 "
                f"minimum message size {MESSAGE_HEADER}"
            )
            break
        if end > length:
            break  # a partial trailing entry
        attributes = data[pos + 17]
        codec = attributes & CODEC_MASK
        key_length = _int32(data + pos + 18)
        value_at = pos + 22 + (<Py_ssize_t>key_length if key_length > 0 else 0)
        intact = (
            data[pos + 16] == 0
            and attributes == 0
            and key_length >= -1
            and value_at + 4 <= end
            and lb_crc32(0, data + pos + 16, <size_t>(end - pos - 16)) == _uint32(data + pos + 12)
        )
        if intact:
            value_length = _int32(data + value_at)
            intact = value_length >= -1 and (
                value_at + 4 + (<Py_ssize_t>value_length if value_length > 0 else 0) == end
            )
        if not intact:  # decode_message names the damage, or passes a wrapper
            if view is None:
                view = _byte_view(buffer)
            try:
                _decode_message(
                    view[pos + ENTRY_OVERHEAD : end], f"the entry at byte {pos} (offset {offset})"
                )
            except InvalidMessageError as exc:
                error = exc
                break
        if stored or codec:
            where = f"the entry at byte {pos} (offset {offset})"
        if stored and last_offset >= 0 and offset <= last_offset:
            error = CorruptMessageError(
                f"{where} does not follow offset {last_offset}: stored offsets increase"
            )
            break
        if codec:
            first_inner = None
            inner = None
            if inflate:
                if budget is None:
                    budget = _InflateBudget.stored()
                if view is None:
                    view = _byte_view(buffer)
                try:
                    inner = _inflate(view[pos + ENTRY_OVERHEAD : end], codec, where, budget)
                    counted, first_inner = _check_inner(inner, where, offset if stored else None)
                except InvalidMessageError as exc:
                    error = exc
                    break
                messages += <Py_ssize_t>counted
            if (
                stored
                and first_inner is not None
                and last_offset >= 0
                and first_inner <= last_offset
            ):
                error = CorruptMessageError(
                    f"{where}: its first inner offset {first_inner} does not follow {last_offset}"
                )
                break
            if inflate:
                inflated.append(inner)
            compressed += 1
            last_codec = codec
        else:
            messages += 1
        if first_offset < 0:
            first_offset = offset
        last_offset = offset
        if end - pos > largest:
            largest = end - pos
        entries += 1
        pos = end
    return tuple.__new__(
        _Validation,
        (
            pos,
            entries,
            messages,
            largest,
            error,
            length,
            compressed,
            last_codec,
            first_offset,
            last_offset,
            tuple(inflated),
        ),
    )


cdef tuple _check_inner(object inner, object where, object wrapper_offset):
    """message_set._check_inner with this module's validate: (messages, first inner offset)
    of a wrapper's inflated set, or its error raised."""
    cdef Py_buffer pybuf
    cdef Py_ssize_t pos, i, length
    cdef int64_t offset, expected
    cdef int32_t size
    cdef bint far
    if not _get(inner, &pybuf):  # the codecs give bytes: not met
        raise TypeError(f"an inflated set of type {type(inner).__name__}")
    try:
        length = pybuf.len
        check = _validate(
            inner, <const unsigned char *>pybuf.buf, length, _InflateBudget(0, 0, 0), True, False
        )
        if check[4] is not None:
            raise type(check[4])(f"{where}, inside its compressed set: {check[4]}")
        if check[0] != length:
            raise CorruptMessageError(
                f"{where}: its compressed set ends in a partial entry ({length - check[0]} bytes)"
            )
        if check[1] == 0:
            raise CorruptMessageError(f"{where}: its compressed set is empty")
        if wrapper_offset is not None:
            first = wrapper_offset - check[1] + 1
            far = first < INT64_MIN  # no int64 offset equals it: the first inner one differs
            expected = INT64_MIN if far else <int64_t>first
            pos = i = 0
            while length - pos >= ENTRY_OVERHEAD:  # whole entries, as the check found
                offset = _int64(<const unsigned char *>pybuf.buf + pos)
                size = _int32(<const unsigned char *>pybuf.buf + pos + 8)
                if far or offset != expected + i:
                    raise CorruptMessageError(
                        f"{where}: inner message {i} has offset {offset}, not {first + i} "
                        f"(inner offsets run consecutively up to the wrapper's)"
                    )
                pos += ENTRY_OVERHEAD + <Py_ssize_t>size
                i += 1
    finally:
        PyBuffer_Release(&pybuf)
    return check[2], check[8]


# -- assign_offsets ------------------------------------------------------------------------


# Offsets from here on cannot run past an int64 within one set: beyond, the reference (whose
# struct.pack_into names an offset that does not fit).
cdef object _FAR = 1 << 62


def assign_offsets(buffer, next_offset, *, budget=None, validation=None):
    """message_set.assign_offsets_python, compiled: the same Assigned, or the same error.

    The valid prefix is copied once into the bytes returned and each plain entry's offset
    written there; a wrapper goes the reference's way (its inner set from the validation,
    or inflated and checked, its inner offsets rewritten here, compressed again by
    message_set._wrap when they changed)."""
    cdef Py_buffer pybuf
    if _Validation is None:
        _bind()
    check = validate(buffer, inflate=False) if validation is None else validation
    if check.error is not None:
        raise check.error
    if not _get(buffer, &pybuf):
        return _assign_offsets_python(buffer, next_offset, budget=budget, validation=check)
    try:
        if (
            check.valid_bytes > pybuf.len
            or check.valid_bytes < 0  # a validation of other bytes
            or not -_FAR <= next_offset <= _FAR  # offsets near the int64 field's limits
        ):
            return _assign_offsets_python(buffer, next_offset, budget=budget, validation=check)
        return _assign(
            <const unsigned char *>pybuf.buf, check.valid_bytes, next_offset, budget, check
        )
    finally:
        PyBuffer_Release(&pybuf)


cdef object _assign(
    const unsigned char *data, Py_ssize_t valid, object next_offset, object budget, object check
):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, valid)
    cdef unsigned char *w = <unsigned char *>PyBytes_AS_STRING(out)
    cdef Py_ssize_t pos = 0, end, start = 0, reencoded = 0, messages = 0, wrappers = 0
    cdef int64_t offset, next_value
    cdef int32_t size
    cdef unsigned char codec
    cdef list parts = []
    cdef tuple inflated = check.inflated
    cdef object first = next_offset, where, inner
    memcpy(w, data, valid)
    next_value = next_offset
    while valid - pos >= ENTRY_OVERHEAD:  # message_set._entry_offsets' walk
        size = _int32(w + pos + 8)
        end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
        if size < MESSAGE_HEADER or end > valid:
            break
        codec = w[pos + 17] & CODEC_MASK
        if not codec:
            _put_int64(w + pos, next_value)
            next_value += 1
            messages += 1
            pos = end
            continue
        offset = _int64(data + pos)  # as the producer gave it
        if budget is None:
            budget = _InflateBudget.stored()
        if wrappers < len(inflated):  # inflated and checked by the validation
            inner = bytearray(inflated[wrappers])
        else:
            where = f"the entry at byte {pos} (offset {offset})"
            inner = bytearray(_inflate(memoryview(out)[pos + ENTRY_OVERHEAD : end], codec, where, budget))
            _check_inner(bytes(inner), where, None)
        wrappers += 1
        if _renumber(inner, &next_value, &messages):
            parts.append(out[start:pos])
            parts.append(_wrap(codec, bytes(inner), next_value - 1))
            start = end
            reencoded += 1
        else:
            _put_int64(w + pos, next_value - 1)
        pos = end
    if parts:
        parts.append(out[start:])
        out = b"".join(parts)
    return tuple.__new__(
        _Assigned, (out, first, next_value, messages, check.entries, reencoded)
    )


cdef bint _renumber(bytearray inner, int64_t *next_value, Py_ssize_t *messages) except -1:
    """Give the entries of a checked inner set the next offsets; True when any changed."""
    cdef unsigned char *w = <unsigned char *>(<char *>inner)
    cdef Py_ssize_t length = len(inner), pos = 0, end
    cdef int32_t size
    cdef bint changed = False
    while length - pos >= ENTRY_OVERHEAD:
        size = _int32(w + pos + 8)
        end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
        if size < MESSAGE_HEADER or end > length:
            break
        messages[0] += 1
        if _int64(w + pos) != next_value[0]:
            _put_int64(w + pos, next_value[0])
            changed = True
        next_value[0] += 1
        pos = end
    return changed


# -- the sizes-only walks ------------------------------------------------------------------


def entry_headers(buffer, position=0):
    """message_set.entry_headers_python, compiled: the same (offset, position, size) of each
    whole entry, from a list."""
    cdef Py_buffer pybuf
    cdef const unsigned char *data
    cdef Py_ssize_t pos = 0, length, end
    cdef int32_t size
    cdef list found = []
    cdef int64_t base
    if _Validation is None:
        _bind()
    if not _get(buffer, &pybuf):
        return _entry_headers_python(buffer, position)
    try:
        base = position
        data = <const unsigned char *>pybuf.buf
        length = pybuf.len
        while length - pos >= ENTRY_OVERHEAD:
            size = _int32(data + pos + 8)
            end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
            if size < MESSAGE_HEADER or end > length:
                break
            found.append((_int64(data + pos), base + pos, end - pos))
            pos = end
    finally:
        PyBuffer_Release(&pybuf)
    return iter(found)


def whole_entries(buffer):
    """message_set.whole_entries_python, compiled: (where the whole entries end, how many)."""
    cdef Py_buffer pybuf
    cdef const unsigned char *data
    cdef Py_ssize_t pos = 0, length, end, count = 0
    cdef int32_t size
    if _Validation is None:
        _bind()
    if not _get(buffer, &pybuf):
        return _whole_entries_python(buffer)
    data = <const unsigned char *>pybuf.buf
    length = pybuf.len
    while length - pos >= ENTRY_OVERHEAD:
        size = _int32(data + pos + 8)
        end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
        if size < MESSAGE_HEADER or end > length:
            break
        count += 1
        pos = end
    PyBuffer_Release(&pybuf)
    return pos, count


def index_points(buffer, position, last_indexed, interval, limit=None):
    """message_set.index_points_python, compiled: the same points, last offset and end."""
    cdef Py_buffer pybuf
    cdef const unsigned char *data
    cdef Py_ssize_t pos = 0, n, end
    cdef int64_t base, indexed, every, bound, last = -1, at
    cdef int32_t size
    cdef list points = []
    if _Validation is None:
        _bind()
    if not _get(buffer, &pybuf):
        return _index_points_python(buffer, position, last_indexed, interval, limit)
    try:
        n = pybuf.len
        base, indexed, every = position, last_indexed, interval
        bound = n if limit is None else limit
        data = <const unsigned char *>pybuf.buf
        while pos + ENTRY_OVERHEAD <= n:
            size = _int32(data + pos + 8)
            end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
            if size < MESSAGE_HEADER or end > bound:
                break
            at = base + pos
            if at - indexed > every:
                points.append((_int64(data + pos), at, end - pos))
                indexed = at
            last = _int64(data + pos)
            pos = end
    finally:
        PyBuffer_Release(&pybuf)
    return points, last, pos


# -- the Spark reader's columns (spark_apps/source/keyed_kernels.py) -------------------------


cdef inline int _plain_entry(
    const unsigned char *data,
    Py_ssize_t pos,
    Py_ssize_t length,
    Py_ssize_t *end,
    int32_t *key_length,
    Py_ssize_t *value_at,
) noexcept nogil:
    """The shape of the entry at `pos` (its header fits): 0 a whole plain entry (its `end`,
    `key_length`, where its value starts); -1 a size under the minimum or an entry past the
    end (damage or a partial trailing entry: the caller's check after the walk tells them
    apart); 1 a wrapper or another magic; 2 damaged lengths. keyed_entries' and keyed_lists'
    walk."""
    cdef int32_t size = _int32(data + pos + 8), value_length
    end[0] = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
    if size < MESSAGE_HEADER or end[0] > length:
        return -1
    if data[pos + 16] or data[pos + 17]:
        return 1
    key_length[0] = _int32(data + pos + 18)
    if key_length[0] == -1:
        value_at[0] = pos + 26
        value_length = _int32(data + pos + 22)
    else:
        value_at[0] = pos + 22 + <Py_ssize_t>key_length[0]
        if key_length[0] < -1 or value_at[0] + 4 > end[0]:
            return 2
        value_length = _int32(data + value_at[0])
        value_at[0] += 4
    if value_length < -1 or value_at[0] + (value_length if value_length > 0 else 0) != end[0]:
        return 2
    return 0


def keyed_entries(
    const unsigned char[::1] buf,
    int64_t from_offset,
    bint check_crc,
    int64_t[::1] offsets,
    int64_t[::1] value_starts,
    int64_t[::1] value_ends,
    int64_t[::1] key_starts,
    int32_t[::1] key_lengths,
):
    """keyed_kernels.keyed_entries_python, compiled: (messages found, where the walk stopped,
    the last entry's offset or -1, status: 0 the end, 1 an entry of another kind at the stop,
    2 a damaged one there)."""
    cdef Py_ssize_t length = buf.shape[0], cap = offsets.shape[0], n = 0, pos = 0, end
    cdef Py_ssize_t value_at, key_at
    cdef int32_t key_length
    cdef int64_t offset, last = -1
    cdef int status = 0
    cdef const unsigned char *data
    if (value_starts.shape[0] < cap or value_ends.shape[0] < cap or key_starts.shape[0] < cap
            or key_lengths.shape[0] < cap):
        raise ValueError("the columns' arrays differ in length")
    if cap < length // MIN_ENTRY + 1:
        raise ValueError(
            f"room for {cap} messages, a {length}-byte buffer may hold {length // MIN_ENTRY + 1}"
        )
    if length == 0:
        return 0, 0, -1, 0
    data = &buf[0]
    with nogil:
        while pos + MIN_ENTRY <= length:
            offset = _int64(data + pos)
            status = _plain_entry(data, pos, length, &end, &key_length, &value_at)
            if status == -1:
                status = 0  # damage (below) or a partial trailing entry
                break
            if status:
                break  # 1: a wrapper, another magic: the general path reads the fetch
            key_at = pos + 22
            if offset >= from_offset:
                if check_crc and lb_crc32(0, data + pos + 16, <size_t>(end - pos - 16)) != _uint32(data + pos + 12):
                    status = 2
                    break
                offsets[n] = offset
                value_starts[n] = value_at
                value_ends[n] = end
                key_starts[n] = key_at
                key_lengths[n] = key_length
                n += 1
            last = offset
            pos = end
        if status == 0 and length - pos >= ENTRY_OVERHEAD and _int32(data + pos + 8) < MESSAGE_HEADER:
            status = 2
    return n, pos, last, status


def gather_spans(
    const unsigned char[::1] buf,
    const int64_t[::1] starts,
    const int64_t[::1] ends,
    Py_ssize_t pad,
    unsigned char[::1] out,
    int32_t[::1] out_offsets,
):
    """keyed_kernels.gather_spans_python, compiled: each span [starts[i], ends[i]) of `buf`
    copied into `out` after `pad` zero bytes; out_offsets[i] where span i starts there (and
    out_offsets[n] where the last ends)."""
    cdef Py_ssize_t n = starts.shape[0], i, at = 0, total = 0, length = buf.shape[0]
    if ends.shape[0] != n or out_offsets.shape[0] != n + 1 or pad < 0:
        raise ValueError(f"{n} starts, {ends.shape[0]} ends, {out_offsets.shape[0]} offsets, pad {pad}")
    for i in range(n):
        if starts[i] < 0 or starts[i] > ends[i] or ends[i] > length:
            raise ValueError(f"span {i} [{starts[i]}, {ends[i]}) is outside the {length}-byte buffer")
        total += pad + ends[i] - starts[i]
    if out.shape[0] < total or total >= 2 ** 31:
        raise ValueError(f"{out.shape[0]} bytes of room for {total}")
    with nogil:
        for i in range(n):
            if pad:
                memset(&out[at], 0, pad)
                at += pad
            out_offsets[i] = <int32_t>at
            if ends[i] > starts[i]:
                memcpy(&out[at], &buf[starts[i]], ends[i] - starts[i])
            at += ends[i] - starts[i]
        out_offsets[n] = <int32_t>at


def digest_keyed(
    const unsigned char[::1] buf,
    const int64_t[::1] offsets,
    const int64_t[::1] value_starts,
    const int64_t[::1] value_ends,
    const int64_t[::1] key_starts,
    const int32_t[::1] key_lengths,
):
    """keyed_kernels.digest_keyed_python, compiled: rows_sha256's bytes for a logical range's
    messages, offset (int64) | index (int32, 0) | key length (int32, -1 null) | key | value
    length (int32) | value per message, big-endian."""
    cdef Py_ssize_t n = offsets.shape[0], i, total = 0, length = buf.shape[0], k, v
    cdef unsigned char *w
    cdef bytes result
    if (value_starts.shape[0] != n or value_ends.shape[0] != n or key_starts.shape[0] != n
            or key_lengths.shape[0] != n):
        raise ValueError("the columns' arrays differ in length")
    for i in range(n):
        k = key_lengths[i] if key_lengths[i] > 0 else 0
        if (key_lengths[i] < -1 or key_starts[i] < 0 or key_starts[i] + k > length
                or value_starts[i] < 0 or value_starts[i] > value_ends[i] or value_ends[i] > length):
            raise ValueError(f"message {i}'s key or value is outside the {length}-byte buffer")
        total += 20 + k + value_ends[i] - value_starts[i]
    result = PyBytes_FromStringAndSize(NULL, total)
    w = <unsigned char *>PyBytes_AS_STRING(result)
    with nogil:
        for i in range(n):
            _put_int64(w, offsets[i])
            w[8] = w[9] = w[10] = w[11] = 0
            _put_int32(w + 12, key_lengths[i])
            w += 16
            k = key_lengths[i] if key_lengths[i] > 0 else 0
            if k:
                memcpy(w, &buf[key_starts[i]], k)
                w += k
            v = value_ends[i] - value_starts[i]
            _put_int32(w, <int32_t>v)
            if v:
                memcpy(w + 4, &buf[value_starts[i]], v)
            w += 4 + v
    return result


# -- the clients' hot loops (client/messages08.py) ------------------------------------------


def keyed_lists(const unsigned char[::1] buf, int64_t from_offset):
    """The walk of messages08.keyed_columns_python over a fetch's plain entries, compiled:
    (offsets, keys, payloads, where the walk stopped, the last entry's offset or -1, status)
    with keyed_entries' status (0 the end, 1 an entry of another kind at the stop, 2 a
    damaged one there). The lists hold the messages at or after `from_offset` (each CRC
    checked); on status 1 or 2 messages08 reads the whole fetch with the reference, which
    inflates wrappers and names damage."""
    cdef Py_ssize_t length = buf.shape[0], pos = 0, end, value_at, key_at
    cdef int32_t key_length
    cdef int64_t offset, last = -1
    cdef int status = 0
    cdef const unsigned char *data
    cdef list offsets = [], keys = [], payloads = []
    if length == 0:
        return offsets, keys, payloads, 0, -1, 0
    data = &buf[0]
    while pos + MIN_ENTRY <= length:
        offset = _int64(data + pos)
        status = _plain_entry(data, pos, length, &end, &key_length, &value_at)
        if status == -1:
            status = 0  # damage (below) or a partial trailing entry
            break
        if status:
            break
        key_at = pos + 22
        if offset >= from_offset:
            if lb_crc32(0, data + pos + 16, <size_t>(end - pos - 16)) != _uint32(data + pos + 12):
                status = 2
                break
            offsets.append(offset)
            keys.append(
                None if key_length == -1
                else PyBytes_FromStringAndSize(<const char *>data + key_at, key_length)
            )
            payloads.append(PyBytes_FromStringAndSize(<const char *>data + value_at, end - value_at))
        last = offset
        pos = end
    if status == 0 and length - pos >= ENTRY_OVERHEAD and _int32(data + pos + 8) < MESSAGE_HEADER:
        status = 2
    return offsets, keys, payloads, pos, last, status


def build_plain_set(keys, payloads):
    """messages08.build_set_python's set without a codec, compiled: the same bytes, or None
    when a key is not exactly bytes or None, a payload not exactly bytes, or the counts
    differ (messages08 then builds it with the reference, which raises what it raises)."""
    cdef Py_ssize_t n = len(payloads), i, total = 0, k, v
    cdef object key, value
    cdef bytes out
    cdef unsigned char *w
    cdef unsigned char *msg
    if len(keys) != n:
        return None
    keys = list(keys)
    payloads = list(payloads)
    for i in range(n):
        key, value = keys[i], payloads[i]
        if not PyBytes_CheckExact(value) or (key is not None and not PyBytes_CheckExact(key)):
            return None
        k = PyBytes_GET_SIZE(key) if key is not None else 0
        v = PyBytes_GET_SIZE(value)
        if k + v > 0x7FFFFF00:
            return None
        total += MIN_ENTRY + k + v
    out = PyBytes_FromStringAndSize(NULL, total)
    w = <unsigned char *>PyBytes_AS_STRING(out)
    for i in range(n):
        key, value = keys[i], payloads[i]
        v = PyBytes_GET_SIZE(value)
        _put_int64(w, i)
        msg = w + 12  # crc, then what it covers
        msg[4] = 0  # magic
        msg[5] = 0  # attributes
        if key is None:
            k = 0
            _put_int32(msg + 6, -1)
        else:
            k = PyBytes_GET_SIZE(key)
            _put_int32(msg + 6, <int32_t>k)
            memcpy(msg + 10, PyBytes_AS_STRING(key), k)
        _put_int32(msg + 10 + k, <int32_t>v)
        memcpy(msg + 14 + k, PyBytes_AS_STRING(value), v)
        _put_int32(w + 8, <int32_t>(14 + k + v))
        _put_int32(msg, <int32_t>lb_crc32(0, msg + 4, <size_t>(10 + k + v)))
        w += MIN_ENTRY + k + v
    return out
