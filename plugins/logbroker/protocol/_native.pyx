# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The message-set walks every message crosses, compiled (issue 33).

Each function here is the compiled twin of one in message_set.py, which stays the reference:
same results, same errors, same messages for the same bytes (tests/protocol run both and
compare them). message_set.py picks these when this module imports, unless
LOGBROKER_PURE_PYTHON=1 (protocol/native.py). The byte layout is message.py's; CRC32 is
zlib's C function, the one Python's zlib.crc32 calls.

Only the loops are here. What is rare and not per message stays in Python and is called
from here: building the error of a damaged entry, and inflating and checking a compressed
set (message_set._validate_compressed, which validates the inner set with this module
again).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from libc.stdint cimport int32_t, uint32_t


cdef extern from "zlib.h":
    unsigned long crc32(unsigned long crc, const unsigned char *buf, unsigned int len) nogil


from logbroker.protocol.compression import CODEC_NAMES as _CODEC_NAMES
from logbroker.protocol.errors import CorruptMessageError, UnknownMagicError

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


cdef void _bind() except *:
    global _Validation, _stored_budget, _validate_compressed, _validate_python
    from logbroker.protocol import message_set

    _Validation = message_set.Validation
    _stored_budget = message_set.InflateBudget.stored
    _validate_compressed = message_set._validate_compressed
    _validate_python = message_set.validate_python


cdef inline int32_t _int32(const unsigned char *p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline uint32_t _uint32(const unsigned char *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint32_t _crc(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    # n < 2**31: it comes from an int32 size
    return <uint32_t>crc32(0, p, <unsigned int>n)


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
    cdef Py_ssize_t last_header = length - 10  # a magic-1 entry's header fits
    cdef int32_t size
    cdef unsigned char magic, attributes, codec
    cdef uint32_t crc, computed
    cdef object error = None, view = None, inner_count
    while pos + ENTRY_OVERHEAD <= length:
        # Whole, plain, intact magic-1 entries: nearly every entry. Anything else, a damaged
        # entry included, goes to the general path below, which names it.
        while pos <= last_header:
            size = _int32(data + pos)
            end = pos + 4 + <Py_ssize_t>size
            if data[pos + 4] != 1 or data[pos + 5] & 3 or size < 6 or end > length:
                break
            if _crc(data + pos + 10, end - pos - 10) != _uint32(data + pos + 6):
                break
            if size - 6 > largest:
                largest = size - 6
            entries += 1
            messages += 1
            pos = end
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


def plain_run(bytes data, Py_ssize_t pos, object base_offset, list offsets, list payloads):
    """message_columns' walk of a run of plain magic-1 entries from `pos`, compiled.

    Appends each entry's absolute offset and payload, checks each CRC (a mismatch raises
    CorruptMessageError naming the entry's offset, as message_set._check_crcs does), and
    returns where the run stops: at the first entry that is not whole, plain and magic 1.
    """
    cdef const unsigned char *buf = <const unsigned char *>PyBytes_AS_STRING(data)
    cdef Py_ssize_t length = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t last_header = length - 10
    cdef Py_ssize_t end
    cdef int32_t size
    cdef long long base = 0
    cdef bint small_base = False
    if pos < 0:
        raise ValueError(f"pos {pos} is negative")
    try:
        base = base_offset
        small_base = base >= 0 and base <= (1LL << 62)
    except OverflowError:
        pass
    while pos <= last_header:
        size = _int32(buf + pos)
        end = pos + 4 + <Py_ssize_t>size
        if buf[pos + 4] != 1 or buf[pos + 5] & 3 or size < 6 or end > length:
            break
        if _crc(buf + pos + 10, end - pos - 10) != _uint32(buf + pos + 6):
            raise CorruptMessageError(f"CRC mismatch in the entry at offset {base_offset + pos}")
        PyList_Append(payloads, PyBytes_FromStringAndSize(<const char *>buf + pos + 10, end - pos - 10))
        PyList_Append(offsets, base + pos if small_base else base_offset + pos)
        pos = end
    return pos
