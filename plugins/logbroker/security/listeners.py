"""A broker's listeners: where it accepts connections, with which security and which wire protocol.

Decisions (issue 46, docs/security.md):

- `listeners` and `advertised.listeners` are Kafka's: `NAME://host:port,...`. A listener's
  security protocol comes from its name through `listener.security.protocol.map`, as in Kafka
  since 1.0; logbroker's default map is

      PLAINTEXT:PLAINTEXT, SSL:SSL, KAFKA08:PLAINTEXT, SSL08:SSL

  and entries of the key add to it (or replace one), e.g. `INTERNAL08:SSL`.
- The wire protocol is in the name, by convention: a name ending in `08` speaks Kafka 0.8's
  protocol (kafka08_connection.py), any other logbroker's 0.7 protocol (connection.py). So
  `SSL08://127.0.0.1:9193` is the 0.8 listener over TLS, the one kcat and librdkafka in 0.8
  mode use.
- `port` and `port.08` stay, meaning `PLAINTEXT://hostname:port` and
  `KAFKA08://hostname:port.08`: a broker always has its PLAINTEXT listener, because 0.7
  clients speak nothing else and find it in `/brokers/ids/<id>`. A PLAINTEXT or KAFKA08 entry
  in `listeners` replaces what `port` / `port.08` would make. Every other listener is
  registered by name in `/replication/endpoints/<id>` (registration.py), at its advertised
  address (`advertised.listeners`, else the bound one), where clients and followers look it up.
- A connection's principal is `User:CN=...` from its TLS client certificate
  (security/tls.py), `User:<name>` once SASL logs it in (security/sasl.py; the login wins
  over the certificate), `User:ANONYMOUS` otherwise. Broker <id>'s principal is
  `broker.principal.format` with `{id}` filled in, `User:CN=broker-{id}` by default; when
  SASL is on, the SASL login `User:broker-<id>` names broker <id> too.
- Requests that change a follower's state on the leader (REPLICA_FETCH: its offset, the ISR,
  the high watermark; OFFSETS_FOR_LEADER_EPOCH: where it truncates to) are served only on a
  connection authenticated as a broker when `replication.require.authenticated.brokers` is
  true; its default `auto` is true as soon as an SSL listener asks for client certificates
  (`ssl.client.auth` requested or required). A REPLICA_FETCH must come from the broker its
  replica id names. The rest get ClusterAuthorizationFailed (Kafka's code 31), logged, with
  nothing recorded. Followers then reach leaders over `security.inter.broker.protocol` (SSL:
  the leader's `SSL` listener, with this broker's own certificate).
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Protocol

from ..coordination.replication_state import KAFKA08 as KAFKA08  # what port.08 makes
from .tls import SECURITY_PROTOCOLS, SecurityConfigError, server_context


class BrokerConfig(Protocol):
    """What this module reads of config.BrokerConfig (config imports this module)."""

    @property
    def hostname(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def port_08(self) -> int: ...
    @property
    def listeners(self) -> str: ...
    @property
    def advertised_listeners(self) -> str: ...
    @property
    def listener_security_protocol_map(self) -> str: ...
    @property
    def ssl_certfile(self) -> str: ...
    @property
    def ssl_keyfile(self) -> str: ...
    @property
    def ssl_cafile(self) -> str: ...
    @property
    def ssl_client_auth(self) -> str: ...
    @property
    def security_inter_broker_protocol(self) -> str: ...
    @property
    def replication_require_authenticated_brokers(self) -> str: ...
    @property
    def broker_principal_format(self) -> str: ...
    @property
    def sasl_enabled_mechanisms(self) -> str: ...


DEFAULT_PROTOCOL_MAP = {
    "PLAINTEXT": "PLAINTEXT",
    "SSL": "SSL",
    "KAFKA08": "PLAINTEXT",
    "SSL08": "SSL",
}
PLAINTEXT = "PLAINTEXT"  # what port makes (port.08 makes KAFKA08)
WIRE_07, WIRE_08 = "0.7", "0.8"
_ENTRY = re.compile(r"^([A-Z][A-Z0-9_]*)://([^:/]*):(\d+)$")


@dataclass(frozen=True)
class Listener:
    name: str
    security: str  # PLAINTEXT or SSL
    host: str
    port: int

    @property
    def wire(self) -> str:
        return WIRE_08 if self.name.endswith("08") else WIRE_07


def protocol_map(text: str) -> dict[str, str]:
    """The default map with `listener.security.protocol.map`'s entries over it."""
    result = dict(DEFAULT_PROTOCOL_MAP)
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise SecurityConfigError(
                f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with a "
                f"protocol of {', '.join(SECURITY_PROTOCOLS)}"
            )
        result[name] = protocol
    return result


def parse_listeners(key: str, text: str, protocols: dict[str, str]) -> dict[str, tuple[str, int]]:
    """`NAME://host:port,...` -> {NAME: (host, port)}; a bad entry is an error naming `key`."""
    result: dict[str, tuple[str, int]] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        match = _ENTRY.match(item)
        if match is None or not 0 <= int(match.group(3)) <= 65535:
            raise SecurityConfigError(f"{key}: {item!r} is not NAME://host:port")
        name = match.group(1)
        if name not in protocols:
            raise SecurityConfigError(
                f"{key}: listener {name} has no security protocol (known: "
                f"{', '.join(sorted(protocols))}; listener.security.protocol.map adds names)"
            )
        if name in result:
            raise SecurityConfigError(f"{key}: listener {name} named twice")
        result[name] = (match.group(2), int(match.group(3)))
    return result


def broker_listeners(config: BrokerConfig) -> list[Listener]:
    """Every listener of the broker, PLAINTEXT first (see the module's doc)."""
    protocols = protocol_map(config.listener_security_protocol_map)
    named = parse_listeners("listeners", config.listeners, protocols)
    found = {PLAINTEXT: (config.hostname, config.port)}
    if config.port_08 >= 0:
        found[KAFKA08] = (config.hostname, config.port_08)
    found.update(named)
    return [
        Listener(name, protocols[name], host or config.hostname, port)
        for name, (host, port) in found.items()
    ]


def advertised(config: BrokerConfig) -> dict[str, tuple[str, int]]:
    """`advertised.listeners`: {NAME: (host, port)}, each naming a listener the broker has."""
    protocols = protocol_map(config.listener_security_protocol_map)
    result = parse_listeners("advertised.listeners", config.advertised_listeners, protocols)
    names = {listener.name for listener in broker_listeners(config)}
    for name in result:
        if name not in names:
            raise SecurityConfigError(
                f"advertised.listeners: {name} is not one of the broker's listeners "
                f"({', '.join(sorted(names))})"
            )
    return result


def require_authenticated_brokers(config: BrokerConfig) -> bool:
    """replication.require.authenticated.brokers, `auto` resolved (the module's doc)."""
    value = config.replication_require_authenticated_brokers.strip().lower()
    if value == "auto":
        return config.ssl_client_auth != "none" and any(
            listener.security == "SSL" for listener in broker_listeners(config)
        )
    return value == "true"


def broker_principal(config: BrokerConfig, broker_id: int) -> str:
    return config.broker_principal_format.replace("{id}", str(broker_id))


SASL_BROKER_FORMAT = "User:broker-{id}"  # a broker's SASL login (sasl.jaas.config)


def broker_id_of(config: BrokerConfig, principal: str) -> int | None:
    """The broker id a principal names by `broker.principal.format`, or, when SASL is on
    (sasl.enabled.mechanisms), as the SASL login `User:broker-<id>`; None if it names none.
    A TLS certificate's principal is always `User:CN=...`: only a SASL login gives the
    second form."""
    formats = [config.broker_principal_format]
    if config.sasl_enabled_mechanisms.strip():
        formats.append(SASL_BROKER_FORMAT)
    for form in formats:
        head, sep, tail = form.partition("{id}")
        if not sep:
            continue
        match = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail), principal)
        if match:
            return int(match.group(1))
    return None


def listener_context(config: BrokerConfig, listener: Listener) -> ssl.SSLContext | None:
    """An SSL listener's context (None for PLAINTEXT); a bad setting names its key."""
    if listener.security != "SSL":
        return None
    return server_context(
        config.ssl_certfile, config.ssl_keyfile, config.ssl_cafile, config.ssl_client_auth
    )


def check(config: BrokerConfig) -> None:
    """Every security setting, at start: raises SecurityConfigError naming the key."""
    listeners = broker_listeners(config)
    advertised(config)
    ports = [(x.host, x.port) for x in listeners if x.port]
    if len(ports) != len(set(ports)):
        raise SecurityConfigError(
            "listeners: two listeners on one host:port ("
            + ", ".join(f"{x.name}://{x.host}:{x.port}" for x in listeners)
            + "; port and port.08 are PLAINTEXT and KAFKA08)"
        )
    if config.security_inter_broker_protocol not in SECURITY_PROTOCOLS:
        raise SecurityConfigError(
            f"security.inter.broker.protocol={config.security_inter_broker_protocol}: must be "
            f"one of {', '.join(SECURITY_PROTOCOLS)}"
        )
    if config.replication_require_authenticated_brokers.strip().lower() not in (
        "auto",
        "true",
        "false",
    ):
        raise SecurityConfigError(
            "replication.require.authenticated.brokers="
            f"{config.replication_require_authenticated_brokers}: must be auto, true or false"
        )
    if "{id}" not in config.broker_principal_format:
        raise SecurityConfigError(
            f"broker.principal.format={config.broker_principal_format}: must hold {{id}}"
        )
    wire07_ssl = [x for x in listeners if x.security == "SSL" and x.wire == WIRE_07]
    for listener in listeners:
        listener_context(config, listener)  # files read, client auth checked
    if config.security_inter_broker_protocol == "SSL":
        if not wire07_ssl:
            raise SecurityConfigError(
                "security.inter.broker.protocol=SSL: the broker has no SSL listener of "
                "logbroker's protocol for its followers (add SSL://host:port to listeners)"
            )
        if config.ssl_client_auth == "none" and not config.ssl_cafile:
            raise SecurityConfigError(
                "security.inter.broker.protocol=SSL needs ssl.cafile (followers check the "
                "leader's certificate against it)"
            )
    if (
        require_authenticated_brokers(config)
        and config.security_inter_broker_protocol != "SSL"
        and not config.sasl_enabled_mechanisms.strip()  # followers log in as User:broker-<id>
    ):
        raise SecurityConfigError(
            "replication.require.authenticated.brokers is on (true, or auto with an SSL "
            "listener asking client certificates) but security.inter.broker.protocol=PLAINTEXT "
            "without SASL: followers could not authenticate; set "
            "security.inter.broker.protocol=SSL, sasl.enabled.mechanisms, or "
            "replication.require.authenticated.brokers=false"
        )
