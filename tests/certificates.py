"""A fresh test CA and a server certificate it signed, for TLS over loopback in tests."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class TlsPair:
    """`server`: a context with a certificate for one name or address only; `client`: a context
    that trusts the CA alone; `ca_pem`: that CA's certificate."""

    server: ssl.SSLContext
    client: ssl.SSLContext
    ca_pem: bytes


def tls_pair(name: str) -> TlsPair:
    """A server certificate for `name` (a DNS name, or an IP address), from a fresh CA."""
    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: Any, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([_alt_name(subject)]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("test CA", ca_key, "test CA", ca_key, True)
    leaf = certificate(name, leaf_key, "test CA", ca_key, False)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    client = ssl.create_default_context(cadata=ca_pem.decode())
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as folder:
        chain, key = Path(folder) / "chain.pem", Path(folder) / "key.pem"
        chain.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        key.write_bytes(
            leaf_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        server.load_cert_chain(chain, key)
    return TlsPair(server, client, ca_pem)


def _alt_name(subject: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(subject))
    except ValueError:
        return x509.DNSName(subject)
