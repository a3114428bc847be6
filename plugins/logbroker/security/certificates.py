"""A certificate authority and the certificates it signs, as PEM files (for tests and `make up`).

    <directory>/ca.pem, ca.key                the CA (self-signed)
    <directory>/<name>.pem, <name>.key         a certificate for CN=<name>, signed by the CA,
                                               valid for 127.0.0.1 and localhost

Every file is written 0600 (the keys are secrets; the certificates do not need to be, but one
mode for all keeps the directory simple). Keys are EC P-256: quick to make, and every TLS
library here (Python's ssl, librdkafka) takes them. Brokers get CN=broker-<id>, the name a
broker principal is matched by (security/listeners.py), clients any other CN.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365


@dataclass(frozen=True)
class Issued:
    """Where a certificate and its key were written."""

    certfile: Path
    keyfile: Path


def _write(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CertificateAuthority:
    """A CA under `directory`: made there on first use, read back after."""

    def __init__(self, directory: Path, name: str = "logbroker-ca") -> None:
        self.directory = Path(directory)
        self.certfile = self.directory / "ca.pem"
        self.keyfile = self.directory / "ca.key"
        if self.certfile.exists() and self.keyfile.exists():
            self.cert = x509.load_pem_x509_certificate(self.certfile.read_bytes())
            key = serialization.load_pem_private_key(self.keyfile.read_bytes(), None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)
            self.key = key
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        _write(self.keyfile, _key_pem(self.key))
        _write(self.certfile, self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        common_name: str,
        hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
        *,
        valid_days: int = VALID_DAYS,
        not_before: datetime.datetime | None = None,
    ) -> Issued:
        """A certificate for CN=`common_name` (server and client use), valid for `hosts`,
        written as <common_name>.pem and .key beside the CA. `not_before` (now by default)
        and `valid_days` make expired certificates for tests."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        keyfile = _write(self.directory / f"{common_name}.key", _key_pem(key))
        certfile = _write(
            self.directory / f"{common_name}.pem", cert.public_bytes(serialization.Encoding.PEM)
        )
        return Issued(certfile, keyfile)
