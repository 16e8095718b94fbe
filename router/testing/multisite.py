"""Sites of deploy/k8s run as router processes in network namespaces, joined by a delaying WAN.

    with Sites(tmp_path, ["dc-east", "dc-west"], delay_ms=10) as sites:
        await sites.wait_meshed()
        async with sites.client("dc-east", 1) as client: ...   # a client inside dc-east, on router-1
        sites.wan("cut"); sites.wan("heal")                     # the relay's commands

Each site is the configuration `kubectl kustomize deploy/k8s/overlays/SITE` renders (the
ConfigMap's interior.yaml, through `render_interior` as the init container runs it) for
`interiors` pods, changed only where a namespace is not a cluster: listeners bind the pod's own
address instead of 0.0.0.0 (a site's pods share one namespace), the TLS files are certificates
made for the test (one CA; each site's certificate names its pods and its public host, as the
overlay's Certificate does), and the routers' hello and dead intervals are short so that a
cut is noticed within a second.

The network: a namespace per site and one `wan` namespace with a veth to each site (site N
owns 10.<tag>.N.0/24: .1 is the WAN end, .2, .3, ... its pods). Each site's /etc/hosts names its
own pods (the headless Service's DNS names) and every other site's public host at the WAN end
of its own veth, where router.testing.wanrelay listens and relays to that site's router-0 (the
router-wan Service), holding every byte for the one-way delay.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import trio
import yaml

from router.net.client import Client, connect
from router.net.management_client import management_session
from router.testing.netns import Namespaces

from .processes import ROOT, RouterProcess, router_command, router_env


def _k8s_dir() -> Path:
    """deploy/k8s of the checkout under test; from an installed wheel (which ships no deploy/),
    that of the directory the tests run from."""
    for base in (ROOT, Path.cwd()):
        if (base / "deploy" / "k8s").is_dir():
            return base / "deploy" / "k8s"
    return ROOT / "deploy" / "k8s"


K8S = _k8s_dir()
SERVICE = "router-interior"
NODE_TYPE = "org.apache.qpid.dispatch.router.node"


def site_template(site: str) -> tuple[dict[str, Any], str, str]:
    """(the interiors' configuration template, the namespace, the public host) of an overlay."""
    out = subprocess.run(["kubectl", "kustomize", str(K8S / "overlays" / site)], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    (template_text,) = [d["data"]["interior.yaml"] for d in docs if d["kind"] == "ConfigMap" and "interior.yaml" in d.get("data", {})]
    (statefulset,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (certificate,) = [d for d in docs if d["kind"] == "Certificate" and d["metadata"]["name"] == "router-mesh"]
    public = [n for n in certificate["spec"]["dnsNames"] if not n.endswith(".svc.cluster.local") and "." in n]
    return yaml.safe_load(template_text), statefulset["metadata"]["namespace"], public[-1]


def render_interior(template: Path, out: Path, pod: str, namespace: str, site: str) -> dict[str, Any]:
    """What the StatefulSet's init container writes for `pod` (`router k8s render-interior`,
    run as the init container runs it, with the pod's environment)."""
    env = {**router_env(), "POD_NAME": pod, "POD_NAMESPACE": namespace, "ROUTER_SITE": site,
           "INTERIOR_SERVICE": SERVICE, "CLUSTER_DOMAIN": "cluster.local"}  # fmt: skip
    done = subprocess.run(router_command("k8s", "render-interior", str(template), "-o", str(out)),
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"render-interior {pod} of {site}: {done.stderr or done.stdout}")
    config: dict[str, Any] = yaml.safe_load(out.read_text())
    return config


class Sites:
    def __init__(self, directory: Path, sites: list[str], *, interiors: int = 2, delay_ms: float = 10.0,
                 hello_interval_s: float = 0.25, dead_interval_s: float = 1.0) -> None:  # fmt: skip
        self.directory = directory
        self.sites = sites
        self.interiors = interiors
        self.delay_ms = delay_ms
        self.timers = {"hello_interval_s": hello_interval_s, "dead_interval_s": dead_interval_s}
        self.net = Namespaces()
        self.tag = 60 + int(self.net.tag) % 150
        self.ns: dict[str, str] = {}
        self.routers: dict[tuple[str, int], RouterProcess] = {}
        self.relay: subprocess.Popen[str] | None = None

    def pod_address(self, site: str, ordinal: int) -> str:
        return f"10.{self.tag}.{self.sites.index(site) + 1}.{ordinal + 2}"

    def wan_end(self, site: str, other: str | None = None) -> str:
        """The WAN end of `site`'s veth; with `other`, the address there that stands for
        `other`'s public host (a relay route of its own per peer site)."""
        last = 1 if other is None else 100 + self.sites.index(other)
        return f"10.{self.tag}.{self.sites.index(site) + 1}.{last}"

    def router_id(self, site: str, ordinal: int) -> str:
        return f"{site}-router-{ordinal}"

    def start(self) -> None:
        import trustme

        ca = trustme.CA()
        ca_file = self.directory / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        wan = self.net.add("wan")
        templates = {site: site_template(site) for site in self.sites}
        publics = {site: templates[site][2] for site in self.sites}
        routes = []
        for site in self.sites:
            ns = self.ns[site] = self.net.add(site.replace("dc-", "")[:6])
            site_end, wan_end = self.net.link(ns, self.pod_address(site, 0), wan, self.wan_end(site))
            for ordinal in range(1, self.interiors):
                self.net.add_address(ns, site_end, self.pod_address(site, ordinal))
            namespace = templates[site][1]
            pods = {f"router-{n}.{SERVICE}.{namespace}.svc.cluster.local": self.pod_address(site, n) for n in range(self.interiors)}
            others = [o for o in self.sites if o != site]
            self.net.hosts(ns, {**pods, **{publics[o]: self.wan_end(site, o) for o in others}})
            for other in others:  # `site` dials `other`'s public host: a relay at site's WAN end
                self.net.add_address(wan, wan_end, self.wan_end(site, other))
                routes.append(f"{self.wan_end(site, other)}:55671={self.pod_address(other, 0)}:55671")
            cert = ca.issue_cert(*pods, publics[site], common_name="router-mesh")  # as the overlay's Certificate
            cert_file, key_file = self.directory / f"{site}.pem", self.directory / f"{site}.key"
            cert.cert_chain_pems[0].write_to_path(str(cert_file))
            cert.private_key_pem.write_to_path(str(key_file))
            template = self.directory / f"{site}-template.yaml"
            template.write_text(yaml.safe_dump(templates[site][0], sort_keys=False))
            for n in range(self.interiors):
                config = render_interior(template, self.directory / f"{site}-{n}.rendered.yaml", f"router-{n}", namespace, site)
                self._localise(config, self.pod_address(site, n), cert_file, key_file, ca_file)
                path = self.directory / f"{site}-{n}.yaml"
                path.write_text(yaml.safe_dump(config, sort_keys=False))
                self.routers[(site, n)] = RouterProcess(path, listeners=len(config["listeners"]), prefix=tuple(self.net.command(ns)))
        self.relay = subprocess.Popen(
            [*self.net.command(wan), sys.executable, "-m", "router.testing.wanrelay", "--delay-ms", str(self.delay_ms),
             *(f"--route={r}" for r in routes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=router_env(),
        )  # fmt: skip
        assert self.relay.stdout is not None
        for _ in routes:
            line = self.relay.stdout.readline()
            if not line.startswith("relaying"):
                raise RuntimeError(f"the WAN relay did not start: {line!r}")
        for process in self.routers.values():
            process.start()

    def _localise(self, config: dict[str, Any], address: str, cert: Path, key: Path, ca: Path) -> None:
        config["router"].update(self.timers)
        for listener in [*config["listeners"], *config.get("http", [])]:
            listener["host"] = address
        for profile in config["ssl_profiles"]:
            profile.update(cert_file=str(cert), key_file=str(key), ca_file=str(ca))
        for connector in config["connectors"]:
            connector.update(reconnect_initial_s=0.2, reconnect_max_s=1.0)

    def wan(self, command: str) -> dict[str, Any]:
        """A relay command (cut, heal, delay MS, stats) and its answer."""
        assert self.relay is not None and self.relay.stdin is not None and self.relay.stdout is not None
        self.relay.stdin.write(command + "\n")
        self.relay.stdin.flush()
        answer: dict[str, Any] = json.loads(self.relay.stdout.readline())
        return answer

    @asynccontextmanager
    async def client(self, site: str, ordinal: int = 0) -> AsyncIterator[Client]:
        """Our client inside `site`, connected to its router-`ordinal`'s plain listener."""
        address = self.pod_address(site, ordinal)
        stream = await self.net.open_tcp_stream(self.ns[site], address, 5672)
        async with connect(address, 5672, stream=stream) as client:
            yield client

    async def query(self, site: str, ordinal: int, entity_type: str) -> list[dict[str, Any]]:
        async with self.client(site, ordinal) as client, management_session(client) as mgmt:
            return await mgmt.query_dicts(entity_type)

    async def wait_meshed(self, timeout_s: float = 20.0) -> None:
        """Until every router has a next hop to every other."""
        everyone = {self.router_id(site, n) for site, n in self.routers}
        with trio.fail_after(timeout_s):
            for site, n in self.routers:
                while True:
                    known = {row["id"] for row in await self.query(site, n, NODE_TYPE) if row.get("nextHop")}
                    if everyone - {self.router_id(site, n)} <= known:
                        break
                    await trio.sleep(0.1)  # across processes: no event to wait for

    def output(self) -> str:
        return "\n".join(f"--- {site} router-{n}\n{p.output}" for (site, n), p in self.routers.items())

    def close(self) -> None:
        failures = []
        for (site, n), process in self.routers.items():
            if process.proc is not None and process.proc.poll() is None:
                code = process.stop()
                if code != 0:
                    failures.append(f"{site} router-{n} exited with {code}:\n{process.output}")
            process.kill()
        if self.relay is not None:
            if self.relay.stdin is not None:
                self.relay.stdin.close()  # the relay exits when its input closes
            try:
                self.relay.wait(5)
            except subprocess.TimeoutExpired:
                self.relay.kill()
                self.relay.wait(5)
        self.net.close()
        assert not failures, "\n".join(failures)

    def __enter__(self) -> Sites:
        try:
            self.start()
        except BaseException as exc:
            self.__exit__(type(exc), exc, None)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
            return
        for process in self.routers.values():
            process.kill()
        print(self.output())
        if self.relay is not None:
            self.relay.kill()
            self.relay.wait(5)
        self.net.close()
