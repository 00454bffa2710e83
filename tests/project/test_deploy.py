"""examples/deploy: the manifests validate offline, agree with each other, with the image and with
cloudqueue's settings (KEDA's lengths and the termination grace come from examples.deploy.sizing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import kubernetes_validate
import pytest
import yaml

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.workers.settings import CloudQueueSettings, ScalingSettings, load_settings
from examples.billing import InvoiceWorker
from examples.deploy.sizing import messages_per_pod, sizing
from tests.support.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "examples" / "deploy"
K8S = DEPLOY / "k8s"
KUBERNETES_VERSION = "1.30.0"

# The fields of KEDA's CRDs (keda.sh/v1alpha1) and of its azure-queue scaler's metadata, written
# out from KEDA's CRD schemas (config/crd/bases) and scaler source as of November 2026.
SCALED_OBJECT_SPEC = {
    "scaleTargetRef",
    "pollingInterval",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "idleReplicaCount",
    "minReplicaCount",
    "maxReplicaCount",
    "fallback",
    "advanced",
    "triggers",
}
SCALED_OBJECT_REQUIRED = {"scaleTargetRef", "triggers"}
SCALE_TARGET_REF = {"name", "apiVersion", "kind", "envSourceContainerName"}
ADVANCED = {"horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount", "scalingModifiers"}
HPA_CONFIG = {"behavior", "name"}
TRIGGER = {"type", "metadata", "authenticationRef", "metricType", "name", "useCachedMetrics"}
AUTHENTICATION_REF = {"name", "kind"}
SECRET_TARGET_REF = {"parameter", "name", "key"}  # all three required
INT32_FIELDS = ("pollingInterval", "cooldownPeriod", "minReplicaCount", "maxReplicaCount")
AZURE_QUEUE_METADATA = {
    "queueName",
    "queueLength",
    "queueLengthStrategy",
    "activationQueueLength",
    "connectionFromEnv",
    "accountName",
    "cloud",
    "endpointSuffix",
}
TRIGGER_AUTHENTICATION_SPEC = {
    "secretTargetRef",
    "env",
    "podIdentity",
    "azureKeyVault",
    "configMapTargetRef",
    "filePath",
    "boundServiceAccountToken",
}


def documents() -> list[dict[str, Any]]:
    """Every object in every manifest file (the kustomization is not one)."""
    loaded: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        loaded += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return loaded


def one(kind: str) -> dict[str, Any]:
    [found] = [doc for doc in documents() if doc["kind"] == kind]
    return found


def container() -> dict[str, Any]:
    [worker] = one("Deployment")["spec"]["template"]["spec"]["containers"]
    return cast(dict[str, Any], worker)


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions (name, arguments), continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            name, _, arguments = pending.strip().partition(" ")
            instructions.append((name.upper(), arguments.strip()))
            pending = ""
    return instructions


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for name, arguments in dockerfile():
        if name == "ENV":
            for pair in arguments.split():
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def instruction(name: str) -> str:
    [arguments] = [arguments for found, arguments in dockerfile() if found == name]
    return arguments


def deployment_settings(monkeypatch: pytest.MonkeyPatch) -> CloudQueueSettings:
    """The settings a worker pod runs with: the image's and the pod's environment, and the
    config map's file (the connection string left out: it is a secret)."""
    for key in [key for key in os.environ if key.startswith("CLOUDQUEUE_")]:
        monkeypatch.delenv(key)
    for key, value in image_env().items():
        monkeypatch.setenv(key, value)
    for variable in container()["env"]:
        if "value" in variable and variable["name"] != "CLOUDQUEUE_CONFIG":
            monkeypatch.setenv(variable["name"], variable["value"])
    return load_settings(K8S / "cloudqueue.toml")


def test_core_objects_validate_against_the_kubernetes_schemas() -> None:
    """The Deployment and the example Secret pass kubernetes-validate's strict offline schemas."""
    core = [doc for doc in documents() if not doc["apiVersion"].startswith("keda.sh/")]
    assert {doc["kind"] for doc in core} == {"Deployment", "Secret"}
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_a_broken_deployment_fails_validation() -> None:
    """The validator is not a formality: a misspelt field is refused."""
    broken = one("Deployment")
    broken["spec"]["template"]["spec"]["terminationGracePeriod"] = 40
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_keda_objects_use_only_fields_of_keda_crds() -> None:
    """The ScaledObject targets the Deployment with one azure-queue trigger authenticated by the
    TriggerAuthentication, whose secret is the one the pods read."""
    scaled, auth, deployment = one("ScaledObject"), one("TriggerAuthentication"), one("Deployment")
    assert scaled["apiVersion"] == auth["apiVersion"] == "keda.sh/v1alpha1"
    spec = scaled["spec"]
    assert SCALED_OBJECT_REQUIRED <= set(spec) <= SCALED_OBJECT_SPEC
    assert set(auth["spec"]) <= TRIGGER_AUTHENTICATION_SPEC
    assert set(spec["scaleTargetRef"]) <= SCALE_TARGET_REF
    assert spec["scaleTargetRef"] == {"name": deployment["metadata"]["name"]}
    assert set(spec["advanced"]) <= ADVANCED
    assert set(spec["advanced"]["horizontalPodAutoscalerConfig"]) <= HPA_CONFIG
    assert all(isinstance(spec[name], int) and spec[name] >= 0 for name in INT32_FIELDS)
    [trigger] = spec["triggers"]
    assert set(trigger) <= TRIGGER
    assert set(trigger["authenticationRef"]) <= AUTHENTICATION_REF
    assert trigger["type"] == "azure-queue"
    assert set(trigger["metadata"]) <= AZURE_QUEUE_METADATA
    assert all(isinstance(value, str) for value in trigger["metadata"].values())
    assert trigger["metadata"]["queueLengthStrategy"] in ("all", "visibleonly")
    assert int(trigger["metadata"]["queueLength"]) > 0
    assert trigger["metadata"]["queueName"] == InvoiceWorker.queue_name
    assert trigger["authenticationRef"] == {"name": auth["metadata"]["name"]}
    [secret_ref] = auth["spec"]["secretTargetRef"]
    assert set(secret_ref) == SECRET_TARGET_REF
    [connection] = [v for v in container()["env"] if v["name"] == "CLOUDQUEUE_CONNECTION_STRING"]
    assert secret_ref["parameter"] == "connection"
    assert {"name": secret_ref["name"], "key": secret_ref["key"]} == connection["valueFrom"][
        "secretKeyRef"
    ]
    secret = one("Secret")
    assert secret["metadata"]["name"] == secret_ref["name"]
    assert secret_ref["key"] in secret["stringData"]
    assert 0 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]


def test_keda_lengths_and_the_grace_follow_from_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """queueLength, activationQueueLength and terminationGracePeriodSeconds are what
    ``python -m examples.deploy.sizing`` derives from the pods' settings."""
    expected = sizing(deployment_settings(monkeypatch))
    [trigger] = one("ScaledObject")["spec"]["triggers"]
    assert trigger["metadata"]["queueLength"] == str(expected.queue_length)
    assert trigger["metadata"]["activationQueueLength"] == str(expected.activation_queue_length)
    pod = one("Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == expected.termination_grace_period_s
    assert expected.termination_grace_period_s > deployment_settings(monkeypatch).shutdown_grace_s


@pytest.mark.parametrize(
    ("scaling", "per_pod"),
    [
        ({"rule": "proportional", "max_threads": 16, "messages_per_thread": 32}, 512),
        (
            {"rule": "drain_time", "max_threads": 8, "target_drain_s": 30, "assumed_rate_per_s": 5},
            1200,
        ),
        ({"rule": "steps", "max_threads": 16, "steps": [(0, 1), (100, 10), (1000, 50)]}, 999),
        ({"rule": "steps", "max_threads": 32, "steps": [(0, 1), (100, 16), (1000, 32)]}, 1000),
    ],
)
def test_one_pod_absorbs_the_backlog_its_rule_sizes_within_max_threads(
    scaling: dict[str, Any], per_pod: int
) -> None:
    """KEDA's per-pod target is the deepest backlog the pod's own rule handles with at most
    max_threads (or, for a table that tops out there, where it reaches them)."""
    assert messages_per_pod(ScalingSettings(**scaling)) == per_pod


def test_a_rule_that_never_fills_a_pod_cannot_size_keda() -> None:
    """A steps table that never reaches max_threads gives no per-pod target: an error says so."""
    with pytest.raises(ConfigurationError, match="by hand"):
        messages_per_pod(ScalingSettings(rule="steps", max_threads=16, steps=[(0, 1), (10, 4)]))


def test_the_image_runs_cloudqueue_as_pid_1_as_a_non_root_user() -> None:
    """Exec-form entry point ``cloudqueue run`` (SIGTERM reaches it), the worker as CMD, the same
    as the pod's args, a numeric non-root user, a slim Python base."""
    assert json.loads(instruction("ENTRYPOINT")) == ["cloudqueue", "run"]
    assert json.loads(instruction("CMD")) == container()["args"]
    assert json.loads(instruction("CMD")) == ["examples.billing:InvoiceWorker"]
    assert instruction("USER") not in ("root", "0")
    assert (
        int(instruction("USER"))
        == one("Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    )
    assert instruction("FROM").startswith("python:3.11-slim")


def test_the_metrics_port_is_the_same_in_the_image_the_pod_and_its_probes() -> None:
    """EXPOSE, observability.metrics_port in the image, the container port, the scrape
    annotation, and probes on /healthz and /readyz through that port."""
    port = int(image_env()["CLOUDQUEUE_OBSERVABILITY__METRICS_PORT"])
    assert int(instruction("EXPOSE")) == port
    worker = container()
    [metrics] = worker["ports"]
    assert metrics["containerPort"] == port
    template = one("Deployment")["spec"]["template"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": metrics["name"]}
    assert worker["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": metrics["name"]}


def test_the_pods_settings_are_valid_and_writable_where_the_root_is_read_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The image's and pod's settings validate; live state goes under the pod's /tmp volume;
    the probes' endpoint listens on the exposed port of every interface (not loopback only)."""
    settings = deployment_settings(monkeypatch)
    assert settings.observability.metrics_port == int(instruction("EXPOSE"))
    assert settings.observability.metrics_host == "0.0.0.0"
    mounts = {mount["mountPath"] for mount in container()["volumeMounts"]}
    assert any(str(settings.state_dir).startswith(path) for path in mounts)
    [config] = [v for v in container()["env"] if v["name"] == "CLOUDQUEUE_CONFIG"]
    assert Path(config["value"]).parent.as_posix() in mounts


def test_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    """``kubectl apply -k`` applies the Deployment and KEDA objects and generates the config map
    the pods mount from cloudqueue.toml; it never overwrites the real Secret."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    manifests = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests - {"secret.example.yaml"}
    [generated] = kustomization["configMapGenerator"]
    assert generated["files"] == ["cloudqueue.toml"]
    volumes = one("Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "config", "configMap": {"name": generated["name"]}} in volumes


def test_the_build_context_leaves_out_local_state_and_secrets() -> None:
    """BuildKit's per-Dockerfile ignore file keeps virtual environments, Azurite and .env out."""
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert {".venv", ".azurite", ".env", ".git", ".cloudqueue"} <= set(ignored)
