"""`router k8s site NAME --peer HOST:PORT ...` and `router k8s render-interior TEMPLATE`: the
Kubernetes deployment's two pieces of logic (deploy/k8s, docs/deploy.md).

    site             writes deploy/k8s/overlays/NAME: its kustomization, the interiors' router
                     configuration (the base's plus an inter-router connector with a WAN cost to
                     each peer site's public endpoint), the public inter-router Service and
                     NetworkPolicy, and the certificate request naming the site's public host
    render-interior  run by the interiors' init container: the router configuration of pod
                     router-N (router.id = the pod name, a connector to each lower ordinal)

Owns: these two commands and the layout of a generated overlay. Every configuration either
writes is validated against the configuration model first.
Must not touch: the base manifests (it reads the base's interior.yaml), running routers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from ..config.loader import problems_of
from ..config.models import RouterConfig
from .common import stderr

app = typer.Typer(help="Kubernetes: generate a site's overlay, render an interior's configuration.", no_args_is_help=True)

INTER_ROUTER_PORT = 55671
SITE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")  # a DNS label, short enough for labels
HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
EMPTY_CONNECTORS = "connectors: []"


def _fail(message: str) -> typer.Exit:
    stderr.print(message, markup=False)
    return typer.Exit(2)


def _validated(config: dict[str, Any], what: str) -> None:
    try:
        RouterConfig.model_validate(config)
    except ValidationError as exc:
        raise _fail("\n".join(problems_of(exc, what))) from None


# -- render-interior -------------------------------------------------------------------------


def ordinal_of(pod_name: str) -> int:
    """The StatefulSet ordinal at the end of a pod name (router-2 -> 2)."""
    match = re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?-(\d{1,6})", pod_name)
    if match is None:
        raise ValueError(f"pod name {pod_name!r} does not end in a StatefulSet ordinal (-N)")
    return int(match.group(2))


def render_interior(
    template: dict[str, Any], pod_name: str, namespace: str, service: str, cluster_domain: str, site: str = ""
) -> dict[str, Any]:
    """The configuration of interior `pod_name`: the template's, with the router id
    `SITE-router-N` (or the pod name without a site) and a connector to each lower ordinal
    (router-0 dials none, router-2 dials router-0 and router-1): one connection per pair,
    whichever the replica count. Every site's StatefulSet names its pods router-0, router-1,
    ...: without the site in the id, two linked sites would both have a router-0, and a mesh
    refuses a second router with an id it knows."""
    ordinal = ordinal_of(pod_name)
    prefix = pod_name[: pod_name.rindex("-")]
    config = dict(template)
    router_id = f"{site}-{pod_name}" if site else pod_name
    config["router"] = {**dict(config.get("router") or {}), "id": router_id, "mode": "interior"}
    profile = next((p["name"] for p in config.get("ssl_profiles") or () if p.get("name") == "mesh"), None)
    connectors = list(config.get("connectors") or ())
    for peer in range(ordinal):
        connector: dict[str, Any] = {
            "name": f"interior-{peer}",
            "host": f"{prefix}-{peer}.{service}.{namespace}.svc.{cluster_domain}",
            "port": INTER_ROUTER_PORT,
            "role": "inter-router",
        }
        if profile is not None:
            connector["ssl_profile"] = profile
        connectors.append(connector)
    config["connectors"] = connectors
    return config


@app.command("render-interior")
def render_interior_command(
    template: Annotated[Path, typer.Argument(help="the interiors' router configuration (the ConfigMap's interior.yaml)")],
    out: Annotated[Path, typer.Option("-o", "--out", help="where to write this pod's configuration")],
    pod_name: Annotated[str, typer.Option(envvar="POD_NAME", help="this pod's name (router-N)")],
    namespace: Annotated[str, typer.Option(envvar="POD_NAMESPACE", help="this pod's namespace")],
    service: Annotated[str, typer.Option(envvar="INTERIOR_SERVICE", help="the headless Service")] = "router-interior",
    cluster_domain: Annotated[str, typer.Option(envvar="CLUSTER_DOMAIN")] = "cluster.local",
    site: Annotated[str, typer.Option(envvar="ROUTER_SITE", help="the site's name, the router ids' prefix (set by the overlay)")] = "",
) -> None:
    """Write the configuration of interior pod router-N: its id and connectors to router-0..N-1."""
    try:
        loaded = yaml.safe_load(template.read_text())
        if not isinstance(loaded, dict):
            raise ValueError("the template is not a YAML mapping")
        if site and not SITE_NAME.fullmatch(site):
            raise ValueError(f"site {site!r}: a DNS label of at most 40 characters (a-z, 0-9, '-')")
        config = render_interior(loaded, pod_name, namespace, service, cluster_domain, site)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise _fail(f"{template}: {exc}") from None
    _validated(config, str(template))
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(out)
    typer.echo(f"{out}: {pod_name} with {len(config['connectors'])} connectors")


# -- site ------------------------------------------------------------------------------------


def parse_peer(text: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if not sep or not HOST.fullmatch(host) or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"--peer {text!r}: give HOST:PORT (a DNS name or IPv4 address and a port 1-65535)")
    return host, int(port_text)


def site_interior_config(base_text: str, peers: list[tuple[str, int]], wan_cost: int) -> str:
    """The base's interior configuration with a WAN connector per peer site, comments kept."""
    if base_text.count(EMPTY_CONNECTORS) != 1:
        raise ValueError(f"the base interior.yaml must hold one line {EMPTY_CONNECTORS!r} for the site's connectors")
    if not peers:
        return base_text
    lines = ["# Inter-router links to the other sites' public endpoints (router k8s site --peer).", "connectors:"]
    for host, port in peers:
        lines.append(
            f"  - {{name: wan-{host}, host: {host}, port: {port}, role: inter-router, ssl_profile: mesh, cost: {wan_cost}}}"
        )
    return base_text.replace(EMPTY_CONNECTORS, "\n".join(lines))


def _kustomization(name: str, public_host: str) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../../base", "wan.yaml"],
        "components": ["../../components/cert-manager"],
        "labels": [{"pairs": {"amqp-mesh/site": name}, "includeSelectors": False}],
        "configMapGenerator": [{"name": "router-config", "behavior": "merge", "files": ["interior.yaml"]}],
        "patches": [
            {
                "target": {"group": "cert-manager.io", "kind": "Certificate", "name": "router-mesh"},
                # The peers' connectors check that our certificate names the host they dial.
                "patch": yaml.safe_dump([{"op": "add", "path": "/spec/dnsNames/-", "value": public_host}]),
            },
            {
                # Router ids unique across sites: NAME-router-0, NAME-router-1, ...
                "target": {"group": "apps", "kind": "StatefulSet", "name": "router"},
                "patch": yaml.safe_dump({
                    "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "router"},
                    "spec": {"template": {"spec": {"initContainers": [
                        {"name": "render-config", "env": [{"name": "ROUTER_SITE", "value": name}]}
                    ]}}},
                }, sort_keys=False),  # fmt: skip
            },
        ],
    }


def _wan_objects(allow_from: list[str]) -> list[dict[str, Any]]:
    interiors = {"app.kubernetes.io/name": "amqp-mesh-router", "app.kubernetes.io/component": "interior"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "router-wan"},
        "spec": {
            "type": "LoadBalancer",
            "selector": interiors,
            "ports": [{"name": "inter-router", "port": INTER_ROUTER_PORT, "targetPort": "inter-router"}],
        },
    }
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "router-wan"},
        "spec": {
            "podSelector": {"matchLabels": interiors},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "ports": [{"port": INTER_ROUTER_PORT, "protocol": "TCP"}],
                    "from": [{"ipBlock": {"cidr": cidr}} for cidr in allow_from],
                }
            ],
        },
    }
    return [service, policy]


CIDR = re.compile(r"^(\d{1,3}\.){3}\d{1,3}/\d{1,2}$|^[0-9a-fA-F:]+/\d{1,3}$")


@app.command()
def site(
    name: Annotated[str, typer.Argument(help="the site's name (a DNS label: dc-east)")],
    public_host: Annotated[str, typer.Option("--public-host", help="the DNS name other sites dial (router-wan Service)")],
    peer: Annotated[list[str], typer.Option("--peer", help="HOST:PORT of another site's public inter-router endpoint; repeat")] = [],
    allow_from: Annotated[
        list[str], typer.Option("--allow-from", help="CIDR the other sites' routers connect from (NetworkPolicy); repeat")
    ] = [],
    wan_cost: Annotated[int, typer.Option("--wan-cost", min=1, max=2**31 - 1, help="cost of each WAN link")] = 10,
    deploy_dir: Annotated[Path, typer.Option("--deploy-dir", help="holds base/ and overlays/")] = Path("deploy/k8s"),
    force: Annotated[bool, typer.Option("--force", help="replace an existing overlay")] = False,
) -> None:
    """Write deploy/k8s/overlays/NAME: a new site in one command."""
    if not SITE_NAME.fullmatch(name):
        raise _fail(f"site name {name!r}: a DNS label of at most 40 characters (a-z, 0-9, '-')")
    if not HOST.fullmatch(public_host):
        raise _fail(f"--public-host {public_host!r}: give a DNS name")
    try:
        peers = [parse_peer(text) for text in peer]
    except ValueError as exc:
        raise _fail(str(exc)) from None
    bad = [cidr for cidr in allow_from if not CIDR.fullmatch(cidr)]
    if bad:
        raise _fail(f"--allow-from {bad[0]!r}: give a CIDR (203.0.113.0/24)")
    base = deploy_dir / "base" / "config" / "interior.yaml"
    try:
        text = site_interior_config(base.read_text(), peers, wan_cost)
    except (OSError, ValueError) as exc:
        raise _fail(f"{base}: {exc}") from None
    loaded = yaml.safe_load(text)
    _validated(render_interior(loaded, "router-0", "amqp-mesh", "router-interior", "cluster.local", name), f"{name}/interior.yaml")
    overlay = deploy_dir / "overlays" / name
    if overlay.exists() and not force:
        raise _fail(f"{overlay} exists (--force replaces it)")
    overlay.mkdir(parents=True, exist_ok=True)
    command = " ".join(
        ["router k8s site", name, "--public-host", public_host, *(f"--peer {p}" for p in peer),
         *(f"--allow-from {c}" for c in allow_from), f"--wan-cost {wan_cost}"]
    )
    header = f"# Generated by: {command}\n# To change the site, change the command line and run it again with --force.\n"
    (overlay / "interior.yaml").write_text(header + text)
    (overlay / "kustomization.yaml").write_text(header + yaml.safe_dump(_kustomization(name, public_host), sort_keys=False))
    note = "" if allow_from else "# No --allow-from: no other site can reach 55671 here (generate again with --allow-from CIDR).\n"
    wan = _wan_objects(allow_from) if allow_from else _wan_objects([])[:1]
    (overlay / "wan.yaml").write_text(header + note + yaml.safe_dump_all(wan, sort_keys=False))
    typer.echo(f"{overlay}: {len(peers)} peer site(s); render with `kubectl kustomize {overlay}`")
