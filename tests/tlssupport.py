"""Certificates made on the fly (trustme) written to files, and routers served in-process for the
TLS tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
import trustme

from router.config.models import RouterConfig
from router.net.server import RouterServer


@dataclass
class Pki:
    """One CA, a server certificate for 127.0.0.1/localhost and a client certificate for alice."""

    ca: trustme.CA
    dir: Path
    ca_file: str
    cert_file: str
    key_file: str
    client_cert: str
    client_key: str

    def issue(self, *names: str, stem: str, ca: trustme.CA | None = None, **kwargs: Any) -> tuple[str, str]:
        """A new certificate (cert file, key file) for `names`, signed by `ca` (ours by default)."""
        cert = (ca or self.ca).issue_cert(*names, **kwargs)
        cert_path, key_path = self.dir / f"{stem}.crt", self.dir / f"{stem}.key"
        cert.private_key_pem.write_to_path(str(key_path))
        cert_path.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
        return str(cert_path), str(key_path)


def make_pki(directory: Path, server_names: Iterable[str] = ("127.0.0.1", "localhost")) -> Pki:
    ca = trustme.CA()
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    pki = Pki(ca, directory, str(ca_file), "", "", "", "")
    pki.cert_file, pki.key_file = pki.issue(*server_names, stem="server")
    pki.client_cert, pki.client_key = pki.issue("alice@example.com", stem="alice", common_name="alice")
    return pki


@asynccontextmanager
async def serving(config: RouterConfig | dict[str, Any]) -> AsyncIterator[RouterServer]:
    """A RouterServer on `config`, stopped (and waited for) on exit."""
    if isinstance(config, dict):
        config = RouterConfig.model_validate(config)
    server = RouterServer(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        try:
            yield server
        finally:
            server.shutdown()
            with trio.fail_after(5):
                await server.wait_stopped()
