"""A client's credentials as one value, from Kafka's client property names.

    security.protocol            PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL: as Kafka's,
                                 SASL_* log in (sasl.*), PLAINTEXT and SSL do not (a client
                                 certificate, ssl.certfile, is SSL's way to be someone)
    ssl.cafile, ssl.certfile,    TLS (tls.py's ClientSecurity)
    ssl.keyfile, ssl.endpoint.identification.algorithm
    sasl.mechanism               PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (sasl.py's SaslClientConfig)
    sasl.username, sasl.password or sasl.jaas.config

What every part of the pipeline that connects to brokers carries (the CLI's --command-config,
the mirror's two .properties files, an Airflow connection of type `logbroker`, the Spark
source's options): one parser, one set of names. SECRET_KEYS never go into a log line, a
command line or a plan's string; `repr` names the protocol and the user only.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from .sasl import SaslClientConfig
from .tls import ClientSecurity, SecurityConfigError

SASL_KEYS = ("sasl.mechanism", "sasl.username", "sasl.password", "sasl.jaas.config")
KEYS = (*ClientSecurity.KEYS, *SASL_KEYS)
SECRET_KEYS = ("sasl.password", "sasl.jaas.config")
# A .properties file of these keys, 0600, for a process that must not get them on its command
# line (the Spark load's --client-config defaults to it)
CLIENT_CONFIG_ENV = "LOGBROKER_CLIENT_CONFIG"


@dataclass(frozen=True)
class ClientCredentials:
    """TLS settings (None: PLAINTEXT) and a SASL login (None: none)."""

    security: ClientSecurity | None = None
    sasl: SaslClientConfig | None = None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ClientCredentials:
        """From client properties (other keys ignored). SecurityConfigError (a ValueError)
        naming the key: a SASL_* protocol without sasl.mechanism, an unreadable TLS file, a
        missing user or password. Only a SASL_* protocol logs in: with PLAINTEXT or SSL the
        sasl.* keys are not used, as by Kafka's clients (the broker's listeners mapped to
        PLAINTEXT and SSL take no login)."""
        security = (
            ClientSecurity.from_properties(properties)
            if any(properties.get(key, "").strip() for key in ClientSecurity.KEYS)
            else None
        )
        protocol = security.protocol if security is not None else "PLAINTEXT"
        return cls(security, client_sasl(properties, protocol))

    @property
    def protocol(self) -> str:
        return self.security.protocol if self.security is not None else "PLAINTEXT"

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def context(self) -> ssl.SSLContext | None:
        """The TLS context to connect with; None without TLS."""
        return self.security.context() if self.security is not None else None

    def __repr__(self) -> str:  # never the password, in logs or tracebacks
        user = f", user {self.sasl.username!r} ({self.sasl.mechanism})" if self.sasl else ""
        return f"ClientCredentials({self.protocol}{user})"


def client_sasl(properties: Mapping[str, str], protocol: str) -> SaslClientConfig | None:
    """The login of a client whose security.protocol is `protocol`: sasl.*'s for SASL_*
    (refused naming the key when incomplete), None for PLAINTEXT and SSL."""
    if not protocol.startswith("SASL_"):
        return None
    try:
        sasl = SaslClientConfig.from_properties(properties)
    except ValueError as exc:
        raise SecurityConfigError(str(exc)) from None
    if sasl is None:
        raise SecurityConfigError(
            f"security.protocol={protocol} needs sasl.mechanism (and sasl.username and "
            "sasl.password, or sasl.jaas.config)"
        )
    return sasl


def credential_properties(properties: Mapping[str, object]) -> dict[str, str]:
    """The credential keys of `properties` (KEYS) that are set, as strings."""
    return {
        key: str(properties[key])
        for key in KEYS
        if properties.get(key) is not None and str(properties[key]) != ""
    }


def redacted(properties: Mapping[str, object]) -> dict[str, object]:
    """`properties` with SECRET_KEYS' values replaced, for a log line or a plan's string."""
    return {k: "[redacted]" if k in SECRET_KEYS else v for k, v in properties.items()}
