"""deploy/k8s without a cluster: every kustomization renders with `kubectl kustomize`, validates
strictly against the Kubernetes schemas (kubernetes-validate, offline), and holds together
across objects (selectors, ConfigMaps, Secrets, Services, ports, probes, certificates, router
configurations). Skips without kubectl or kubernetes-validate."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from router.cli.k8s import render_interior
from router.config.models import RouterConfig

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (test extra)")

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.32.0"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").exists())
TARGETS = ["base", *(f"overlays/{name}" for name in OVERLAYS)]
# Secrets made by hand (docs/deploy.md): the CA key pairs always, the routers' own without cert-manager.
EXTERNAL_SECRETS = {"mesh-ca", "clients-ca"}
BASE_SECRETS = {"router-mesh-tls", "router-clients-tls"}
CRDS = {("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "Issuer")}
CONFIG_PATH = "/etc/router/router.yaml"
SECRET_KEYS = {"tls.crt", "tls.key", "ca.crt"}

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) is not installed")


@cache
def rendered(target: str) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(["kubectl", "kustomize", str(K8S / target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


def by_kind(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: tuple[dict[str, Any], ...], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in by_kind(docs, kind)}


def workloads(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("StatefulSet", "Deployment")]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pods_selected(docs: tuple[dict[str, Any], ...], selector: dict[str, str]) -> list[dict[str, Any]]:
    return [w for w in workloads(docs) if matches(selector, w["spec"]["template"]["metadata"]["labels"])]


def router_configs(docs: tuple[dict[str, Any], ...], workload: dict[str, Any]) -> list[RouterConfig]:
    """The configurations a workload's router container runs: the ConfigMap key mounted as
    router.yaml, or for interiors the template rendered by the init container (first and last
    ordinal)."""
    spec = workload["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    maps = named(docs, "ConfigMap")
    (router,) = [c for c in spec["containers"] if c["name"] == "router"]
    assert router["args"] == ["run", "-c", CONFIG_PATH]
    mount = next(m for m in router["volumeMounts"] if m["mountPath"] == str(Path(CONFIG_PATH).parent))
    volume = volumes[mount["name"]]
    if "configMap" in volume:
        items = {i["path"]: i["key"] for i in volume["configMap"]["items"]}
        text = maps[volume["configMap"]["name"]]["data"][items[Path(CONFIG_PATH).name]]
        return [RouterConfig.model_validate(yaml.safe_load(text))]
    assert "emptyDir" in volume, f"{workload['metadata']['name']}: {CONFIG_PATH} from neither a ConfigMap nor an init step"
    (init,) = spec["initContainers"]
    assert init["command"][:3] == ["router", "k8s", "render-interior"] and init["command"][-2:] == ["-o", CONFIG_PATH]
    assert any(m["name"] == mount["name"] and m["mountPath"] == mount["mountPath"] for m in init["volumeMounts"])
    template_path = Path(init["command"][3])
    template_mount = next(m for m in init["volumeMounts"] if m["mountPath"] == str(template_path.parent))
    template_volume = volumes[template_mount["name"]]["configMap"]
    items = {i["path"]: i["key"] for i in template_volume["items"]}
    template = yaml.safe_load(maps[template_volume["name"]]["data"][items[template_path.name]])
    env = {e["name"]: e for e in init["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["INTERIOR_SERVICE"]["value"] == workload["spec"]["serviceName"]
    name, replicas = workload["metadata"]["name"], workload["spec"]["replicas"]
    return [
        RouterConfig.model_validate(
            render_interior(template, f"{name}-{n}", workload["metadata"]["namespace"], env["INTERIOR_SERVICE"]["value"],
                            env["CLUSTER_DOMAIN"]["value"], env.get("ROUTER_SITE", {}).get("value", ""))
        )
        for n in sorted({0, replicas - 1})
    ]


@pytest.mark.parametrize("target", TARGETS)
def test_renders_and_validates_strictly(target: str) -> None:
    docs = rendered(target)
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy"} <= kinds
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRDS:
            continue  # no schema offline: checked by test_certificates_name_every_host
        # Raises ValidationError on an unknown field or a wrong type.
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    if target.startswith("overlays/"):
        assert ("cert-manager.io/v1", "Certificate") in {(d["apiVersion"], d["kind"]) for d in docs}


@pytest.mark.parametrize("target", TARGETS)
def test_selectors_and_references_agree(target: str) -> None:
    docs = rendered(target)
    services = named(docs, "Service")
    maps = named(docs, "ConfigMap")
    secrets = {c["spec"]["secretName"] for c in by_kind(docs, "Certificate")} | EXTERNAL_SECRETS
    if target == "base":
        secrets |= BASE_SECRETS
    for workload in workloads(docs):
        spec = workload["spec"]
        assert matches(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])
        if workload["kind"] == "StatefulSet":
            headless = services[spec["serviceName"]]
            assert headless["spec"]["clusterIP"] == "None"
            assert pods_selected(docs, headless["spec"]["selector"]) == [workload]
        for volume in spec["template"]["spec"]["volumes"]:
            if "configMap" in volume:
                data = maps[volume["configMap"]["name"]]["data"]
                assert {i["key"] for i in volume["configMap"]["items"]} <= set(data)
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, volume
    for issuer in by_kind(docs, "Issuer"):
        assert issuer["spec"]["ca"]["secretName"] in EXTERNAL_SECRETS
    for service in services.values():
        selected = pods_selected(docs, service["spec"]["selector"])
        assert selected, f"Service {service['metadata']['name']} selects no pods"
        for port in service["spec"]["ports"]:
            for workload in selected:
                (router,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == "router"]
                assert port["targetPort"] in {p["name"] for p in router["ports"]}, (service["metadata"]["name"], port)
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        for doc in by_kind(docs, kind):
            selector = doc["spec"]["selector" if kind == "PodDisruptionBudget" else "podSelector"]["matchLabels"]
            assert pods_selected(docs, selector), f"{kind} {doc['metadata']['name']} selects no pods"


@pytest.mark.parametrize("target", TARGETS)
def test_ports_probes_and_configs_agree(target: str) -> None:
    """Every router configuration in the ConfigMaps validates; the container ports are the
    listeners' ports; probes and scrape annotations point at the HTTP listener."""
    docs = rendered(target)
    for cm in by_kind(docs, "ConfigMap"):
        for key, text in cm["data"].items():
            assert key.endswith(".yaml")
            RouterConfig.model_validate(yaml.safe_load(text))
    for workload in workloads(docs):
        template = workload["spec"]["template"]
        (router,) = [c for c in template["spec"]["containers"] if c["name"] == "router"]
        ports = {p["name"]: p["containerPort"] for p in router["ports"]}
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        for config in router_configs(docs, workload):
            opened = {listener.port for listener in config.listeners if listener.host == "0.0.0.0"}
            http = {h.port for h in config.http if h.host == "0.0.0.0"}
            assert set(ports.values()) == opened | http
            for probe in ("readinessProbe", "livenessProbe"):
                get = router[probe]["httpGet"]
                assert get["path"] == "/healthz" and ports[get["port"]] in http
            annotations = template["metadata"]["annotations"]
            assert annotations["prometheus.io/scrape"] == "true" and int(annotations["prometheus.io/port"]) in http
            assert config.router.mode == ("interior" if workload["kind"] == "StatefulSet" else "edge")
            secret_dirs = {
                m["mountPath"]: volumes[m["name"]]["secret"]["secretName"]
                for m in router["volumeMounts"] if "secret" in volumes[m["name"]]
            }
            for profile in config.ssl_profiles:
                for path in filter(None, (profile.cert_file, profile.key_file, profile.ca_file)):
                    # A Secret mounted as a directory of its keys (cert-manager's: tls.crt, tls.key, ca.crt).
                    assert str(Path(path).parent) in secret_dirs, f"{profile.name}: {path} is in no mounted Secret"
                    assert Path(path).name in SECRET_KEYS
            for mount in router["volumeMounts"]:
                # Nothing mounted inside another mount (the kubelet cannot make mount points in a read-only volume).
                assert not any(mount["mountPath"].startswith(other["mountPath"] + "/") for other in router["volumeMounts"])


def _named_by(dns_names: list[str], host: str) -> bool:
    # A wildcard stands for exactly one label (RFC 6125 6.4.3, as OpenSSL checks it).
    return any(
        name == host or (name.startswith("*.") and host.count(".") == name.count(".") and fnmatch.fnmatch(host, name))
        for name in dns_names
    )


def test_certificates_name_every_host() -> None:
    """Connectors verify the peer's host name: every host a router dials, inside its site or
    at another, is named by the mesh certificate of the site it reaches."""
    site_names: dict[str, list[str]] = {}
    dialled: dict[str, set[str]] = {}
    for name in OVERLAYS:
        docs = rendered(f"overlays/{name}")
        certificates = named(docs, "Certificate")
        for cert in certificates.values():
            assert cert["apiVersion"] == "cert-manager.io/v1"
            assert set(cert["spec"]) <= {"secretName", "commonName", "duration", "renewBefore", "privateKey", "usages", "dnsNames", "issuerRef"}
            assert cert["spec"]["issuerRef"]["name"] in named(docs, "Issuer")
        mesh = certificates["router-mesh"]["spec"]
        assert {"server auth", "client auth"} <= set(mesh["usages"])
        site_names[name] = mesh["dnsNames"]
        dialled[name] = set()
        for workload in workloads(docs):
            for config in router_configs(docs, workload):
                for connector in config.connectors:
                    assert connector.ssl_profile == "mesh" and connector.verify_hostname
                    dialled[name].add(connector.host)
    for name, hosts in dialled.items():
        for host in hosts:
            reached = [site for site, names in site_names.items() if _named_by(names, host)]
            assert reached, f"{name} dials {host}, which no site's certificate names"
            if host.endswith(".svc.cluster.local"):
                assert name in reached


def test_inter_router_port_only_for_routers() -> None:
    for target in TARGETS:
        for policy in by_kind(rendered(target), "NetworkPolicy"):
            for rule in policy["spec"]["ingress"]:
                if any(p["port"] == 55671 for p in rule["ports"]):
                    assert rule["from"], f"{target}: {policy['metadata']['name']} opens 55671 to everyone"
                    for peer in rule["from"]:
                        if "podSelector" in peer:
                            assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "interior"
                        else:
                            assert set(peer) == {"ipBlock"} and not peer["ipBlock"]["cidr"].startswith("0.0.0.0/")


def test_overlays_link_sites_with_a_wan_cost() -> None:
    """Each overlay links to its peers with a WAN cost above the in-site links' 1."""
    for name in OVERLAYS:
        docs = rendered(f"overlays/{name}")
        (statefulset,) = by_kind(docs, "StatefulSet")
        for config in router_configs(docs, statefulset):
            wan = [c for c in config.connectors if not c.host.endswith(".svc.cluster.local")]
            assert all(c.cost > 1 for c in wan)
        assert all(d["metadata"].get("labels", {}).get("amqp-mesh/site") == name for d in docs)


def test_router_ids_are_unique_across_sites() -> None:
    """Every site's StatefulSet has pods router-0, router-1, ...: the overlays put the site in
    the router id, or the second site's router-0 would be refused by the mesh as a duplicate."""
    ids: dict[str, str] = {}
    for target in [t for t in TARGETS if t.startswith("overlays/")]:
        docs = rendered(target)
        for workload in workloads(docs):
            if workload["kind"] != "StatefulSet":
                continue
            for config in router_configs(docs, workload):
                assert config.router.id not in ids, f"{config.router.id} in {target} and {ids.get(config.router.id)}"
                ids[config.router.id] = target
    assert len(ids) >= 4
