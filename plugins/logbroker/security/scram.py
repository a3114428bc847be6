"""SASL/SCRAM-SHA-256 and -512 (RFC 5802, RFC 7677) and SASL/PLAIN (RFC 4616): the
server's and the client's side of each, as pure state machines (bytes in, bytes out).

SCRAM, as Kafka 0.10.2 runs it (no channel binding; SASLprep not applied, as Kafka does not):

    client-first  n,[a=<authzid>],n=<user>,r=<client nonce>
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 of "n,[a=<authzid>],">,r=<nonce>,p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>          or  e=<error> on failure

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey = HMAC(SaltedPassword, "Client Key")    StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")
    AuthMessage = client-first-bare "," server-first "," client-final-without-proof
    ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

The server keeps only (salt, StoredKey, ServerKey, iterations), in Kafka's string form
(`ScramCredential.to_config`): it checks a proof by recovering ClientKey from it and
comparing H(ClientKey) with StoredKey in constant time. An unknown user is answered with a
made-up salt (the same for the same name), so that a client cannot tell it from a wrong
password: both end in `e=invalid-proof`.

PLAIN is `[authzid] NUL user NUL password`. The broker checks it against the user's SCRAM
credential (the one store, salted and hashed): the password is salted and hashed as SCRAM
would and its StoredKey compared, so no password is ever kept anywhere.

Every malformed or cut message raises SaslError naming what is wrong; a failed check raises
AuthenticationFailed (the server-final to send, if any, is its `reply`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

from ..protocol.errors import LogbrokerError

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
PLAIN = "PLAIN"
SCRAM_MECHANISMS: dict[str, str] = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
# Kafka's bounds on a credential's iterations (ScramMechanism.minIterations, maxIterations).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 16
MAX_NAME_BYTES = 255  # RFC 4616's limit on PLAIN's fields; SCRAM's user names too


class SaslError(LogbrokerError):
    """A SASL message that is malformed, cut, or out of turn; the message says what."""


class AuthenticationFailed(SaslError):
    """Wrong password or unknown user. `reply`: what the server sends before closing."""

    def __init__(self, message: str, reply: bytes = b"") -> None:
        super().__init__(message)
        self.reply = reply


@dataclass(frozen=True)
class ScramCredential:
    """What the server stores for one user and mechanism: never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        """Kafka's form: `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_config(cls, text: str) -> ScramCredential:
        """Parse `to_config`'s form; ValueError naming what is missing or wrong."""
        fields: dict[str, str] = {}
        for item in text.split(","):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"a SCRAM credential field is key=value, got {item!r}")
            fields[key.strip()] = value.strip()
        missing = [k for k in ("salt", "stored_key", "server_key", "iterations") if k not in fields]
        if missing:
            raise ValueError(f"the SCRAM credential has no {', '.join(missing)}")
        try:
            iterations = int(fields["iterations"])
            salt, stored, server = (
                base64.b64decode(fields[k], validate=True)
                for k in ("salt", "stored_key", "server_key")
            )
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"the SCRAM credential is not valid: {exc}") from None
        return cls(salt, stored, server, iterations)


def _hash(mechanism: str) -> str:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        raise SaslError(
            f"unknown SCRAM mechanism {mechanism!r}: use {' or '.join(SCRAM_MECHANISMS)}"
        ) from None


def _hmac(name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, name).digest()


def _salted_keys(name: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(ClientKey, ServerKey) of a password."""
    salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)
    return _hmac(name, salted, b"Client Key"), _hmac(name, salted, b"Server Key")


def check_iterations(iterations: int) -> int:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"iterations={iterations}: SCRAM iterations must be {MIN_ITERATIONS} to "
            f"{MAX_ITERATIONS} (Kafka's bounds)"
        )
    return iterations


def make_credential(
    mechanism: str,
    password: str,
    *,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for `password`: a random salt unless given."""
    name = _hash(mechanism)
    if not password:
        raise ValueError("the password is empty")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    client_key, server_key = _salted_keys(name, password, salt, check_iterations(iterations))
    return ScramCredential(salt, hashlib.new(name, client_key).digest(), server_key, iterations)


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `credential` was made from (constant-time compare)."""
    name = _hash(mechanism)
    client_key, _ = _salted_keys(name, password, credential.salt, credential.iterations)
    return hmac.compare_digest(hashlib.new(name, client_key).digest(), credential.stored_key)


# -- message syntax (RFC 5802 §7) -------------------------------------------------------------


def _text(message: bytes, what: str) -> str:
    if not message:
        raise SaslError(f"the {what} is empty")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError(f"the {what} is not UTF-8") from None


def _attributes(text: str, what: str, expected: str) -> list[tuple[str, str]]:
    """`a=x,b=y` -> [(a, x), (b, y)], checked against the attribute letters `expected` (in
    order, at the start; extensions after them are allowed and ignored)."""
    if not text:
        raise SaslError(f"the {what} is cut: it has no attributes")
    out: list[tuple[str, str]] = []
    for item in text.split(","):
        if len(item) < 2 or item[1] != "=" or not item[0].isalpha():
            raise SaslError(f"the {what} has a malformed attribute {item[:40]!r} (want x=value)")
        out.append((item[0], item[2:]))
    if out and out[0][0] == "m":
        raise SaslError(f"the {what} asks for a mandatory extension (m=), none is supported")
    got = "".join(k for k, _ in out[: len(expected)])
    if got != expected:
        want = ",".join(f"{k}=" for k in expected)
        raise SaslError(f"the {what} is cut or out of order: want {want}..., got {text[:80]!r}")
    return out


def _saslname(value: str, what: str) -> str:
    """RFC 5802's escaped name: `=2C` is ',' and `=3D` is '='; any other '=' is an error."""
    out, i = [], 0
    while i < len(value):
        if value[i] == "=":
            code = value[i : i + 3]
            if code not in ("=2C", "=3D"):
                raise SaslError(f"the {what} has a bad escape {code!r} (only =2C and =3D)")
            out.append("," if code == "=2C" else "=")
            i += 3
        else:
            out.append(value[i])
            i += 1
    name = "".join(out)
    if not name:
        raise SaslError(f"the {what} is empty")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise SaslError(f"the {what} is longer than {MAX_NAME_BYTES} bytes")
    return name


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _nonce(value: str, what: str) -> str:
    if not value or not all(0x21 <= ord(c) <= 0x7E and c != "," for c in value):
        raise SaslError(f"the {what} is empty or not printable ASCII")
    return value


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise SaslError(f"the {what} is not valid base64") from None


def _new_nonce() -> str:
    return base64.b64encode(os.urandom(18)).decode()


# -- the server ---------------------------------------------------------------------------------


CredentialLookup = Callable[[str, str], "ScramCredential | None"]  # (user, mechanism)


class ScramServer:
    """One SCRAM exchange, server side: `step(client_first)` -> server-first,
    `step(client_final)` -> server-final; then `complete` and `username`."""

    def __init__(
        self,
        mechanism: str,
        lookup: CredentialLookup,
        *,
        nonce: str | None = None,
        unknown_user_secret: bytes = b"",
    ) -> None:
        """`nonce`: the server's part (tests pass RFC 7677's); `unknown_user_secret`: keys
        the made-up salt of unknown users (random per server when empty)."""
        self.mechanism = mechanism
        self._name = _hash(mechanism)
        self._lookup = lookup
        self._nonce = nonce or _new_nonce()
        self._secret = unknown_user_secret or os.urandom(32)
        self._credential: ScramCredential | None = None
        self._known = False
        self._first_bare = self._server_first = self._gs2 = ""
        self._state = 0
        self.username: str | None = None
        self.complete = False

    def step(self, message: bytes) -> bytes:
        if self._state == 0:
            self._state = 1
            return self._first(message)
        if self._state == 1:
            self._state = 2
            return self._final(message)
        raise SaslError("a SCRAM message after the exchange ended")

    def _first(self, message: bytes) -> bytes:
        text = _text(message, "SCRAM client-first message")
        flag, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2:
            raise SaslError(f"the SCRAM client-first message is cut: {text[:80]!r}")
        if flag.startswith("p="):
            raise SaslError("the client asks for channel binding (p=), which is not supported")
        if flag not in ("n", "y"):
            raise SaslError(f"the SCRAM client-first message has a bad GS2 flag {flag[:10]!r}")
        attrs = _attributes(bare, "SCRAM client-first message", "nr")
        user = _saslname(attrs[0][1], "SCRAM user name")
        if authzid and (not authzid.startswith("a=") or _saslname(authzid[2:], "authzid") != user):
            raise SaslError("the SCRAM authorization id is not the user name (Kafka's rule)")
        client_nonce = _nonce(attrs[1][1], "SCRAM client nonce")
        self.username = user
        self._gs2 = f"{flag},{authzid},"
        self._first_bare = bare
        credential = self._lookup(user, self.mechanism)
        self._known = credential is not None
        if credential is None:  # answered as a known user; the proof can never match
            fake_salt = _hmac(self._name, self._secret, user.encode())[:SALT_BYTES]
            size = hashlib.new(self._name).digest_size
            credential = ScramCredential(fake_salt, os.urandom(size), b"", DEFAULT_ITERATIONS)
        self._credential = credential
        self._nonce = client_nonce + self._nonce
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _final(self, message: bytes) -> bytes:
        text = _text(message, "SCRAM client-final message")
        without_proof, sep, proof_attr = text.rpartition(",")
        if not sep or not proof_attr.startswith("p="):
            raise SaslError("the SCRAM client-final message is cut: it ends without p=<proof>")
        attrs = _attributes(without_proof, "SCRAM client-final message", "cr")
        if _b64(attrs[0][1], "SCRAM channel binding (c=)") != self._gs2.encode():
            raise SaslError("the SCRAM channel binding (c=) is not the client-first's GS2 header")
        if attrs[1][1] != self._nonce:
            raise SaslError("the SCRAM client-final nonce is not the one of this exchange")
        proof = _b64(proof_attr[2:], "SCRAM proof (p=)")
        credential = self._credential
        assert credential is not None
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._name, credential.stored_key, auth)
        if len(proof) != len(signature):
            raise SaslError(f"the SCRAM proof is {len(proof)} bytes, want {len(signature)}")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        stored = hashlib.new(self._name, client_key).digest()
        if not (hmac.compare_digest(stored, credential.stored_key) and self._known):
            raise AuthenticationFailed(
                f"{self.mechanism} authentication of user {self.username!r} failed: wrong "
                "password or unknown user",
                reply=b"e=invalid-proof",
            )
        self.complete = True
        verifier = base64.b64encode(_hmac(self._name, credential.server_key, auth)).decode()
        return f"v={verifier}".encode()


class PlainServer:
    """SASL/PLAIN, server side: one message, checked against the user's SCRAM credential
    (the first of SCRAM-SHA-256, SCRAM-SHA-512 that the user has)."""

    mechanism = PLAIN

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self.username: str | None = None
        self.complete = False

    def step(self, message: bytes) -> bytes:
        if self.complete or self.username is not None:
            raise SaslError("a PLAIN message after the exchange ended")
        authzid, user, password = parse_plain(message)
        if authzid and authzid != user:
            raise SaslError("the PLAIN authorization id is not the user name (Kafka's rule)")
        self.username = user
        for mechanism in SCRAM_MECHANISMS:
            credential = self._lookup(user, mechanism)
            if credential is not None:
                if password_matches(mechanism, credential, password):
                    self.complete = True
                    return b""  # Kafka 0.10 answers PLAIN with an empty token
                break
        raise AuthenticationFailed(
            f"PLAIN authentication of user {user!r} failed: wrong password or unknown user"
        )


def parse_plain(message: bytes) -> tuple[str, str, str]:
    """RFC 4616: `[authzid] NUL authcid NUL passwd` -> (authzid, user, password)."""
    parts = message.split(b"\x00")
    if len(parts) != 3:
        raise SaslError(
            f"the PLAIN message has {len(parts) - 1} NUL separators, want 2 "
            "([authzid] NUL user NUL password)"
        )
    for part, what in zip(parts, ("authorization id", "user name", "password"), strict=True):
        if len(part) > MAX_NAME_BYTES:
            raise SaslError(f"the PLAIN {what} is longer than {MAX_NAME_BYTES} bytes")
    authzid, user, password = (
        _plain_text(p, w)
        for p, w in zip(parts, ("authorization id", "user name", "password"), strict=True)
    )
    if not user:
        raise SaslError("the PLAIN user name is empty")
    if not password:
        raise SaslError("the PLAIN password is empty")
    return authzid, user, password


def _plain_text(part: bytes, what: str) -> str:
    try:
        return part.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError(f"the PLAIN {what} is not UTF-8") from None


def server_for(mechanism: str, lookup: CredentialLookup) -> ScramServer | PlainServer:
    if mechanism == PLAIN:
        return PlainServer(lookup)
    return ScramServer(mechanism, lookup)


# -- the client ---------------------------------------------------------------------------------


class ScramClient:
    """One SCRAM exchange, client side: `first()`, `final(server_first)`,
    `verify(server_final)` (raises unless the server proved it knows the credential)."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self._name = _hash(mechanism)
        if not username or not password:
            raise ValueError("SCRAM needs a user name and a password")
        self.username = username
        self._password = password
        self._nonce = nonce or _new_nonce()
        self._first_bare = f"n={_escape(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _text(server_first, "SCRAM server-first message")
        if text.startswith("e="):
            raise AuthenticationFailed(f"the broker refused the SCRAM exchange: {text[2:]}")
        attrs = _attributes(text, "SCRAM server-first message", "rsi")
        nonce = _nonce(attrs[0][1], "SCRAM server nonce")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise SaslError("the SCRAM server nonce does not extend the client's")
        salt = _b64(attrs[1][1], "SCRAM salt (s=)")
        try:
            iterations = int(attrs[2][1])
        except ValueError:
            raise SaslError(
                f"the SCRAM iteration count {attrs[2][1][:20]!r} is not a number"
            ) from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SaslError(
                f"the SCRAM iteration count {iterations} is outside "
                f"{MIN_ITERATIONS}..{MAX_ITERATIONS}"
            )
        client_key, server_key = _salted_keys(self._name, self._password, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self._first_bare},{text},{without_proof}".encode()
        stored = hashlib.new(self._name, client_key).digest()
        signature = _hmac(self._name, stored, auth)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(self._name, server_key, auth)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = _text(server_final, "SCRAM server-final message")
        if text.startswith("e="):
            raise AuthenticationFailed(
                f"the broker refused the proof (e={text[2:60]}): wrong password or unknown user"
            )
        attrs = _attributes(text, "SCRAM server-final message", "v")
        if not hmac.compare_digest(_b64(attrs[0][1], "SCRAM verifier"), self._server_signature):
            raise AuthenticationFailed(
                "the broker's SCRAM signature is wrong: it does not hold this user's credential"
            )


def plain_message(username: str, password: str) -> bytes:
    if not username or not password:
        raise ValueError("PLAIN needs a user name and a password")
    return b"\x00" + username.encode() + b"\x00" + password.encode()
