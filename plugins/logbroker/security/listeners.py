"""A broker's listeners: where it accepts connections, with which security and which wire protocol.

Decisions (issue 46, docs/security.md):

- `listeners` and `advertised.listeners` are Kafka's: `NAME://host:port,...`. A listener's
  security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) comes from its name through
  `listener.security.protocol.map`, as in Kafka since 1.0; logbroker's default map is

      PLAINTEXT:PLAINTEXT, SSL:SSL, SASL_PLAINTEXT:SASL_PLAINTEXT, SASL_SSL:SASL_SSL,
      KAFKA08:PLAINTEXT, SSL08:SSL, SASL_SSL08:SASL_SSL

  and entries of the key add to it (or replace one), e.g. `INTERNAL08:SSL`, or
  `PLAINTEXT:SASL_PLAINTEXT` for logins on the 0.7 port.
- SASL per listener, as Kafka's: a client logs in (`sasl.enabled.mechanisms`) on exactly the
  listeners mapped to SASL_*; a SASL_* listener without mechanisms, or mechanisms without any
  SASL_* listener (before per-listener SASL they meant "every listener": such a config now
  stops the broker instead of serving without logins), is refused at start.
- Kafka's per-listener overrides: `listener.name.<name>.<key>` (the name in lower case) for
  LISTENER_KEYS (`listener.name.ssl08.ssl.client.auth=required`,
  `listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512`), else the broker's key. A
  listener's mechanisms may be set on a SASL_* listener only.
- The wire protocol is in the name, by convention: a name ending in `08` speaks Kafka 0.8's
  protocol (kafka08_connection.py), any other logbroker's 0.7 protocol (connection.py). So
  `SSL08://127.0.0.1:9193` is the 0.8 listener over TLS, the one kcat and librdkafka in 0.8
  mode use; clients look listeners up by these conventional names (client/listeners.py).
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
  true; its default `auto` is true as soon as a TLS listener asks for client certificates
  (its `ssl.client.auth` requested or required). A REPLICA_FETCH must come from the broker its
  replica id names. The rest get ClusterAuthorizationFailed (Kafka's code 31), logged, with
  nothing recorded. Followers then reach leaders over `security.inter.broker.protocol`: the
  0.7 port when its protocol is that one, else the first listener of logbroker's protocol
  mapped to it (SSL, SASL_SSL: with this broker's own certificate; SASL_*: logged in with
  sasl.jaas.config). Or, as Kafka 0.10.2+, `inter.broker.listener.name` names that listener
  (one of logbroker's protocol; every broker of a cluster names the same one), and its
  protocol is the inter-broker protocol: only one of the two keys may be set.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..coordination.replication_state import KAFKA08 as KAFKA08  # what port.08 makes
from .sasl import parse_mechanisms
from .tls import SECURITY_PROTOCOLS, TLS_PROTOCOLS, SecurityConfigError, server_context


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
    def inter_broker_listener_name(self) -> str: ...
    @property
    def sasl_enabled_mechanisms(self) -> str: ...
    @property
    def extra(self) -> Mapping[str, str]: ...


DEFAULT_PROTOCOL_MAP = {
    "PLAINTEXT": "PLAINTEXT",
    "SSL": "SSL",
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "SASL_SSL": "SASL_SSL",
    "KAFKA08": "PLAINTEXT",
    "SSL08": "SSL",
    "SASL_SSL08": "SASL_SSL",
}
# what `listener.name.<name>.<key>` may override: Kafka's per-listener TLS settings, and the
# SASL mechanisms of a SASL_* listener
TLS_LISTENER_KEYS = ("ssl.client.auth", "ssl.certfile", "ssl.keyfile", "ssl.cafile")
MECHANISMS_KEY = "sasl.enabled.mechanisms"
LISTENER_KEYS = (*TLS_LISTENER_KEYS, MECHANISMS_KEY)
LISTENER_PREFIX = "listener.name."
PLAINTEXT = "PLAINTEXT"  # what port makes (port.08 makes KAFKA08)
WIRE_07, WIRE_08 = "0.7", "0.8"
_ENTRY = re.compile(r"^([A-Z][A-Z0-9_]*)://([^:/]*):(\d+)$")


@dataclass(frozen=True)
class Listener:
    name: str
    security: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    host: str
    port: int

    @property
    def wire(self) -> str:
        return WIRE_08 if self.name.endswith("08") else WIRE_07

    @property
    def tls(self) -> bool:
        return self.security in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        """Its clients log in (SASL_PLAINTEXT, SASL_SSL)."""
        return self.security.startswith("SASL_")


def listener_setting(config: BrokerConfig, listener: str, key: str) -> str:
    """`listener.name.<listener>.<key>` (one of LISTENER_KEYS) if set, else the broker's
    `key`, as Kafka's per-listener overrides."""
    override = config.extra.get(f"{LISTENER_PREFIX}{listener.lower()}.{key}")
    if override is not None:
        return override.strip()
    return str(getattr(config, key.replace(".", "_")))


def listener_mechanisms(config: BrokerConfig, listener: Listener) -> tuple[str, ...]:
    """The SASL mechanisms a listener's clients log in with: () unless it is SASL_*; its
    `listener.name.<name>.sasl.enabled.mechanisms`, else the broker's. A bad one is an error
    naming the key it came from."""
    if not listener.sasl:
        return ()
    key = f"{LISTENER_PREFIX}{listener.name.lower()}.{MECHANISMS_KEY}"
    try:
        return parse_mechanisms(listener_setting(config, listener.name, MECHANISMS_KEY))
    except ValueError as exc:
        raise SecurityConfigError(
            f"{key if key in config.extra else MECHANISMS_KEY}: {exc}"
        ) from None


def sasl_configured(config: BrokerConfig) -> bool:
    """SASL is on: sasl.enabled.mechanisms, or a listener's own, is set (the broker then needs
    its own login, and `User:broker-<id>` names broker <id>)."""
    if config.sasl_enabled_mechanisms.strip():
        return True
    return any(
        key.startswith(LISTENER_PREFIX) and key.endswith(f".{MECHANISMS_KEY}") and value.strip()
        for key, value in config.extra.items()
    )


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
        return any(
            listener.tls and listener_setting(config, listener.name, "ssl.client.auth") != "none"
            for listener in broker_listeners(config)
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
    if sasl_configured(config):
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
    """A TLS listener's context (None for PLAINTEXT, SASL_PLAINTEXT), with its
    `listener.name.*` overrides; a bad setting names its key (and the listener)."""
    if not listener.tls:
        return None
    values = [listener_setting(config, listener.name, key) for key in TLS_LISTENER_KEYS]
    try:
        return server_context(values[1], values[2], values[3], values[0])
    except SecurityConfigError as exc:
        overridden = [
            key
            for key in TLS_LISTENER_KEYS
            if f"{LISTENER_PREFIX}{listener.name.lower()}.{key}" in config.extra
        ]
        if not overridden:
            raise
        raise SecurityConfigError(
            f"listener {listener.name} (overriding {', '.join(overridden)}): {exc}"
        ) from None


def inter_broker_listener(config: BrokerConfig) -> str | None:
    """The listener followers fetch from (its name in /replication/endpoints): None for the
    0.7 port of /brokers/ids when its protocol is security.inter.broker.protocol, else the
    first listener of logbroker's protocol mapped to it (every broker of a cluster names it
    alike: SSL or SASL_SSL by convention). Refused at start (check) when there is none."""
    named = config.inter_broker_listener_name.strip().upper()
    if named:
        return None if named == PLAINTEXT else named
    wanted = inter_broker_protocol(config)
    for listener in broker_listeners(config):  # PLAINTEXT (the port) first
        if listener.security == wanted and listener.wire == WIRE_07:
            return None if listener.name == PLAINTEXT else listener.name
    return None


def inter_broker_protocol(config: BrokerConfig) -> str:
    """The protocol of inter.broker.listener.name's listener when it is set; else
    security.inter.broker.protocol, except that its default, PLAINTEXT, means the 0.7 port
    whatever it is mapped to: SASL_PLAINTEXT (logged in) when the map says so."""
    named = config.inter_broker_listener_name.strip().upper()
    if named:
        found = [x.security for x in broker_listeners(config) if x.name == named]
        if not found:
            raise SecurityConfigError(
                f"inter.broker.listener.name={config.inter_broker_listener_name}: not one of "
                f"the broker's listeners ({', '.join(x.name for x in broker_listeners(config))})"
            )
        return found[0]
    wanted = config.security_inter_broker_protocol
    if wanted == PLAINTEXT:
        return next(x.security for x in broker_listeners(config) if x.name == PLAINTEXT)
    return wanted


def check_listener_overrides(config: BrokerConfig, names: list[str]) -> None:
    """Every `listener.name.<name>.<key>` names a listener of the broker and a key of
    LISTENER_KEYS."""
    lower = {name.lower() for name in names}
    for key in sorted(config.extra):
        if not key.startswith(LISTENER_PREFIX):
            continue
        rest = key[len(LISTENER_PREFIX) :]
        name, _, setting = rest.partition(".")
        if name not in lower:
            raise SecurityConfigError(
                f"{key}: {name} is not one of the broker's listeners "
                f"({', '.join(sorted(lower))}; the name in lower case)"
            )
        if setting not in LISTENER_KEYS:
            raise SecurityConfigError(
                f"{key}: {setting} cannot be set per listener (only {', '.join(LISTENER_KEYS)})"
            )


def _check_inter_broker_listener(config: BrokerConfig, listeners: list[Listener]) -> None:
    """inter.broker.listener.name: a listener of logbroker's protocol, and alone."""
    named = config.inter_broker_listener_name.strip().upper()
    if not named:
        return
    key = f"inter.broker.listener.name={config.inter_broker_listener_name}"
    if config.security_inter_broker_protocol != PLAINTEXT:
        raise SecurityConfigError(
            f"{key} and security.inter.broker.protocol="
            f"{config.security_inter_broker_protocol}: set only one of the two, as in Kafka "
            "(the listener's protocol is the inter-broker one)"
        )
    found = [x for x in listeners if x.name == named]
    if not found:
        raise SecurityConfigError(
            f"{key}: not one of the broker's listeners ({', '.join(x.name for x in listeners)})"
        )
    if found[0].wire != WIRE_07:
        raise SecurityConfigError(
            f"{key}: {named} speaks Kafka 0.8's protocol; followers fetch over logbroker's "
            "(a listener whose name does not end in 08)"
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
    check_listener_overrides(config, [x.name for x in listeners])
    for listener in listeners:
        listener_context(config, listener)  # files read, client auth checked
    mechanisms = config.sasl_enabled_mechanisms.strip()
    sasl_listeners = [x.name for x in listeners if x.sasl]
    for listener in listeners:
        own = f"{LISTENER_PREFIX}{listener.name.lower()}.{MECHANISMS_KEY}"
        if not listener.sasl and own in config.extra:
            raise SecurityConfigError(
                f"{own}: listener {listener.name} is {listener.security}, and only a "
                "SASL_PLAINTEXT or SASL_SSL listener logs clients in"
            )
        if listener.sasl and not listener_mechanisms(config, listener):
            raise SecurityConfigError(
                f"listener {listener.name} is {listener.security} but sasl.enabled.mechanisms "
                "is empty: its clients could not log in (set sasl.enabled.mechanisms or "
                f"{own}, or map the listener to a protocol without SASL)"
            )
    _check_inter_broker_listener(config, listeners)
    if mechanisms and not sasl_listeners:
        raise SecurityConfigError(
            f"sasl.enabled.mechanisms={mechanisms} but no listener is SASL_PLAINTEXT or "
            "SASL_SSL: SASL is per listener, as in Kafka (it no longer applies to every "
            "listener); name them SASL_SSL://..., or map yours, e.g. "
            "listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT,SSL:SASL_SSL"
        )
    inter = inter_broker_protocol(config)
    if inter != PLAINTEXT and not any(x.security == inter and x.wire == WIRE_07 for x in listeners):
        raise SecurityConfigError(
            f"security.inter.broker.protocol={inter}: the broker has no {inter} listener of "
            f"logbroker's protocol for its followers (add {inter}://host:port to listeners, "
            "or map one to it in listener.security.protocol.map)"
        )
    if inter in TLS_PROTOCOLS and not config.ssl_cafile:
        raise SecurityConfigError(
            f"security.inter.broker.protocol={inter} needs ssl.cafile (followers check "
            "the leader's certificate against it)"
        )
    if require_authenticated_brokers(config) and inter == PLAINTEXT:
        raise SecurityConfigError(
            "replication.require.authenticated.brokers is on (true, or auto with a TLS "
            "listener asking client certificates) but security.inter.broker.protocol=PLAINTEXT: "
            "followers could not authenticate; set security.inter.broker.protocol to SSL, "
            "SASL_SSL or SASL_PLAINTEXT (a listener of it), or "
            "replication.require.authenticated.brokers=false"
        )
