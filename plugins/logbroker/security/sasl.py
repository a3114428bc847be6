"""The SASL exchange a connection runs before its first request, as Kafka 0.10 runs it:
a SaslHandshake request, then the mechanism's tokens as raw frames, then requests.

    handshake request   int32 size | int16 api_key=17 | int16 api_version=0
                        | int32 correlation_id | int16 C + C bytes client_id (-1: null)
                        | int16 M + M bytes mechanism
    handshake response  int32 size | int32 correlation_id | int16 error_code
                        | int32 N | N x (int16 L + L bytes enabled mechanism)
    token frames        int32 size | size bytes       (both ways; no header)

error_code is 0, or 33 (UnsupportedSaslMechanism: the response lists the enabled ones, and
the broker closes). PLAIN: one token each way (the broker's is empty). SCRAM: client-first,
server-first, client-final, server-final (scram.py). A failed check closes the connection
(SCRAM sends `e=invalid-proof` first); the broker logs one line naming the client and why.

The same exchange opens a connection on either listener, 0.7's port and port.08: the
handshake's header is 0.8's (and Kafka's), whose api key 17 no 0.7 request has, and a
listener that has not enabled SASL closes a connection that sends one.

`ServerAuthenticator` is fed the frames' bodies and says what to send (pure code; the
connections frame and write). `authenticate` runs the client's side on a blocking socket.
The principal of an authenticated connection is `User:<name>`, as Kafka's.
"""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..protocol.errors import LogbrokerError
from .scram import (
    MECHANISMS,
    PLAIN,
    SCRAM_MECHANISMS,
    AuthenticationFailed,
    CredentialLookup,
    PlainServer,
    SaslError,
    ScramClient,
    ScramServer,
    plain_message,
    server_for,
)

SASL_HANDSHAKE = 17
UNSUPPORTED_SASL_MECHANISM = 33
# The largest token frame either side takes: Kafka's sasl.server.max.receive.size. A SCRAM
# or PLAIN message is a few hundred bytes; a larger size closes the connection at once.
MAX_FRAME = 512 * 1024
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")


class SaslAuthenticationError(LogbrokerError):
    """The client could not authenticate: the message says which broker, user, mechanism,
    and what the broker did. Not retried: the same credentials fail the same way."""


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """`sasl.enabled.mechanisms`: comma-separated, from PLAIN, SCRAM-SHA-256, SCRAM-SHA-512;
    empty: SASL off. ValueError naming an unknown one."""
    names = tuple(dict.fromkeys(n.strip().upper() for n in text.split(",") if n.strip()))
    for name in names:
        if name not in MECHANISMS:
            raise ValueError(f"unknown SASL mechanism {name!r}: known are {', '.join(MECHANISMS)}")
    return names


# -- the handshake's frames -----------------------------------------------------------------------


def _string(data: bytes, pos: int, what: str, nullable: bool = False) -> tuple[str | None, int]:
    if len(data) - pos < 2:
        raise SaslError(f"the SaslHandshake request is cut in its {what}'s length")
    (size,) = _I16.unpack_from(data, pos)
    pos += 2
    if size == -1 and nullable:
        return None, pos
    if size < 0 or len(data) - pos < size:
        raise SaslError(f"the SaslHandshake request's {what} length {size} is past its end")
    try:
        return data[pos : pos + size].decode("utf-8"), pos + size
    except UnicodeDecodeError:
        raise SaslError(f"the SaslHandshake request's {what} is not UTF-8") from None


def decode_handshake(body: bytes) -> tuple[int, str]:
    """A SaslHandshake request's body (after its size) -> (correlation_id, mechanism)."""
    if len(body) >= 2 and _I16.unpack_from(body)[0] != SASL_HANDSHAKE:
        raise SaslError(
            f"expected a SaslHandshake (api key {SASL_HANDSHAKE}) before any other request, "
            f"got api key {_I16.unpack_from(body)[0]}: a listener with SASL "
            "(sasl.enabled.mechanisms) serves nothing before the login"
        )
    if len(body) < _HEADER.size:
        raise SaslError(
            f"the first request is {len(body)} bytes, too short for a SaslHandshake header"
        )
    _api_key, version, correlation_id = _HEADER.unpack_from(body)
    if version != 0:
        raise SaslError(f"SaslHandshake version {version} is not served (only 0, Kafka 0.10's)")
    _client, pos = _string(body, _HEADER.size, "client id", nullable=True)
    mechanism, pos = _string(body, pos, "mechanism")
    if pos != len(body):
        raise SaslError(f"the SaslHandshake request has {len(body) - pos} bytes after its end")
    assert mechanism is not None
    return correlation_id, mechanism


def encode_handshake(
    mechanism: str, correlation_id: int = 0, client_id: str = "logbroker"
) -> bytes:
    body = _HEADER.pack(SASL_HANDSHAKE, 0, correlation_id) + _str(client_id) + _str(mechanism)
    return _I32.pack(len(body)) + body


def _str(text: str) -> bytes:
    data = text.encode("utf-8")
    return _I16.pack(len(data)) + data


def encode_handshake_response(correlation_id: int, error: int, mechanisms: Sequence[str]) -> bytes:
    body = _I32.pack(correlation_id) + _I16.pack(error) + _I32.pack(len(mechanisms))
    body += b"".join(_str(m) for m in mechanisms)
    return _I32.pack(len(body)) + body


def decode_handshake_response(body: bytes) -> tuple[int, int, list[str]]:
    """-> (correlation_id, error_code, enabled mechanisms)."""
    try:
        correlation_id, error, count = struct.unpack_from(">ihi", body)
        pos, names = 10, []
        for _ in range(count):
            (size,) = _I16.unpack_from(body, pos)
            names.append(body[pos + 2 : pos + 2 + size].decode())
            pos += 2 + size
    except (struct.error, UnicodeDecodeError):
        raise SaslError("the SaslHandshake response is malformed") from None
    return correlation_id, error, names


def frame(token: bytes) -> bytes:
    return _I32.pack(len(token)) + token


# -- the broker's side ----------------------------------------------------------------------------


@dataclass
class Step:
    """What one received frame makes the broker do: send `reply` (framed, may be empty),
    then close if `failure` says why."""

    reply: bytes
    failure: str | None = None


class ServerAuthenticator:
    """One connection's exchange, broker side. `receive(body)` for each frame's body (the
    handshake first, then the tokens); `complete` and `principal` once it succeeded.
    Malformed frames raise SaslError (close the connection, naming it)."""

    def __init__(self, mechanisms: Sequence[str], lookup: CredentialLookup) -> None:
        self.mechanisms = tuple(mechanisms)
        self._lookup = lookup
        self._mechanism: ScramServer | PlainServer | None = None
        self.complete = False
        self.principal: str | None = None

    @property
    def stage(self) -> str:
        """Where the exchange is, for log lines."""
        if self._mechanism is None:
            return "before the SaslHandshake"
        return f"during {self._mechanism.mechanism} authentication"

    def receive(self, body: bytes) -> Step:
        if self.complete:
            raise SaslError("a SASL frame after authentication completed")
        if self._mechanism is None:
            correlation_id, mechanism = decode_handshake(body)
            if mechanism not in self.mechanisms:
                reply = encode_handshake_response(
                    correlation_id, UNSUPPORTED_SASL_MECHANISM, self.mechanisms
                )
                enabled = ", ".join(self.mechanisms)
                return Step(reply, f"SASL mechanism {mechanism[:40]!r} is not enabled ({enabled})")
            self._mechanism = server_for(mechanism, self._lookup)
            return Step(encode_handshake_response(correlation_id, 0, self.mechanisms))
        mech = self._mechanism
        try:
            reply = mech.step(body)
        except AuthenticationFailed as exc:
            return Step(frame(exc.reply) if exc.reply else b"", str(exc))
        if mech.complete:
            self.complete = True
            self.principal = f"User:{mech.username}"
        return Step(frame(reply))


# -- the client's side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SaslClientConfig:
    """A client's SASL settings: Kafka's `sasl.mechanism`, and the user and password that
    `sasl.jaas.config` gives (or `sasl.username` and `sasl.password`)."""

    mechanism: str
    username: str
    password: str

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(
                f"sasl.mechanism={self.mechanism!r}: known are {', '.join(MECHANISMS)}"
            )
        if not self.username or not self.password:
            raise ValueError(
                f"sasl.mechanism={self.mechanism} needs sasl.username and sasl.password "
                "(or sasl.jaas.config with username= and password=)"
            )

    def __repr__(self) -> str:  # never the password, in logs or tracebacks
        return f"SaslClientConfig({self.mechanism}, user {self.username!r})"

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> SaslClientConfig | None:
        """From client properties; None without `sasl.mechanism`."""
        mechanism = properties.get("sasl.mechanism", "").strip().upper()
        if not mechanism:
            return None
        username = properties.get("sasl.username", "")
        password = properties.get("sasl.password", "")
        jaas = properties.get("sasl.jaas.config", "")
        if jaas:
            found = dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', jaas))
            username = found.get("username", username)
            password = found.get("password", password)
        return cls(mechanism, username, password)


def authenticate(sock: socket.socket, config: SaslClientConfig, address: str) -> str:
    """Run the exchange on a new blocking socket; the principal. Raises
    SaslAuthenticationError (the caller closes the socket)."""
    what = f"SASL {config.mechanism} authentication of user {config.username!r} to broker {address}"
    try:
        sock.sendall(encode_handshake(config.mechanism))
        body = _read_frame(sock, "the SaslHandshake response", what)
        _correlation, error, enabled = decode_handshake_response(body)
        if error == UNSUPPORTED_SASL_MECHANISM:
            raise SaslAuthenticationError(
                f"{what} failed: the broker does not enable {config.mechanism} "
                f"(its sasl.enabled.mechanisms: {', '.join(enabled) or 'none'})"
            )
        if error:
            raise SaslAuthenticationError(f"{what} failed: the SaslHandshake got error {error}")
        if config.mechanism == PLAIN:
            sock.sendall(frame(plain_message(config.username, config.password)))
            _read_frame(sock, "the answer to the PLAIN token", what)
        else:
            assert config.mechanism in SCRAM_MECHANISMS
            client = ScramClient(config.mechanism, config.username, config.password)
            sock.sendall(frame(client.first()))
            server_first = _read_frame(sock, "the SCRAM server-first message", what)
            sock.sendall(frame(client.final(server_first)))
            client.verify(_read_frame(sock, "the SCRAM server-final message", what))
    except SaslAuthenticationError:
        raise
    except SaslError as exc:  # AuthenticationFailed included
        raise SaslAuthenticationError(f"{what} failed: {exc}") from None
    except (BlockingIOError, TimeoutError):  # the socket's own timeout (SO_RCVTIMEO)
        raise SaslAuthenticationError(
            f"{what} failed: the broker did not answer in time (is it a logbroker or Kafka "
            "listener?)"
        ) from None
    except OSError as exc:
        raise SaslAuthenticationError(f"{what} failed: {exc}") from None
    return f"User:{config.username}"


def _read_frame(sock: socket.socket, expected: str, what: str) -> bytes:
    size_bytes = _read_exactly(sock, 4, expected, what)
    (size,) = _I32.unpack(size_bytes)
    if not 0 <= size <= MAX_FRAME:
        raise SaslAuthenticationError(f"{what} failed: {expected} has a size of {size}")
    return _read_exactly(sock, size, expected, what)


def _read_exactly(sock: socket.socket, size: int, expected: str, what: str) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            if "SaslHandshake" in expected:
                why = "does its listener enable SASL (sasl.enabled.mechanisms)?"
            else:
                why = "wrong user name or password, or an unknown user (the broker logs why)"
            raise SaslAuthenticationError(
                f"{what} failed: the broker closed the connection instead of sending "
                f"{expected}: {why}"
            )
        data += chunk
    return bytes(data)
