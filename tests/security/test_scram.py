"""SCRAM and PLAIN as pure code (security/scram.py) and the SaslHandshake's frames
(security/sasl.py): RFC 7677's published exchange, kafka-python's own SCRAM client against
our server, and every cut or malformed message refused with a message naming it."""

from __future__ import annotations

import base64
import socket

import pytest
from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

from logbroker.client.connection import BrokerConnection
from logbroker.config import BrokerConfig, ConfigError
from logbroker.security.sasl import (
    UNSUPPORTED_SASL_MECHANISM,
    SaslAuthenticationError,
    SaslClientConfig,
    ServerAuthenticator,
    decode_handshake_response,
    encode_handshake,
    frame,
)
from logbroker.security.scram import (
    AuthenticationFailed,
    PlainServer,
    SaslError,
    ScramClient,
    ScramCredential,
    ScramServer,
    make_credential,
    parse_plain,
    password_matches,
    plain_message,
)

# RFC 7677 §3: user "user", password "pencil", SCRAM-SHA-256
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _lookup(users: dict[tuple[str, str], ScramCredential]):  # type: ignore[no-untyped-def]
    return lambda user, mechanism: users.get((user, mechanism))


def test_rfc7677_vector_client_and_server() -> None:
    credential = make_credential("SCRAM-SHA-256", "pencil", salt=RFC_SALT, iterations=4096)
    server = ScramServer(
        "SCRAM-SHA-256",
        _lookup({("user", "SCRAM-SHA-256"): credential}),
        nonce=RFC_SERVER_NONCE,
    )
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert server.step(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert server.step(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    client.verify(RFC_SERVER_FINAL)
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_client_against_our_server(mechanism: str) -> None:
    credential = make_credential(mechanism, "alice-secret", iterations=4096)
    server = ScramServer(mechanism, _lookup({("alice", mechanism): credential}))
    theirs = KafkaPythonScramClient("alice", "alice-secret", mechanism)
    server_first = server.step(theirs.first_message())
    theirs.process_server_first_message(server_first)
    server_final = server.step(theirs.final_message())
    theirs.process_server_final_message(server_final)  # raises on a wrong signature
    assert server.complete


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "alice-secret")])
def test_wrong_password_and_unknown_user_look_the_same(user: str, password: str) -> None:
    credential = make_credential("SCRAM-SHA-512", "alice-secret")
    server = ScramServer("SCRAM-SHA-512", _lookup({("alice", "SCRAM-SHA-512"): credential}))
    client = ScramClient("SCRAM-SHA-512", user, password)
    final = client.final(server.step(client.first()))
    with pytest.raises(AuthenticationFailed, match="wrong password or unknown user") as failed:
        server.step(final)
    assert failed.value.reply == b"e=invalid-proof"
    assert not server.complete
    with pytest.raises(AuthenticationFailed, match="invalid-proof"):
        client.verify(failed.value.reply)


def test_credential_is_kafkas_string_and_holds_no_password() -> None:
    credential = make_credential("SCRAM-SHA-256", "pencil", salt=RFC_SALT)
    text = credential.to_config()
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=")
    assert text.endswith(",iterations=4096") and "pencil" not in text
    assert ScramCredential.from_config(text) == credential
    assert password_matches("SCRAM-SHA-256", credential, "pencil")
    assert not password_matches("SCRAM-SHA-256", credential, "pencil2")
    with pytest.raises(ValueError, match="iterations=4095"):
        make_credential("SCRAM-SHA-256", "pencil", iterations=4095)
    with pytest.raises(ValueError, match="no server_key"):
        ScramCredential.from_config("salt=AA==,stored_key=AA==,iterations=4096")


def test_a_server_that_does_not_hold_the_credential_is_caught_by_the_client() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.final(RFC_SERVER_FIRST)
    with pytest.raises(AuthenticationFailed, match="signature is wrong"):
        client.verify(b"v=" + base64.b64encode(bytes(32)))


CLIENT_FIRST_BAD = [
    (b"", "is empty"),
    (b"\xff\xfe", "not UTF-8"),
    (b"n,,", "is cut: it has no attributes"),
    (b"n,", "is cut"),
    (b"n,,n=user", "cut or out of order"),
    (b"n,,r=abc,n=user", "cut or out of order"),
    (b"p=tls-unique,,n=user,r=abc", "channel binding"),
    (b"x,,n=user,r=abc", "bad GS2 flag"),
    (b"n,,n=us=er,r=abc", "bad escape"),
    (b"n,,n=,r=abc", "user name is empty"),
    (b"n,,n=user,r=", "nonce is empty"),
    (b"n,,m=ext,n=user,r=abc", "mandatory extension"),
    (b"n,a=other,n=user,r=abc", "authorization id"),
    (b"n,,n=user,rabc", "malformed attribute"),
]


@pytest.mark.parametrize("message,error", CLIENT_FIRST_BAD, ids=[e for _, e in CLIENT_FIRST_BAD])
def test_malformed_client_first(message: bytes, error: str) -> None:
    server = ScramServer("SCRAM-SHA-256", _lookup({}))
    with pytest.raises(SaslError, match=error):
        server.step(message)


def _past_first() -> tuple[ScramServer, ScramClient]:
    credential = make_credential("SCRAM-SHA-256", "pencil", salt=RFC_SALT)
    server = ScramServer(
        "SCRAM-SHA-256", _lookup({("user", "SCRAM-SHA-256"): credential}), nonce="srv"
    )
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    server.step(client.first())
    return server, client


CLIENT_FINAL_BAD = [
    (b"c=biws,r=" + RFC_CLIENT_NONCE.encode() + b"srv", "without p="),
    (b"c=biws,r=" + RFC_CLIENT_NONCE.encode() + b"srv,p=", "proof is 0 bytes"),
    (b"c=biws,r=" + RFC_CLIENT_NONCE.encode() + b"srv,p=!!", "not valid base64"),
    (b"c=biws,r=" + RFC_CLIENT_NONCE.encode() + b"XXX,p=AAAA", "nonce is not the one"),
    (b"c=eSws,r=" + RFC_CLIENT_NONCE.encode() + b"srv,p=AAAA", "channel binding"),
    (b"r=x,c=biws,p=AAAA", "cut or out of order"),
]


@pytest.mark.parametrize("message,error", CLIENT_FINAL_BAD, ids=[e for _, e in CLIENT_FINAL_BAD])
def test_malformed_client_final(message: bytes, error: str) -> None:
    server, _client = _past_first()
    with pytest.raises(SaslError, match=error):
        server.step(message)


def test_replayed_client_final_is_refused() -> None:
    """A client-final recorded from one exchange fails another: the server's nonce differs."""
    credential = make_credential("SCRAM-SHA-256", "pencil")
    lookup = _lookup({("user", "SCRAM-SHA-256"): credential})
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="fixed")
    first = ScramServer("SCRAM-SHA-256", lookup)
    recorded = client.final(first.step(client.first()))
    first.step(recorded)
    again = ScramServer("SCRAM-SHA-256", lookup)
    again.step(client.first())
    with pytest.raises(SaslError, match="nonce is not the one"):
        again.step(recorded)
    with pytest.raises(SaslError, match="after the exchange ended"):
        first.step(recorded)


SERVER_FIRST_BAD = [
    (b"r=" + RFC_CLIENT_NONCE.encode() + b",s=AAAA,i=4096", "does not extend"),
    (b"r=other,s=AAAA,i=4096", "does not extend"),
    (b"r=" + RFC_CLIENT_NONCE.encode() + b"x,s=AAAA,i=10", "outside 4096"),
    (b"r=" + RFC_CLIENT_NONCE.encode() + b"x,s=AAAA,i=ten", "not a number"),
    (b"r=" + RFC_CLIENT_NONCE.encode() + b"x,s=AAAA", "cut or out of order"),
    (b"e=other-error", "refused the SCRAM exchange"),
]


@pytest.mark.parametrize("message,error", SERVER_FIRST_BAD, ids=[e for _, e in SERVER_FIRST_BAD])
def test_malformed_server_first(message: bytes, error: str) -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    with pytest.raises(SaslError, match=error):
        client.final(message)


def test_plain() -> None:
    credential = make_credential("SCRAM-SHA-512", "alice-secret")
    lookup = _lookup({("alice", "SCRAM-SHA-512"): credential})
    server = PlainServer(lookup)
    assert server.step(plain_message("alice", "alice-secret")) == b""
    assert server.complete and server.username == "alice"
    with pytest.raises(AuthenticationFailed):
        PlainServer(lookup).step(plain_message("alice", "nope"))
    with pytest.raises(AuthenticationFailed):
        PlainServer(lookup).step(plain_message("bob", "alice-secret"))
    assert parse_plain(b"alice\x00alice\x00pw") == ("alice", "alice", "pw")
    with pytest.raises(SaslError, match="authorization id is not the user"):
        PlainServer(lookup).step(b"bob\x00alice\x00alice-secret")


PLAIN_BAD = [
    (b"alice-secret", "0 NUL separators"),
    (b"\x00alice", "1 NUL separators"),
    (b"\x00alice\x00pw\x00", "3 NUL separators"),
    (b"\x00\x00pw", "user name is empty"),
    (b"\x00alice\x00", "password is empty"),
    (b"\x00" + b"a" * 256 + b"\x00pw", "longer than 255"),
    (b"\x00\xff\x00pw", "not UTF-8"),
]


@pytest.mark.parametrize("message,error", PLAIN_BAD, ids=[e for _, e in PLAIN_BAD])
def test_malformed_plain(message: bytes, error: str) -> None:
    with pytest.raises(SaslError, match=error):
        parse_plain(message)


# -- the handshake ------------------------------------------------------------------------------


def test_handshake_then_scram_through_the_authenticator() -> None:
    credential = make_credential("SCRAM-SHA-256", "pencil")
    auth = ServerAuthenticator(
        ("PLAIN", "SCRAM-SHA-256"), _lookup({("user", "SCRAM-SHA-256"): credential})
    )
    step = auth.receive(encode_handshake("SCRAM-SHA-256", correlation_id=7)[4:])
    assert step.failure is None
    assert decode_handshake_response(step.reply[4:]) == (7, 0, ["PLAIN", "SCRAM-SHA-256"])
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    server_first = auth.receive(client.first()).reply
    assert server_first[:4] == frame(server_first[4:])[:4]
    server_final = auth.receive(client.final(server_first[4:])).reply
    client.verify(server_final[4:])
    assert auth.complete and auth.principal == "User:user"
    with pytest.raises(SaslError, match="after authentication completed"):
        auth.receive(b"x")


def test_handshake_with_a_mechanism_not_enabled() -> None:
    auth = ServerAuthenticator(("SCRAM-SHA-512",), _lookup({}))
    step = auth.receive(encode_handshake("PLAIN")[4:])
    assert step.failure is not None and "'PLAIN' is not enabled (SCRAM-SHA-512)" in step.failure
    assert decode_handshake_response(step.reply[4:])[1:] == (
        UNSUPPORTED_SASL_MECHANISM,
        ["SCRAM-SHA-512"],
    )


HANDSHAKE_BAD = [
    (b"\x00\x11\x00\x00", "too short"),
    (b"\x00\x03\x00\x00\x00\x00\x00\x01\x00\x00", "got api key 3"),
    (b"\x00\x11\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00", "version 1 is not served"),
    (b"\x00\x11\x00\x00\x00\x00\x00\x01\x00\x05ab", "past its end"),
    (b"\x00\x11\x00\x00\x00\x00\x00\x01\xff\xff", "cut in its mechanism"),
    (b"\x00\x11\x00\x00\x00\x00\x00\x01\xff\xff\x00\x05PLAINx", "bytes after its end"),
]


@pytest.mark.parametrize("body,error", HANDSHAKE_BAD, ids=[e for _, e in HANDSHAKE_BAD])
def test_malformed_handshake(body: bytes, error: str) -> None:
    with pytest.raises(SaslError, match=error):
        ServerAuthenticator(("PLAIN",), _lookup({})).receive(body)


def test_client_config_from_properties() -> None:
    assert SaslClientConfig.from_properties({}) is None
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="alice-secret";'
    )
    config = SaslClientConfig.from_properties(
        {"sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": jaas}
    )
    assert config == SaslClientConfig("SCRAM-SHA-256", "alice", "alice-secret")
    assert "alice-secret" not in repr(config)
    with pytest.raises(ValueError, match=r"needs sasl\.username and sasl\.password"):
        SaslClientConfig.from_properties({"sasl.mechanism": "PLAIN", "sasl.username": "a"})
    with pytest.raises(ValueError, match="known are PLAIN"):
        SaslClientConfig.from_properties({"sasl.mechanism": "GSSAPI"})


@pytest.mark.parametrize(
    "settings,error",
    [
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "unknown SASL mechanism 'GSSAPI'"),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "enable.zookeeper": "false"},
            "needs enable.zookeeper=true",
        ),
        ({"sasl.enabled.mechanisms": "SCRAM-SHA-256"}, "sasl.jaas.config is empty"),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": 'x required username="b";'},
            "needs sasl.username and sasl.password",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "MD5",
                "sasl.jaas.config": 'x required username="b" password="p";',
            },
            "sasl.mechanism='MD5'",
        ),
    ],
)
def test_a_broker_refuses_a_bad_sasl_setting(settings: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.from_properties(settings)
    assert error in str(refused.value)


def test_the_brokers_own_login_and_no_password_in_its_repr() -> None:
    config = BrokerConfig.from_properties(
        {
            "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
            "security.inter.broker.protocol": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "scram-sha-512, PLAIN",
            "sasl.jaas.config": 'x required username="broker-0" password="hunter2";',
        }
    )
    assert config.inter_broker_sasl() == SaslClientConfig("SCRAM-SHA-512", "broker-0", "hunter2")
    assert "hunter2" not in repr(config)
    assert BrokerConfig().inter_broker_sasl() is None  # SASL off: the fetchers do not log in


def test_a_listener_that_never_answers_the_handshake_times_out_clearly() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (backlog), never answers
        host, port = silent.getsockname()[:2]
        connection = BrokerConnection(
            host, port, timeout=0.3, sasl=SaslClientConfig("PLAIN", "alice", "alice-secret")
        )
        with pytest.raises(SaslAuthenticationError, match="did not answer in time"):
            connection.connect()
        assert connection._sock is None  # nothing half logged in is kept
