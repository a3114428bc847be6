"""TLS contexts from Kafka-named settings, and the principal a peer's certificate names.

Files are PEM, as Python's ssl module takes them (`ssl.certfile`, `ssl.keyfile`, `ssl.cafile`);
Kafka's JKS/PKCS12 keystores convert with `keytool -importkeystore -deststoretype PKCS12` and
`openssl pkcs12 -nodes` (docs/security.md). The principal of a TLS peer is Kafka's default:
`User:` and the subject's distinguished name, here `User:CN=<common name>` (the certificates
of security/certificates.py carry a CN only; other attributes follow it, comma-separated, in
the certificate's order).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .acls import ANONYMOUS

# a listener's (listener.security.protocol.map) and a client's security.protocol, as Kafka's:
# SASL_* are PLAINTEXT / SSL with a SASL login (security/sasl.py) on top
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_PROTOCOLS = SECURITY_PROTOCOLS
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class SecurityConfigError(ValueError):
    """A security setting that cannot be used; the message names the key."""


def _load_chain(context: ssl.SSLContext, certfile: str, keyfile: str, prefix: str = "") -> None:
    for key, path in ((f"{prefix}ssl.certfile", certfile), (f"{prefix}ssl.keyfile", keyfile)):
        try:
            open(path, "rb").close()
        except OSError as exc:
            raise SecurityConfigError(f"{key}={path}: cannot read it: {exc.strerror}") from None
    try:
        context.load_cert_chain(certfile, keyfile or None)
    except (ssl.SSLError, ValueError) as exc:
        raise SecurityConfigError(
            f"{prefix}ssl.certfile={certfile} / {prefix}ssl.keyfile={keyfile}: "
            f"not a PEM certificate and its key: {exc}"
        ) from None


def _load_ca(context: ssl.SSLContext, cafile: str, prefix: str = "") -> None:
    try:
        context.load_verify_locations(cafile=cafile)
    except FileNotFoundError as exc:
        raise SecurityConfigError(
            f"{prefix}ssl.cafile={cafile}: cannot read it: {exc.strerror}"
        ) from None
    except (ssl.SSLError, OSError) as exc:
        raise SecurityConfigError(
            f"{prefix}ssl.cafile={cafile}: not PEM certificates: {exc}"
        ) from None


def server_context(certfile: str, keyfile: str, cafile: str, client_auth: str) -> ssl.SSLContext:
    """A listener's context: its certificate, and the CA its clients' certificates must chain
    to when `client_auth` (ssl.client.auth) is requested or required."""
    if client_auth not in CLIENT_AUTH:
        raise SecurityConfigError(
            f"ssl.client.auth={client_auth}: must be one of {', '.join(CLIENT_AUTH)}"
        )
    if not certfile:
        raise SecurityConfigError("ssl.certfile is not set: an SSL listener needs a certificate")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, certfile, keyfile)
    if client_auth != "none":
        if not cafile:
            raise SecurityConfigError(
                f"ssl.client.auth={client_auth} needs ssl.cafile (the CA clients' "
                "certificates are checked against)"
            )
        _load_ca(context, cafile)
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def client_context(
    cafile: str = "",
    certfile: str = "",
    keyfile: str = "",
    *,
    check_hostname: bool = True,
    prefix: str = "",
) -> ssl.SSLContext:
    """A client's context: the brokers' certificates checked against `cafile` (the system's
    CAs when empty), and this client's own certificate when `certfile` is given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cafile:
        _load_ca(context, cafile, prefix)
    else:
        context.load_default_certs()
    if certfile:
        _load_chain(context, certfile, keyfile, prefix)
    elif keyfile:
        raise SecurityConfigError(f"{prefix}ssl.keyfile is set without {prefix}ssl.certfile")
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def principal_of(peercert: Mapping[str, Any] | None) -> str:
    """`User:CN=...` from `SSLObject.getpeercert()`; ANONYMOUS without a certificate."""
    if not peercert:
        return ANONYMOUS
    parts = [f"{name_of(key)}={value}" for rdn in peercert.get("subject", ()) for key, value in rdn]
    return "User:" + ",".join(parts) if parts else ANONYMOUS


_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
}


def name_of(key: str) -> str:
    return _SHORT.get(key, key)


@dataclass(frozen=True)
class ClientSecurity:
    """A client's security settings, in Kafka's client config names:

    security.protocol                      PLAINTEXT (default) or SSL; SASL_PLAINTEXT and
                                           SASL_SSL are the same with sasl.mechanism's login
                                           (security/sasl.py) on top
    ssl.cafile, ssl.certfile, ssl.keyfile  PEM files (see the module's doc)
    ssl.endpoint.identification.algorithm  https (default: the broker's certificate must
                                           name the host connected to) or empty (not checked)
    """

    protocol: str = "PLAINTEXT"
    cafile: str = ""
    certfile: str = ""
    keyfile: str = ""
    check_hostname: bool = True

    KEYS = (
        "security.protocol",
        "ssl.cafile",
        "ssl.certfile",
        "ssl.keyfile",
        "ssl.endpoint.identification.algorithm",
    )

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ClientSecurity:
        protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in CLIENT_PROTOCOLS:
            raise SecurityConfigError(
                f"security.protocol={protocol}: must be one of {', '.join(CLIENT_PROTOCOLS)}"
            )
        algorithm = properties.get("ssl.endpoint.identification.algorithm", "https").strip()
        if algorithm not in ("https", ""):
            raise SecurityConfigError(
                f"ssl.endpoint.identification.algorithm={algorithm}: must be https or empty"
            )
        security = cls(
            protocol,
            properties.get("ssl.cafile", "").strip(),
            properties.get("ssl.certfile", "").strip(),
            properties.get("ssl.keyfile", "").strip(),
            algorithm == "https",
        )
        security.context()  # unreadable files: refused now, naming the key
        return security

    def context(self) -> ssl.SSLContext | None:
        """The TLS context to connect with; None on PLAINTEXT."""
        if self.protocol not in TLS_PROTOCOLS:
            return None
        return client_context(
            self.cafile, self.certfile, self.keyfile, check_hostname=self.check_hostname
        )
