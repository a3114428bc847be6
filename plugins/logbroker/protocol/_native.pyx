# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The message-set walks every message crosses, compiled (issue 33).

Each function here is the compiled twin of one in message_set.py, which stays the reference:
same results, same errors, same messages for the same bytes (tests/protocol run both and
compare them). message_set.py picks these when this module imports, unless
LOGBROKER_PURE_PYTHON=1 (protocol/native.py). The byte layout is message.py's. CRC-32 is
_crc32.h's: zlib's value, folded with carry-less multiplies where the CPU has them (a
payload's CRC in a fifth of zlib's time), else zlib's C function itself.

Here: validate, message_columns (the batch consumer's walk of a fetch), iter_messages,
stored_set_end, build_message_set, and the sizes-only walks whole_entries and
entry_at_or_after (a follower's append, a reader walking to the first message it owns); requests.py's decode_produce_fast (the broker's first
look at every PRODUCE frame), produce_run (the same for a read's worth of PRODUCE frames to
one partition, with their sets validated) and encode_produce_set (the producer's whole
PRODUCE frame); and the Spark source's walk of a fetch into arrays
(walk_entries, gather_payloads, digest_entries), whose reference is
spark_apps/source/entry_kernels.py. Only the loops are here. What is rare and not per
message stays in Python and is called from here: building the error of a damaged entry;
inflating and checking a compressed set (message_set._validate_compressed, and
_unwrapped for iter_messages, which walk the inner set with this module again);
compressing a built set (message_set._wrap); and any buffer or payload of a type the loops
do not read (a strided view, a bytearray payload), handed whole to the reference.

The GIL is released only around validate's run of plain entries in an inflated set
(depth > 0) of NOGIL_BYTES or more: see there why.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_Check
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_CheckExact
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcmp, memcpy


cdef extern from "_crc32.h":
    # zlib's crc32, or the same CRC folded with carry-less multiplies (see the header)
    uint32_t lb_crc32(uint32_t crc, const unsigned char *buf, size_t len) nogil
    const char *lb_crc32_setup()

# which CRC-32 runs here: "pclmulqdq" (this CPU has it) or "zlib"
CRC32 = (<bytes>lb_crc32_setup()).decode()


cdef extern from *:
    """
    /* A Message (a NamedTuple, so a tuple subtype) from its five fields, made the way
       tuple.__new__(Message, fields) makes it, without the tuple of fields in between.
       From 3.14 tuples cache their hash in a field this would leave unset: there, and
       when LB_GENERIC_MESSAGE is defined (to test this path), tuple.__new__ itself. */
    #if PY_VERSION_HEX >= 0x030E0000 && !defined(LB_GENERIC_MESSAGE)
    #define LB_GENERIC_MESSAGE
    #endif
    static PyObject *lb_message(PyObject *type, PyObject *offset, PyObject *next_offset,
                                PyObject *payload, PyObject *magic, PyObject *attributes)
    {
    #ifdef LB_GENERIC_MESSAGE
        PyObject *fields = PyTuple_Pack(5, offset, next_offset, payload, magic, attributes);
        if (fields == NULL)
            return NULL;
        PyObject *args = PyTuple_Pack(1, fields);
        Py_DECREF(fields);
        if (args == NULL)
            return NULL;
        PyObject *message = PyTuple_Type.tp_new((PyTypeObject *)type, args, NULL);
        Py_DECREF(args);
        return message;
    #else
        PyObject *m = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 5);
        if (m == NULL)
            return NULL;
        Py_INCREF(offset);
        PyTuple_SET_ITEM(m, 0, offset);
        Py_INCREF(next_offset);
        PyTuple_SET_ITEM(m, 1, next_offset);
        Py_INCREF(payload);
        PyTuple_SET_ITEM(m, 2, payload);
        Py_INCREF(magic);
        PyTuple_SET_ITEM(m, 3, magic);
        Py_INCREF(attributes);
        PyTuple_SET_ITEM(m, 4, attributes);
        return m;
    #endif
    }
    """
    object lb_message(object type, object offset, object next_offset, object payload, object magic, object attributes)


from itertools import chain as _chain

from logbroker.protocol.compression import CODEC_NAMES as _CODEC_NAMES
from logbroker.protocol.errors import CorruptMessageError, UnknownMagicError
from logbroker.protocol.message import unused_attribute_bits

# message.py's constants (a .pyx cannot cimport them from a .py)
cdef enum:
    ENTRY_OVERHEAD = 4
    MIN_MESSAGE_SIZE = 5
    MAGIC0_HEADER = 5
    MAGIC1_HEADER = 6
    CODEC_MASK = 3

# message_set's Validation, InflateBudget.stored and _validate_compressed, looked up on first
# use: message_set imports this module, so this one cannot import message_set at its top.
cdef object _Validation = None
cdef object _stored_budget = None
cdef object _validate_compressed = None
cdef object _validate_python = None
cdef object _Message = None
cdef object _unwrapped = None
cdef object _stored_set_end_python = None
cdef object _build_message_set_python = None
cdef object _wrap = None
cdef object _message_columns_python = None
cdef object _whole_entries_python = None
cdef object _entry_at_or_after_python = None
cdef object _MessageColumns = None
# requests.py's, looked up on first use as well (requests imports native)
cdef object _ProduceRequest = None
cdef object _decode_produce_fast_python = None
cdef object _encode_produce_set_python = None
cdef object _ProduceRun = None
cdef object _produce_run_python = None


cdef void _bind() except *:
    global _Validation, _stored_budget, _validate_compressed, _validate_python, _Message
    global _unwrapped, _stored_set_end_python, _build_message_set_python, _wrap
    global _message_columns_python, _MessageColumns, _whole_entries_python
    global _entry_at_or_after_python
    from logbroker.protocol import message, message_set

    _Validation = message_set.Validation
    _stored_budget = message_set.InflateBudget.stored
    _validate_compressed = message_set._validate_compressed
    _validate_python = message_set.validate_python
    _Message = message.Message
    _unwrapped = message_set._unwrapped
    _stored_set_end_python = message_set.stored_set_end_python
    _build_message_set_python = message_set.build_message_set_python
    _wrap = message_set._wrap
    _message_columns_python = message_set.message_columns_python
    _MessageColumns = message_set.MessageColumns
    _whole_entries_python = message_set.whole_entries_python
    _entry_at_or_after_python = message_set.entry_at_or_after_python


cdef inline int32_t _int32(const unsigned char *p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline uint32_t _uint32(const unsigned char *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint32_t _crc(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    # n < 2**31: it comes from an int32 size
    return lb_crc32(0, p, <size_t>n)


def crc32(data, unsigned long crc=0):
    """zlib.crc32(data, crc), by this module's CRC-32 (CRC32 names which): for the tests."""
    cdef Py_buffer pybuf
    cdef uint32_t value
    PyObject_GetBuffer(data, &pybuf, PyBUF_SIMPLE)
    try:
        with nogil:
            value = lb_crc32(<uint32_t>crc, <const unsigned char *>pybuf.buf, <size_t>pybuf.len)
    finally:
        PyBuffer_Release(&pybuf)
    return value


# An inflated set (depth > 0) at least this long is checked without the GIL: in the broker
# only the inflating workers check those, and the event loop runs meanwhile (the worker then
# waits for the GIL to come back). The event loop's own checks (depth 0) keep the GIL.
cdef Py_ssize_t NOGIL_BYTES = 256 * 1024


cdef Py_ssize_t _plain_prefix(
    const unsigned char *data,
    Py_ssize_t pos,
    Py_ssize_t length,
    Py_ssize_t *entries,
    Py_ssize_t *largest,
) noexcept nogil:
    """Past the whole, plain, intact magic-1 entries from `pos`: where they end. Counts them
    in `entries` and keeps the largest payload in `largest`."""
    cdef Py_ssize_t end, last_header = length - 10  # a magic-1 entry's header fits
    cdef int32_t size
    while pos <= last_header:
        size = _int32(data + pos)
        end = pos + 4 + <Py_ssize_t>size
        if data[pos + 4] != 1 or data[pos + 5] or size < 6 or end > length:
            break
        if _crc(data + pos + 10, end - pos - 10) != _uint32(data + pos + 6):
            break
        if size - 6 > largest[0]:
            largest[0] = size - 6
        entries[0] += 1
        pos = end
    return pos


def validate(buffer, base_offset=0, *, depth=0, budget=None, bint inflate=True):
    """message_set.validate_python, compiled: the same Validation, or the same error in it."""
    cdef Py_buffer pybuf
    if _Validation is None:
        _bind()
    try:
        PyObject_GetBuffer(buffer, &pybuf, PyBUF_SIMPLE)
    except (BufferError, TypeError):
        # Not one contiguous block of bytes (a strided view, not a buffer at all): the
        # reference raises what it raises for it.
        return _validate_python(
            buffer, base_offset, depth=depth, budget=budget, inflate=inflate
        )
    try:
        return _validate(
            buffer, <const unsigned char *>pybuf.buf, pybuf.len, base_offset, depth, budget, inflate
        )
    finally:
        PyBuffer_Release(&pybuf)


cdef object _validate(
    object buffer,
    const unsigned char *data,
    Py_ssize_t length,
    object base_offset,
    object depth,
    object budget,
    bint inflate,
):
    cdef Py_ssize_t pos = 0, end, payload_start
    cdef Py_ssize_t entries = 0, messages = 0, largest = 0, compressed = 0
    cdef Py_ssize_t plain
    cdef int32_t size
    cdef unsigned char magic, attributes, codec
    cdef uint32_t crc, computed
    cdef object error = None, view = None, inner_count
    cdef bint release = length >= NOGIL_BYTES and depth != 0
    while pos + ENTRY_OVERHEAD <= length:
        # Whole, plain, intact magic-1 entries: nearly every entry. Anything else, a damaged
        # entry included, goes to the general path below, which names it.
        plain = entries
        if release and length - pos >= NOGIL_BYTES:
            with nogil:
                pos = _plain_prefix(data, pos, length, &entries, &largest)
        else:
            pos = _plain_prefix(data, pos, length, &entries, &largest)
        messages += entries - plain
        if pos + ENTRY_OVERHEAD > length:
            break
        size = _int32(data + pos)
        end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
        if size < MIN_MESSAGE_SIZE:
            error = CorruptMessageError(
                f"entry at offset {base_offset + pos} declares {size} bytes, "
                f"under the minimum message size {MIN_MESSAGE_SIZE}"
            )
            break
        if end > length:
            break  # partial trailing entry
        magic = data[pos + ENTRY_OVERHEAD]
        if magic == 1:
            payload_start = pos + ENTRY_OVERHEAD + MAGIC1_HEADER
            if end < payload_start:
                error = CorruptMessageError(
                    f"magic 1 entry at offset {base_offset + pos} is only {size} bytes"
                )
                break
            attributes = data[pos + 5]
            crc = _uint32(data + pos + 6)
        elif magic == 0:
            attributes = 0
            crc = _uint32(data + pos + 5)
            payload_start = pos + ENTRY_OVERHEAD + MAGIC0_HEADER
        else:
            error = UnknownMagicError(
                f"unknown magic byte {magic} in the entry at offset {base_offset + pos}"
            )
            break
        computed = _crc(data + payload_start, end - payload_start)
        if computed != crc:
            error = CorruptMessageError(
                f"CRC mismatch in the entry at offset {base_offset + pos}: stored {crc:#010x}, "
                f"computed {computed:#010x}"
            )
            break
        if attributes & ~CODEC_MASK:  # under no CRC: a flip there shows only as such a bit
            error = unused_attribute_bits(attributes, base_offset + pos)
            break
        codec = attributes & CODEC_MASK
        if codec:
            if not inflate and codec in _CODEC_NAMES:
                compressed += 1
            else:
                if budget is None:
                    budget = _stored_budget()
                if view is None:
                    view = memoryview(buffer)
                    if view.ndim != 1 or view.itemsize != 1:
                        view = view.cast("B")
                inner_count = _validate_compressed(
                    codec, view[payload_start:end], base_offset + pos, depth, budget, validate
                )
                if not isinstance(inner_count, int):
                    error = inner_count
                    break
                messages += <Py_ssize_t>inner_count
                compressed += 1
        else:
            messages += 1
        if end - payload_start > largest:
            largest = end - payload_start
        entries += 1
        pos = end
    return tuple.__new__(
        _Validation, (pos, entries, messages, largest, error, length, compressed)
    )


def message_columns(buffer, base_offset=0):
    """message_set.message_columns_python, compiled: the same MessageColumns, or the same
    error. The region is read in place (bytes, bytearray or a contiguous view: no copy of
    it); its runs of plain magic-1 entries are walked here, one bytes object and one int
    per message, and any other entry is cut out and unwrapped by iter_messages, as the
    reference does. What is not one block of bytes goes to the reference."""
    cdef Py_buffer pybuf
    if _Message is None:
        _bind()
    try:
        PyObject_GetBuffer(buffer, &pybuf, PyBUF_SIMPLE)
    except (BufferError, TypeError):
        return _message_columns_python(buffer, base_offset)
    try:
        return _columns(<const unsigned char *>pybuf.buf, pybuf.len, base_offset)
    finally:
        PyBuffer_Release(&pybuf)


cdef object _columns(const unsigned char *buf, Py_ssize_t length, object base_offset):
    cdef list offsets = [], payloads = [], indexes = []
    cdef Py_ssize_t pos = 0, end, cut, index
    cdef int32_t size
    cdef long long base = 0
    cdef bint small_base = _small(base_offset)
    cdef object m
    if small_base:
        base = base_offset
    while pos + ENTRY_OVERHEAD <= length:
        pos = _plain_columns(buf, pos, length, base, small_base, base_offset, offsets, payloads)
        if pos + ENTRY_OVERHEAD > length:
            break
        size = _int32(buf + pos)
        end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
        if size >= MIN_MESSAGE_SIZE and end > length:
            break  # a partial trailing entry
        if len(indexes) < len(payloads):
            indexes.extend([0] * (len(payloads) - len(indexes)))  # the plain run's
        # the reference's data[pos : max(end, pos + 4)]: at least the size, at most the rest
        cut = end if end > pos + ENTRY_OVERHEAD else pos + ENTRY_OVERHEAD
        if cut > length:
            cut = length
        index = 0
        for m in iter_messages(
            PyBytes_FromStringAndSize(<const char *>buf + pos, cut - pos), base_offset + pos
        ):
            offsets.append(m.offset)
            indexes.append(index)
            payloads.append(m.payload)
            index += 1
        pos = end
    if len(indexes) < len(payloads):
        indexes.extend([0] * (len(payloads) - len(indexes)))
    return tuple.__new__(_MessageColumns, (offsets, indexes, payloads, pos))


cdef Py_ssize_t _plain_columns(
    const unsigned char *buf,
    Py_ssize_t pos,
    Py_ssize_t length,
    long long base,
    bint small_base,
    object base_offset,
    list offsets,
    list payloads,
) except -1:
    """message_set.plain_run_python's walk: each whole, plain magic-1 entry's absolute offset
    and payload appended, each CRC checked (a mismatch raises CorruptMessageError naming the
    entry's offset, as message_set._check_crcs does); where the run stops."""
    cdef Py_ssize_t last_header = length - 10  # a magic-1 entry's header fits
    cdef Py_ssize_t end
    cdef int32_t size
    while pos <= last_header:
        size = _int32(buf + pos)
        end = pos + 4 + <Py_ssize_t>size
        if buf[pos + 4] != 1 or buf[pos + 5] or size < 6 or end > length:
            break
        if _crc(buf + pos + 10, end - pos - 10) != _uint32(buf + pos + 6):
            raise CorruptMessageError(f"CRC mismatch in the entry at offset {base_offset + pos}")
        PyList_Append(payloads, PyBytes_FromStringAndSize(<const char *>buf + pos + 10, end - pos - 10))
        PyList_Append(offsets, base + pos if small_base else base_offset + pos)
        pos = end
    return pos


cdef inline bint _small(object base_offset):
    """Offsets from `base_offset` can be computed as C long longs (the usual case)."""
    return PyLong_CheckExact(base_offset) and 0 <= base_offset <= (1LL << 62)


def iter_messages(buffer, base_offset=0):
    """message_set.iter_messages_python, compiled: the same Messages, and the same error
    after the same messages (a generator, as the reference)."""
    cdef const unsigned char *buf
    cdef Py_ssize_t length, pos = 0, end, last_header, payload_start
    cdef int32_t size
    cdef unsigned char magic, attributes
    cdef uint32_t crc
    cdef long long base = 0
    cdef bint small_base
    cdef object data, offset, next_offset, payload, one = 1
    if _Message is None:
        _bind()
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    buf = <const unsigned char *>PyBytes_AS_STRING(data)
    length = PyBytes_GET_SIZE(data)
    last_header = length - 10  # a magic-1 entry's header fits
    small_base = _small(base_offset)
    if small_base:
        base = base_offset
    while pos + ENTRY_OVERHEAD <= length:
        # Whole, plain magic-1 entries: nearly every entry. Anything else goes to the
        # general path below.
        while pos <= last_header:
            size = _int32(buf + pos)
            end = pos + 4 + <Py_ssize_t>size
            if buf[pos + 4] != 1 or buf[pos + 5] or size < 6 or end > length:
                break
            if _crc(buf + pos + 10, end - pos - 10) != _uint32(buf + pos + 6):
                raise CorruptMessageError(f"CRC mismatch in the entry at offset {base_offset + pos}")
            payload = PyBytes_FromStringAndSize(<const char *>buf + pos + 10, end - pos - 10)
            if small_base:
                yield lb_message(_Message, base + pos, base + end, payload, one, buf[pos + 5])
            else:
                yield lb_message(
                    _Message, base_offset + pos, base_offset + end, payload, one, buf[pos + 5]
                )
            pos = end
        if pos + ENTRY_OVERHEAD > length:
            return
        size = _int32(buf + pos)
        offset = base_offset + pos
        if size < MIN_MESSAGE_SIZE:
            raise CorruptMessageError(
                f"entry at offset {offset} declares {size} bytes, "
                f"under the minimum message size {MIN_MESSAGE_SIZE}"
            )
        end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
        if end > length:
            return
        magic = buf[pos + 4]
        if magic == 1:
            if size < MAGIC1_HEADER:
                raise CorruptMessageError(f"magic 1 entry at offset {offset} is only {size} bytes")
            attributes = buf[pos + 5]
            crc = _uint32(buf + pos + 6)
            payload_start = pos + 10
        elif magic == 0:
            attributes = 0
            crc = _uint32(buf + pos + 5)
            payload_start = pos + 9
        else:
            raise UnknownMagicError(f"unknown magic byte {magic} in the entry at offset {offset}")
        if _crc(buf + payload_start, end - payload_start) != crc:
            raise CorruptMessageError(f"CRC mismatch in the entry at offset {offset}")
        if attributes & ~CODEC_MASK:
            raise unused_attribute_bits(attributes, offset)
        next_offset = base_offset + end
        payload = PyBytes_FromStringAndSize(<const char *>buf + payload_start, end - payload_start)
        pos = end
        if not attributes & CODEC_MASK:
            yield lb_message(_Message, offset, next_offset, payload, magic, attributes)
            continue
        yield from _unwrapped(
            attributes & CODEC_MASK, payload, offset, next_offset, validate, iter_messages
        )


def stored_set_end(buffer, base_offset=0):
    """message_set.stored_set_end_python, compiled: the same (bytes, entries), or the same
    error. Buffers other than bytes and bytearray go to the reference."""
    cdef Py_buffer pybuf
    if not (isinstance(buffer, bytes) or PyByteArray_Check(buffer)):
        if _Message is None:
            _bind()
        return _stored_set_end_python(buffer, base_offset)
    PyObject_GetBuffer(buffer, &pybuf, PyBUF_SIMPLE)
    try:
        return _stored_set_end(<const unsigned char *>pybuf.buf, pybuf.len, base_offset)
    finally:
        PyBuffer_Release(&pybuf)


cdef tuple _stored_set_end(const unsigned char *buf, Py_ssize_t length, object base_offset):
    cdef Py_ssize_t pos = 0, entries = 0, end, crc_at
    cdef int32_t size
    cdef unsigned char magic
    while pos + ENTRY_OVERHEAD <= length:
        size = _int32(buf + pos)
        end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
        if size < MIN_MESSAGE_SIZE:
            raise CorruptMessageError(
                f"entry at offset {base_offset + pos} declares {size} bytes, "
                f"under the minimum message size {MIN_MESSAGE_SIZE}"
            )
        if end > length:
            break
        magic = buf[pos + ENTRY_OVERHEAD]
        if magic == 1:
            if size < MAGIC1_HEADER:
                raise CorruptMessageError(
                    f"magic 1 entry at offset {base_offset + pos} is only {size} bytes"
                )
            crc_at = pos + ENTRY_OVERHEAD + 2
        elif magic == 0:
            crc_at = pos + ENTRY_OVERHEAD + 1
        else:
            raise UnknownMagicError(
                f"unknown magic byte {magic} in the entry at offset {base_offset + pos}"
            )
        if _crc(buf + crc_at + 4, end - crc_at - 4) != _uint32(buf + crc_at):
            raise CorruptMessageError(f"CRC mismatch in the entry at offset {base_offset + pos}")
        if magic == 1 and buf[pos + ENTRY_OVERHEAD + 1] & ~CODEC_MASK:
            raise unused_attribute_bits(buf[pos + ENTRY_OVERHEAD + 1], base_offset + pos)
        pos = end
        entries += 1
    return pos, entries


cdef bint _flat(object buffer):
    """Whether the loops read `buffer` as it is: bytes, a bytearray, or a one-dimensional
    contiguous view of bytes (what a fetch is); anything else goes to the reference."""
    if isinstance(buffer, bytes) or PyByteArray_Check(buffer):
        return True
    return isinstance(buffer, memoryview) and buffer.ndim == 1 and buffer.itemsize == 1 and buffer.c_contiguous


def whole_entries(buffer):
    """message_set.whole_entries_python, compiled: (where the whole entries at the start of
    `buffer` end, how many there are); sizes only."""
    cdef Py_buffer pybuf
    cdef Py_ssize_t pos = 0, count = 0, length, end
    cdef int32_t size
    cdef const unsigned char *buf
    if not _flat(buffer):
        if _Message is None:
            _bind()
        return _whole_entries_python(buffer)
    PyObject_GetBuffer(buffer, &pybuf, PyBUF_SIMPLE)
    try:
        buf = <const unsigned char *>pybuf.buf
        length = pybuf.len
        while pos + ENTRY_OVERHEAD <= length:
            size = _int32(buf + pos)
            end = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
            if size < MIN_MESSAGE_SIZE or end > length:
                break
            pos = end
            count += 1
    finally:
        PyBuffer_Release(&pybuf)
    return pos, count


def entry_at_or_after(buffer, Py_ssize_t position, Py_ssize_t end):
    """message_set.entry_at_or_after_python, compiled: where the first entry starting at or
    after `position` is, walking the whole entries before `end` (`end` if none does)."""
    cdef Py_buffer pybuf
    cdef Py_ssize_t pos = 0, length, after
    cdef int32_t size
    cdef const unsigned char *buf
    if not _flat(buffer):
        if _Message is None:
            _bind()
        return _entry_at_or_after_python(buffer, position, end)
    PyObject_GetBuffer(buffer, &pybuf, PyBUF_SIMPLE)
    try:
        buf = <const unsigned char *>pybuf.buf
        length = pybuf.len
        while pos < end and pos < position:
            if pos + ENTRY_OVERHEAD > length:
                size = -1
            else:
                size = _int32(buf + pos)
            after = pos + ENTRY_OVERHEAD + <Py_ssize_t>size
            if size < MIN_MESSAGE_SIZE or after > length:
                raise ValueError(f"no whole entry at {pos}: {end} is past the whole entries")
            pos = after
    finally:
        PyBuffer_Release(&pybuf)
    return min(pos, end)


# The largest payload whose entry size still fits the int32 field; a larger one goes to the
# reference, whose struct.pack names it.
cdef Py_ssize_t _MAX_PAYLOAD = 0x7FFFFFFF - MAGIC1_HEADER


def build_message_set(payloads, codec=0, magic=1):
    """message_set.build_message_set_python, compiled: the same bytes, or the same error.

    One pass collects the payloads, a second writes every header and payload into one bytes
    object. The first payload that is not exactly bytes hands the whole set, in order, to
    the reference (which then consumes the rest of `payloads` as it would have).
    """
    if _Message is None:
        _bind()
    cdef bint whole = False
    if magic == 0 and codec == 0:
        return _build(payloads, codec, magic, 0, &whole)
    if magic not in (0, 1):
        raise UnknownMagicError(f"unknown magic byte {magic} (known: 0, 1)")
    inner = _build(payloads, codec, magic, 1, &whole)
    if whole or codec == 0:
        return inner
    return _wrap(codec, inner)


cdef object _build(
    object payloads, object codec, object magic, unsigned char entry_magic, bint *whole
):
    """The entries of `payloads` (`entry_magic`, no codec); or, with `whole` set, what the
    reference built of the whole call."""
    cdef list items = []
    cdef Py_ssize_t total = 0, header = MAGIC1_HEADER if entry_magic else MAGIC0_HEADER
    cdef object it = iter(payloads), p
    for p in it:
        if not PyBytes_CheckExact(p) or PyBytes_GET_SIZE(p) > _MAX_PAYLOAD:
            whole[0] = True
            return _build_message_set_python(_chain(items, (p,), it), codec, magic)
        items.append(p)
        total += ENTRY_OVERHEAD + header + PyBytes_GET_SIZE(p)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, total)
    _write_entries(<unsigned char *>PyBytes_AS_STRING(out), items, entry_magic)
    return out


cdef unsigned char *_write_entries(
    unsigned char *w, list items, unsigned char entry_magic
) except NULL:
    """Each payload of `items` (exactly bytes) as an entry at `w`: where they end."""
    cdef Py_ssize_t n, size, header = MAGIC1_HEADER if entry_magic else MAGIC0_HEADER
    cdef const unsigned char *src
    cdef uint32_t crc
    cdef object p
    for p in items:
        n = PyBytes_GET_SIZE(p)
        src = <const unsigned char *>PyBytes_AS_STRING(p)
        size = header + n
        w[0] = <unsigned char>(size >> 24)
        w[1] = <unsigned char>(size >> 16)
        w[2] = <unsigned char>(size >> 8)
        w[3] = <unsigned char>size
        w[4] = entry_magic
        if entry_magic:
            w[5] = 0
        crc = _crc(src, n)
        w += header - 4 + ENTRY_OVERHEAD
        w[0] = <unsigned char>(crc >> 24)
        w[1] = <unsigned char>(crc >> 16)
        w[2] = <unsigned char>(crc >> 8)
        w[3] = <unsigned char>crc
        w += 4
        memcpy(w, src, n)
        w += n
    return w


cdef inline void _put_int32(unsigned char *w, int64_t v) noexcept nogil:
    w[0] = <unsigned char>(v >> 24)
    w[1] = <unsigned char>(v >> 16)
    w[2] = <unsigned char>(v >> 8)
    w[3] = <unsigned char>v


def encode_produce_set(prefix, partition, payloads, codec=0):
    """requests.encode_produce_set_python, compiled: the same PRODUCE frame, or the same
    error. Plain sets (codec 0) are written straight into the frame, one bytes object for
    the whole request; a codec, a payload that is not exactly bytes, or anything the
    reference would refuse goes to the reference (the payloads taken so far first)."""
    global _encode_produce_set_python
    cdef list items = []
    cdef Py_ssize_t total = 0, prefix_size
    cdef object it, p
    if _encode_produce_set_python is None:
        from logbroker.protocol import requests

        _encode_produce_set_python = requests.encode_produce_set_python
    if (
        codec != 0
        or not PyBytes_CheckExact(prefix)
        or not PyLong_CheckExact(partition)
        or not -0x80000000 <= partition <= 0x7FFFFFFF
    ):
        return _encode_produce_set_python(prefix, partition, payloads, codec)
    it = iter(payloads)
    for p in it:
        if not PyBytes_CheckExact(p) or PyBytes_GET_SIZE(p) > _MAX_PAYLOAD:
            return _encode_produce_set_python(prefix, partition, _chain(items, (p,), it), codec)
        items.append(p)
        total += ENTRY_OVERHEAD + MAGIC1_HEADER + PyBytes_GET_SIZE(p)
    prefix_size = PyBytes_GET_SIZE(prefix)
    if prefix_size + 8 + total > 0x7FFFFFFF:  # the reference's struct.pack refuses it
        return _encode_produce_set_python(prefix, partition, items, codec)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 4 + prefix_size + 8 + total)
    cdef unsigned char *w = <unsigned char *>PyBytes_AS_STRING(out)
    _put_int32(w, prefix_size + 8 + total)
    memcpy(w + 4, PyBytes_AS_STRING(prefix), prefix_size)
    w += 4 + prefix_size
    _put_int32(w, <int64_t>partition)
    _put_int32(w + 4, total)
    _write_entries(w + 8, items, 1)
    return out


def decode_produce_fast(frame_body):
    """requests.decode_produce_fast_python, compiled: the same ProduceRequest (its messages a
    slice of `frame_body`), or None for the same frames. Anything but a flat memoryview of
    bytes (what the broker's connection hands over) goes to the reference."""
    global _ProduceRequest, _decode_produce_fast_python
    cdef Py_buffer pybuf
    cdef const unsigned char *buf
    cdef Py_ssize_t length, topic_end
    cdef int32_t partition, size
    if _ProduceRequest is None:
        from logbroker.protocol import requests

        _ProduceRequest = requests.ProduceRequest
        _decode_produce_fast_python = requests.decode_produce_fast_python
    if type(frame_body) is not memoryview or frame_body.format != "B" or frame_body.ndim != 1:
        return _decode_produce_fast_python(frame_body)
    try:
        PyObject_GetBuffer(frame_body, &pybuf, PyBUF_SIMPLE)
    except (BufferError, TypeError):  # not contiguous
        return _decode_produce_fast_python(frame_body)
    try:
        buf = <const unsigned char *>pybuf.buf
        length = pybuf.len
        if length < 12 or buf[0] or buf[1]:
            return None
        topic_end = 4 + ((buf[2] << 8) | buf[3])
        if buf[2] & 0x80 or topic_end + 8 > length:
            return None
        partition = _int32(buf + topic_end)
        size = _int32(buf + topic_end + 4)
        if size < 0 or topic_end + 8 + size != length:
            return None
        try:
            topic = PyUnicode_DecodeUTF8(<const char *>buf + 4, topic_end - 4, NULL)
        except UnicodeDecodeError:
            return None
    finally:
        PyBuffer_Release(&pybuf)
    return tuple.__new__(_ProduceRequest, (topic, partition, frame_body[topic_end + 8 :]))


def produce_run(frames, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_request_bytes,
                Py_ssize_t max_message_size):
    """requests.produce_run_python, compiled: the same ProduceRun (the same slices, the same
    Validations) or None, for the same frames. Each frame is decoded here as
    decode_produce_fast does and its set checked by this module's validate; the topic is
    decoded once, and the next frames' topic bytes compared with the first's. Anything but a
    flat memoryview of bytes goes to the reference."""
    global _ProduceRun, _produce_run_python
    cdef Py_buffer pybuf
    cdef const unsigned char *buf
    cdef const unsigned char *body
    cdef const unsigned char *first_topic = NULL
    cdef Py_ssize_t size, topic_length, first_length = 0, topic_end, start
    cdef int32_t frame_size, set_size, frame_partition, partition = 0
    cdef tuple check
    cdef list sets = []
    cdef object topic = None, messages
    if _ProduceRun is None:
        from logbroker.protocol import requests

        _ProduceRun = requests.ProduceRun
        _produce_run_python = requests.produce_run_python
    if _Validation is None:
        _bind()
    if type(frames) is not memoryview or frames.format != "B" or frames.ndim != 1:
        return _produce_run_python(frames, pos, end, max_request_bytes, max_message_size)
    try:
        PyObject_GetBuffer(frames, &pybuf, PyBUF_SIMPLE)
    except (BufferError, TypeError):  # not contiguous
        return _produce_run_python(frames, pos, end, max_request_bytes, max_message_size)
    try:
        buf = <const unsigned char *>pybuf.buf
        if pos < 0 or end > pybuf.len or pos > end:  # what slicing the view would give
            return _produce_run_python(frames, pos, end, max_request_bytes, max_message_size)
        while end - pos >= 4:
            frame_size = _int32(buf + pos)
            size = frame_size
            if size < 2 or size > max_request_bytes or end - pos - 4 < size:
                break
            body = buf + pos + 4
            # decode_produce_fast's checks, on the frame's body
            if size < 12 or body[0] or body[1] or body[2] & 0x80:
                break
            topic_length = (body[2] << 8) | body[3]
            topic_end = 4 + topic_length
            if topic_end + 8 > size:
                break
            frame_partition = _int32(body + topic_end)
            set_size = _int32(body + topic_end + 4)
            if set_size < 0 or topic_end + 8 + set_size != size:
                break
            if topic is None:
                try:
                    topic = PyUnicode_DecodeUTF8(<const char *>body + 4, topic_length, NULL)
                except UnicodeDecodeError:
                    break
                first_topic = body + 4
                first_length = topic_length
                partition = frame_partition
            elif (
                topic_length != first_length
                or frame_partition != partition
                or memcmp(body + 4, first_topic, topic_length)
            ):
                break
            start = pos + 4 + topic_end + 8
            messages = frames[start : start + set_size]
            # a Validation (a tuple subclass): read by index
            check = <tuple>_validate(messages, buf + start, set_size, 0, 0, None, False)
            if (
                check[4] is not None
                or not check[0]
                or check[6]
                or check[3] > max_message_size
            ):
                break
            sets.append((messages, check))
            pos += 4 + size
    finally:
        PyBuffer_Release(&pybuf)
    if not sets:
        return None
    return tuple.__new__(_ProduceRun, (topic, partition, pos, sets))


# -- The Spark source's plain entries (spark_apps/source/entry_kernels.py is the reference) --
#
# Over a fetch held as one array (the reader's numpy view of it): the positions of its run of
# plain magic-1 entries, their payloads copied into one Arrow binary column's buffers, and
# rows_sha256's bytes for them. No Python object per message; the loops run without the GIL.

def walk_entries(const unsigned char[::1] buf, int64_t[::1] entries, bint check_crc):
    """entry_kernels.walk_entries_python, compiled: (entries found, where the walk stopped,
    where the first entry whose CRC does not match is, or -1)."""
    cdef Py_ssize_t length = buf.shape[0], cap = entries.shape[0], n = 0, pos = 0, end
    cdef Py_ssize_t bad = -1
    cdef int32_t size
    cdef const unsigned char *data
    if length == 0:
        return 0, 0, -1
    if cap < length // 10 + 1:
        raise ValueError(f"room for {cap} entries, a {length}-byte buffer may hold {length // 10 + 1}")
    data = &buf[0]
    with nogil:
        while pos + 10 <= length:
            size = _int32(data + pos)
            end = pos + 4 + <Py_ssize_t>size
            # size < 6 also stops a negative (damaged) size: the general path names it
            if size < 6 or data[pos + 4] != 1 or data[pos + 5] or end > length:
                break
            if check_crc and _crc(data + pos + 10, end - pos - 10) != _uint32(data + pos + 6):
                bad = pos
                break
            entries[n] = pos
            n += 1
            pos = end
    return n, pos, bad


cdef Py_ssize_t _check_run(
    Py_ssize_t length, const int64_t[::1] entries, Py_ssize_t stop
) except -1:
    """That `entries` and `stop` are a walk of a `length`-byte buffer (ascending, each entry at
    least a header long, the last ending at `stop`); how many entries."""
    cdef Py_ssize_t n = entries.shape[0], i
    if stop < 0 or stop > length:
        raise ValueError(f"stop {stop} is outside the {length}-byte buffer")
    for i in range(n):
        if entries[i] < 0 or entries[i] + 10 > (entries[i + 1] if i + 1 < n else stop):
            raise ValueError(f"entry {i} at {entries[i]} is not a walk's entry")
    return n


def gather_payloads(
    const unsigned char[::1] buf,
    const int64_t[::1] entries,
    Py_ssize_t stop,
    unsigned char[::1] out,
    int32_t[::1] offsets,
):
    """entry_kernels.gather_payloads_python, compiled: the payloads one after another in
    `out`, offsets[i] where payload i starts (and offsets[n] where the last ends)."""
    cdef Py_ssize_t n = _check_run(buf.shape[0], entries, stop), i, start, end, at = 0
    if offsets.shape[0] != n + 1:
        raise ValueError(f"{offsets.shape[0]} offsets for {n} entries")
    if n and out.shape[0] < stop - entries[0] - 10 * n:
        raise ValueError(f"{out.shape[0]} bytes of room for {stop - entries[0] - 10 * n}")
    with nogil:
        for i in range(n):
            start = entries[i] + 10
            end = entries[i + 1] if i + 1 < n else stop
            offsets[i] = <int32_t>at
            memcpy(&out[at], &buf[start], end - start)
            at += end - start
        offsets[n] = <int32_t>at


def digest_entries(const unsigned char[::1] buf, const int64_t[::1] entries, Py_ssize_t stop, long long base):
    """entry_kernels.digest_entries_python, compiled: rows_sha256's bytes for the entries,
    offset (int64) | index (int32, 0) | length (int32) | payload per entry, big-endian."""
    cdef Py_ssize_t n = _check_run(buf.shape[0], entries, stop), i, start, end, length, k
    cdef Py_ssize_t total = (stop - entries[0] + 6 * n) if n else 0
    cdef bytes result = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char *w = <unsigned char *>PyBytes_AS_STRING(result)
    cdef unsigned long long offset
    with nogil:
        for i in range(n):
            start = entries[i] + 10
            end = entries[i + 1] if i + 1 < n else stop
            offset = <unsigned long long>(base + entries[i])
            for k in range(8):
                w[k] = <unsigned char>(offset >> (56 - 8 * k))
            w[8] = w[9] = w[10] = w[11] = 0
            length = end - start
            w[12] = <unsigned char>(length >> 24)
            w[13] = <unsigned char>(length >> 16)
            w[14] = <unsigned char>(length >> 8)
            w[15] = <unsigned char>length
            memcpy(w + 16, &buf[start], length)
            w += 16 + length
    return result
