"""The deployment files and the worker's settings say the same thing.

deploy/README.md promises that `compose/.env.example` and `k8s/configmap.yaml` (with
`k8s/secret.yaml`, one Secret per principal) list every setting, and a worker refuses a
bad value at start-up: a setting added to `workers/runtime/settings.py` but not to them, a
misspelt variable in them (silently ignored by the worker), or a shipped value the worker
would refuse, each fails here instead of in someone's cluster.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from workers.runtime.settings import PREFIX, SECRET_FIELDS, Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SETTINGS = {PREFIX + f.name.upper() for f in fields(Settings)}
READ_OUTSIDE_SETTINGS = {"GROUNDSTREAM_ONNX_DIR", "GROUNDSTREAM_AUDIT_KEY"}
"""Variables the code reads directly: the encoder's exported graph, named by the image, and
the audit chain's key (`workers.runtime.audit`), in the Secret and .env.example."""


def _named(text: str) -> set[str]:
    return set(re.findall(r"\bGROUNDSTREAM_[A-Z0-9_]*[A-Z0-9]\b", text))


def _env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines())
    return {k: v for k, *rest in pairs if rest and not k.startswith("#") for v in rest}


def _k8s(name: str) -> dict:
    return yaml.safe_load((DEPLOY / "k8s" / name).read_text())


def _secrets() -> dict[str, dict[str, str]]:
    """k8s/secret.yaml: each principal's Secret, by name → its keys and values."""
    docs = yaml.safe_load_all((DEPLOY / "k8s" / "secret.yaml").read_text())
    return {d["metadata"]["name"]: d["stringData"] for d in docs if d}


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose" / "docker-compose.yml").read_text())


@pytest.mark.parametrize(
    "files",
    [("compose/.env.example",), ("k8s/configmap.yaml", "k8s/secret.yaml")],
    ids=["compose", "k8s"],
)
def test_every_setting_is_listed(files: tuple[str, ...]) -> None:
    text = "".join((DEPLOY / f).read_text() for f in files)
    assert SETTINGS - _named(text) == set()


def test_no_deploy_file_names_a_variable_nothing_reads() -> None:
    for path in [*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml"), DEPLOY / "Dockerfile"]:
        unknown = _named(path.read_text()) - SETTINGS - READ_OUTSIDE_SETTINGS
        assert unknown == set(), path
    env_example = _named((DEPLOY / "compose" / ".env.example").read_text())
    assert env_example <= SETTINGS | READ_OUTSIDE_SETTINGS


@pytest.mark.parametrize("secret", sorted(_secrets()))
def test_the_shipped_k8s_values_start_a_worker(secret: str) -> None:
    variables = {k: v for k, v in _secrets()[secret].items() if k.startswith(PREFIX)}
    env = {**_k8s("configmap.yaml")["data"], **variables}
    assert all(isinstance(v, str) for v in env.values())  # a bare number is not a string
    settings = Settings.from_env(env)
    assert settings.encoder_backend == "onnx"  # the image carries no torch


def test_the_shipped_compose_values_start_each_service() -> None:
    base = _env_file(DEPLOY / "compose" / ".env.example")
    assert Settings.from_env(base).encoder_backend == "onnx"
    for service in _compose()["services"].values():
        extra = service.get("environment") or {}
        env = {**base, **{k: str(v) for k, v in extra.items() if k.startswith(PREFIX)}}
        Settings.from_env(env)  # raises SettingsError naming the variable


def test_a_misspelt_variable_would_be_caught() -> None:
    assert _named("GROUNDSTREAM_JUDGE_URLS: x") - SETTINGS == {"GROUNDSTREAM_JUDGE_URLS"}


def test_credentials_live_in_the_secret_never_in_the_configmap() -> None:
    secrets = {PREFIX + name.upper() for name in SECRET_FIELDS}
    assert secrets & set(_k8s("configmap.yaml")["data"]) == set()
    held = {key for keys in _secrets().values() for key in keys}
    # the SASL password is each Secret's `sasl.password` file, never a variable
    file_read = {PREFIX + "KAFKA_SASL_PASSWORD"}
    assert PREFIX + "KAFKA_SASL_PASSWORD" not in held
    assert all("sasl.password" in keys for keys in _secrets().values())
    assert {PREFIX + "KAFKA_SSL_KEY_PASSWORD", PREFIX + "AUDIT_KEY"} | secrets - file_read <= held
    shipped = _env_file(DEPLOY / "compose" / ".env.example")
    assert {k: v for k, v in shipped.items() if k in secrets and v} == {}  # blank: in .env


def test_every_pod_that_talks_to_kafka_can_read_the_credentials() -> None:
    """`topics create` (the Job, each worker's init container) needs the SASL credentials
    as much as the worker: every container that loads the settings takes its user and TLS
    key password from its Secret too (key by key: each container gets only the secrets it
    uses) and mounts the password file (tests/unit/test_k8s_manifests.py checks whose)."""
    kafka = {PREFIX + "KAFKA_SASL_USERNAME", PREFIX + "KAFKA_SSL_KEY_PASSWORD"}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = ((doc or {}).get("spec") or {}).get("template", {}).get("spec", {})
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                refs = container.get("envFrom", [])
                if any("configMapRef" in r for r in refs):
                    from_secret = {
                        e["name"]
                        for e in container.get("env", [])
                        if "secretKeyRef" in e.get("valueFrom", {})
                    }
                    assert kafka <= from_secret, (path.name, container["name"])
                    mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
                    assert "/etc/groundstream/kafka" in mounts, (path.name, container["name"])
