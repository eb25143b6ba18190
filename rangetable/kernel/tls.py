"""TLS for the REST endpoint: the server's SSL context and a self-signed development certificate.

``rangetable up --cert PEM --key PEM`` (Azurite's flag names; ``RANGETABLE_CERT``/``RANGETABLE_KEY``)
makes every HTTP frontend speak HTTPS. ``rangetable cert create`` writes a development certificate
for ``localhost`` and ``127.0.0.1`` with ``openssl`` (the ``cryptography`` package is not a
dependency): clients trust it by pointing ``connection_verify`` / ``REQUESTS_CA_BUNDLE`` at it.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess

CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
DEV_SUBJECT_ALT_NAME = "DNS:localhost,IP:127.0.0.1"


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """An SSL context serving ``cert`` with ``key`` (TLS 1.2+); raises ValueError naming the bad file."""
    for what, path in (("certificate", cert), ("key", key)):
        if not path:
            raise ValueError(f"--cert and --key go together: the {what} is missing")
        if not os.path.isfile(path):
            raise ValueError(f"TLS {what} {path!r} does not exist")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"cannot use TLS certificate {cert!r} with key {key!r}: {exc}") from None
    return ctx


def create_dev_cert(directory: str, days: int = 825, force: bool = False) -> tuple[str, str]:
    """Write a self-signed certificate (EC P-256, subjectAltName DNS:localhost, IP:127.0.0.1) and its
    key (mode 0600) into ``directory``; returns their paths. Existing files are kept unless ``force``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("`openssl` is not installed: it is needed to create a certificate")
    os.makedirs(directory, exist_ok=True)
    cert, key = os.path.join(directory, CERT_FILE), os.path.join(directory, KEY_FILE)
    if not force and os.path.exists(cert) and os.path.exists(key):
        return cert, key
    tmp_key = key + ".tmp"
    fd = os.open(tmp_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never readable by others
    os.close(fd)
    out = subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", str(days), "-subj", "/CN=localhost", "-addext", f"subjectAltName={DEV_SUBJECT_ALT_NAME}",
         "-keyout", tmp_key, "-out", cert + ".tmp"],
        capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"openssl failed: {out.stderr.strip()}")
    os.chmod(tmp_key, 0o600)
    os.replace(tmp_key, key)
    os.replace(cert + ".tmp", cert)
    return cert, key


def describe(cert: str) -> dict[str, str]:
    """Subject, subjectAltName and expiry of a PEM certificate (for ``rangetable cert create``)."""
    openssl = shutil.which("openssl") or "openssl"
    out = subprocess.run([openssl, "x509", "-in", cert, "-noout", "-subject", "-enddate", "-ext", "subjectAltName"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"openssl cannot read {cert}: {out.stderr.strip()}")
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    info = {"subject": "", "subject_alt_name": "", "not_after": ""}
    for i, line in enumerate(lines):
        if line.startswith("subject="):
            info["subject"] = line[len("subject="):].strip()
        elif line.startswith("notAfter="):
            info["not_after"] = line[len("notAfter="):]
        elif line.startswith("X509v3 Subject Alternative Name") and i + 1 < len(lines):
            info["subject_alt_name"] = lines[i + 1]
    return info
