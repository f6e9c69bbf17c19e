"""deploy/k8s, read as Kubernetes would read it, and held to what the workers need.

Checked here, with PyYAML only: every file parses; every document is a kind this
directory is meant to hold, under its apiVersion, with a name; kustomization.yaml lists
every manifest; every stage of the ladder and the audit recorder runs as a StatefulSet
(never a Deployment) whose `serviceName` is a headless Service that selects its pods and
no others; every stage's GROUNDSTREAM_INSTANCE_ID is its pod's name (downward API),
the identity `StageLoop.member_id` makes its transactional id and static group member id
of; every principal (each stage, the recorder, the dashboard, the topics Job) has a
Secret of its own and each pod references only its own: its SASL user, its password as a
file (never an environment value); each stage's signing key is a file of its own
`groundstream-signing-<stage>` Secret and the public keys of every signer come from the
`groundstream-trusted-keys` ConfigMap where signatures are checked, both exactly as
`groundstream keys generate --k8s` makes them (and never shipped here, so an apply of this
directory cannot replace them); every variable taken from a Secret names a key that Secret
holds, and each container takes only the secrets it uses; every GROUNDSTREAM_* variable a
manifest names is a setting of workers/runtime/settings.py (or the audit key, read beside
it).

Not checked: the full OpenAPI schema of each kind (unknown or misspelt fields deeper than
the ones named here, value types, quantities' syntax beyond memory). kubeconform would
fetch the schemas at run time, which the machines here cannot; the `kubernetes` client's
models check required fields only as each object is built by hand, and no unknown ones, a
large dependency for less than the checks below. `kubectl apply --dry-run=server -k
deploy/k8s` against a cluster remains the full check.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.bounds.conclusions import SIGNERS, TERMINAL_WRITER
from pipeline.policy.document import load_policy
from topics.names import Topic
from topics.security.keys import generate, k8s_manifests, signing_secret
from workers.interfaces import StageContext
from workers.runtime.audit import KEY_ENV
from workers.runtime.ladder import STAGE_NAMES
from workers.runtime.loop import StageLoop, member_prefix
from workers.runtime.runner import RECORDER
from workers.runtime.settings import PREFIX, Settings
from workers.runtime.store import ChangelogStore
from workers.runtime.telemetry import StageTelemetry
from workers.stages.terminal import TerminalStage

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
SETTINGS = {PREFIX + f.name.upper() for f in fields(Settings)}
SIGNING_KEY_FILE, TRUSTED_KEYS_DIR = PREFIX + "SIGNING_KEY_FILE", PREFIX + "TRUSTED_KEYS_DIR"
KNOWN_VARIABLES = SETTINGS | {KEY_ENV}
KINDS = {
    ("v1", "Namespace"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"),
}
WORKERS = (*STAGE_NAMES, RECORDER)
"""Every long-running process the manifests deploy: the six stages and the recorder."""
KAFKA_SECRETS = {PREFIX + "KAFKA_SASL_USERNAME", PREFIX + "KAFKA_SSL_KEY_PASSWORD"}
"""From the environment: the user (not a secret, kept beside its password) and a TLS key's
password (no setting reads it from a file). The SASL password is a mounted file."""
PRINCIPALS = (*WORKERS, "dashboard", "topics")
"""Every principal with a Secret of its own: the dashboard's is for `groundstream dashboard`
and `review`, run where the user chooses (no manifest here deploys them)."""
SIGNING = STAGE_NAMES
"""The deployed processes that sign what they write (`workers.runtime.signing.stage_keys`):
every stage of the ladder. The recorder chains records with the audit key and signs none,
`topics create` writes none; `review` (the dashboard) and `attach` are not deployed here."""
TRUSTING = (TERMINAL_WRITER,)
"""The deployed readers that check who signed what: the terminal writer (review, the
dashboard and `audit verify` check too, where you run them)."""
GENERATED = [d for d in yaml.safe_load_all(k8s_manifests(generate(SIGNERS))) if d is not None]
"""What `groundstream keys generate --k8s` emits for every signer."""
PASSWORD_FILE = "/etc/groundstream/kafka/sasl.password"
SECRETS_OF: dict[str, set[str]] = {
    "topics": KAFKA_SECRETS,  # the Job and every init container (each its pod's principal)
    "geometry": KAFKA_SECRETS | {PREFIX + "STAGE_KEY"},
    "switch": KAFKA_SECRETS | {PREFIX + "STAGE_KEY", PREFIX + "JUDGE_API_KEY"},
    "consistency": KAFKA_SECRETS | {PREFIX + "STAGE_KEY", PREFIX + "SAMPLER_API_KEY"},
    "judge": KAFKA_SECRETS | {PREFIX + "STAGE_KEY", PREFIX + "JUDGE_API_KEY"},
    "rules": KAFKA_SECRETS | {PREFIX + "STAGE_KEY"},
    "terminal": KAFKA_SECRETS | {PREFIX + "STAGE_KEY"},
    "recorder": KAFKA_SECRETS | {KEY_ENV},
}
"""The secrets each container uses, and so the only ones it may see: the endpoint keys go
where the endpoint is called (the switch builds the judge's client too), the audit key to
the recorder alone, the web token to no pod (the dashboard is not deployed here)."""
MEMORY = re.compile(r"(\d+)(Mi|Gi)")


def _documents() -> dict[str, list[dict[str, Any]]]:
    return {
        p.name: [d for d in yaml.safe_load_all(p.read_text()) if d is not None]
        for p in sorted(K8S.glob("*.yaml"))
        if p.name != "kustomization.yaml"
    }


DOCS = _documents()
ALL = [d for docs in DOCS.values() for d in docs]


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in ALL if d["kind"] == kind]


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (d["metadata"]["name"], d["spec"]["template"]["spec"])
        for d in ALL
        if "template" in d.get("spec", {})
    ]


def _containers() -> list[tuple[str, dict[str, Any]]]:
    return [
        (owner, c)
        for owner, spec in _pod_specs()
        for c in [*spec.get("initContainers", []), *spec["containers"]]
    ]


def _worker(stage: str) -> dict[str, Any]:
    """The StatefulSet whose main container runs `stage`."""
    args = ["audit", "record"] if stage == RECORDER else ["worker", stage]
    found = [
        s
        for s in _of_kind("StatefulSet")
        if s["spec"]["template"]["spec"]["containers"][0]["args"] == args
    ]
    assert len(found) == 1, (stage, [s["metadata"]["name"] for s in found])
    return found[0]


def _mebibytes(quantity: str) -> int:
    number, unit = MEMORY.fullmatch(quantity).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "Gi" else 1)


def test_every_document_is_a_known_kind_with_a_name() -> None:
    assert ALL
    for doc in ALL:
        assert (doc.get("apiVersion"), doc.get("kind")) in KINDS, doc.get("kind")
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
    assert not _of_kind("Deployment")


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert set(listed) == set(DOCS)


@pytest.mark.parametrize("stage", WORKERS)
def test_every_worker_is_a_statefulset_governed_by_a_headless_service(stage: str) -> None:
    sts = _worker(stage)
    spec = sts["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert spec["podManagementPolicy"] in ("Parallel", "OrderedReady")
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    services = [s for s in _of_kind("Service") if s["metadata"]["name"] == spec["serviceName"]]
    assert len(services) == 1, spec["serviceName"]
    service = services[0]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= labels.items()
    # The Service must not select another stage's pods, nor theirs this one.
    others = [s for s in _of_kind("StatefulSet") if s is not sts]
    for other in others:
        assert (
            not service["spec"]["selector"].items()
            <= other["spec"]["template"]["metadata"]["labels"].items()
        )


@pytest.mark.parametrize("stage", WORKERS)
def test_the_instance_id_is_the_pod_name(stage: str) -> None:
    """The one identity a restart keeps: `StageLoop.member_id` makes it the worker's
    transactional id and static group member id, so a pod's replacement fences its
    predecessor. Every pod name the StatefulSet can make must be a legal instance id."""
    sts = _worker(stage)
    main = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in main["env"]}
    source = env[PREFIX + "INSTANCE_ID"]["valueFrom"]
    assert source == {"fieldRef": {"fieldPath": "metadata.name"}}
    partitions = int(
        yaml.safe_load((K8S / "configmap.yaml").read_text())["data"][PREFIX + "PARTITIONS"]
    )
    pod = f"{sts['metadata']['name']}-{partitions - 1}"  # the highest ordinal worth running
    settings = Settings.from_env({PREFIX + "INSTANCE_ID": pod})
    assert settings.instance_id == pod


async def test_the_pod_name_is_both_the_transactional_id_and_the_static_member_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the StatefulSet's identity is for: the worker's consumer joins as the static
    member `<group>.<pod>` and its producer uses the same string as transactional id."""
    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def consumer(_kafka: object, **kwargs: Any) -> object:
        seen["consumer"] = kwargs
        return object()

    def producer(_kafka: object, **kwargs: Any) -> object:
        seen["producer"] = kwargs
        raise Stop

    monkeypatch.setattr("workers.runtime.loop.clients.consumer", consumer)
    monkeypatch.setattr("workers.runtime.loop.clients.producer", producer)
    monkeypatch.setattr("socket.gethostname", lambda: "some-node")  # not what is used
    pod = f"{_worker('terminal')['metadata']['name']}-0"
    settings = Settings.from_env({PREFIX + "INSTANCE_ID": pod})
    worker = StageLoop(
        TerminalStage(ChangelogStore(settings.topic(Topic.OUTCOMES))),
        settings,
        StageContext(policy=load_policy(None)),
        StageTelemetry("terminal", settings.topic(Topic.CONCLUDED)),
    )
    with pytest.raises(Stop):
        await worker._session()
    member = f"{member_prefix('', 'terminal')}{pod}"
    assert member == "groundstream-terminal.groundstream-terminal-0"
    assert seen["consumer"]["group_instance_id"] == member
    assert seen["producer"]["transactional_id"] == member


def test_no_pod_gets_an_instance_id_from_the_configmap() -> None:
    """One value for every replica would give them one identity: they would fence each
    other for ever."""
    assert PREFIX + "INSTANCE_ID" not in _settings_configmap()


def _secrets() -> dict[str, dict[str, str]]:
    """Secret name → its keys and (placeholder) values."""
    return {d["metadata"]["name"]: d["stringData"] for d in _of_kind("Secret")}


def _settings_configmap() -> dict[str, str]:
    (configmap,) = [
        c for c in _of_kind("ConfigMap") if c["metadata"]["name"] == "groundstream-settings"
    ]
    return configmap["data"]


def _pod_of(principal: str) -> dict[str, Any]:
    """The pod template of `principal`: its StatefulSet, or the topics Job."""
    if principal == "topics":
        (job,) = _of_kind("Job")
        return job["spec"]["template"]["spec"]
    return _worker(principal)["spec"]["template"]["spec"]


def _secret_names(pod: dict[str, Any]) -> set[str]:
    """Every Secret a pod references: by env, envFrom or volume."""
    names = {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref is not None:
                names.add(ref["name"])
        names |= {r["secretRef"]["name"] for r in container.get("envFrom", []) if "secretRef" in r}
    return names


def _mounted(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Mount path → the volume mounted there, for one container of `pod`."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    return {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}


def test_every_principal_has_a_secret_of_its_own() -> None:
    assert set(_secrets()) == {f"groundstream-{p}" for p in PRINCIPALS}


@pytest.mark.parametrize("principal", [*WORKERS, "topics"])
def test_each_pod_references_only_its_own_secret(principal: str) -> None:
    """A pod's credentials act as its own stage only: one principal, one key, per stage."""
    signing = {signing_secret(principal)} if principal in SIGNING else set()
    assert _secret_names(_pod_of(principal)) == {f"groundstream-{principal}"} | signing


def test_every_secret_reference_names_a_key_of_the_secret() -> None:
    secrets = _secrets()
    for owner, container in _containers():
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref is None:
                continue
            assert ref["name"] in secrets, (owner, env["name"])
            assert ref["key"] in secrets[ref["name"]], (owner, env["name"])
            assert ref["key"] == env["name"], (owner, env["name"])  # the setting it names
        assert not any("secretRef" in r for r in container.get("envFrom", [])), owner
    for owner, spec in _pod_specs():
        for volume in spec.get("volumes", []):
            if "secret" in volume and volume["secret"]["secretName"] in secrets:
                keys = secrets[volume["secret"]["secretName"]]
                assert {i["key"] for i in volume["secret"]["items"]} <= set(keys), owner


def test_each_container_sees_only_the_secrets_it_uses() -> None:
    for owner, container in _containers():
        taken = {
            e["name"] for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})
        }
        assert taken == SECRETS_OF[container["name"]], (owner, container["name"])


@pytest.mark.parametrize("principal", [*WORKERS, "topics"])
def test_the_password_and_the_signing_key_are_files_never_environment_values(
    principal: str,
) -> None:
    """Every container that talks to Kafka (the init container and the Job too) reads its
    password from a file of its own Secret at GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE's
    path; only the main container of a signer mounts its signing key."""
    pod = _pod_of(principal)
    own = f"groundstream-{principal}"
    assert _settings_configmap()[PREFIX + "KAFKA_SASL_PASSWORD_FILE"] == ""  # set with SASL
    configmap_text = (K8S / "configmap.yaml").read_text()
    assert f'KAFKA_SASL_PASSWORD_FILE: "{PASSWORD_FILE}"' in configmap_text
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        names = {e["name"] for e in container.get("env", [])}
        assert PREFIX + "KAFKA_SASL_PASSWORD" not in names, container["name"]
        mounted = _mounted(pod, container)
        directory, file = PASSWORD_FILE.rsplit("/", 1)
        volume = mounted[directory]
        assert volume["secret"]["secretName"] == own
        assert [i["path"] for i in volume["secret"]["items"]] == [file]
        signs = container in pod["containers"] and principal in SIGNING
        env = {e["name"]: e for e in container.get("env", [])}
        keyed = [
            v
            for v in mounted.values()
            if "secret" in v and any(i["key"] == "signing.key" for i in v["secret"]["items"])
        ]
        if not signs:
            assert SIGNING_KEY_FILE not in env and keyed == [], container["name"]
            continue
        path = env[SIGNING_KEY_FILE]["value"]
        directory, file = path.rsplit("/", 1)
        volume = mounted[directory]
        assert volume["secret"]["secretName"] == signing_secret(principal)
        assert volume["secret"]["items"] == [{"key": "signing.key", "path": file}]


@pytest.mark.parametrize("principal", WORKERS)
def test_the_trusted_keys_reach_the_readers_that_check_signatures(principal: str) -> None:
    pod = _pod_of(principal)
    (main,) = pod["containers"]
    env = {e["name"]: e for e in main["env"]}
    mounted = _mounted(pod, main)
    if principal not in TRUSTING:
        assert TRUSTED_KEYS_DIR not in env
        assert not any(
            "configMap" in v and v["configMap"]["name"] == _trusted()[0] for v in mounted.values()
        )
        return
    volume = mounted[env[TRUSTED_KEYS_DIR]["value"]]
    assert volume["configMap"] == {"name": _trusted()[0]}  # every key, none optional


def _trusted() -> tuple[str, set[str]]:
    """The generated ConfigMap of public keys: its name and its files."""
    (configmap,) = [d for d in GENERATED if d["kind"] == "ConfigMap"]
    return configmap["metadata"]["name"], set(configmap["data"])


def _key_volumes(stage: str) -> list[dict[str, Any]]:
    """The volumes `stage`'s main container reads its signing and trusted keys from."""
    pod = _pod_of(stage)
    (main,) = pod["containers"]
    env = {e["name"]: e["value"] for e in main["env"] if "value" in e}
    mounted = _mounted(pod, main)
    paths = [env[SIGNING_KEY_FILE].rsplit("/", 1)[0]] if SIGNING_KEY_FILE in env else []
    paths += [env[TRUSTED_KEYS_DIR]] if TRUSTED_KEYS_DIR in env else []
    return [mounted[path] for path in paths]


def test_generated_keys_are_a_secret_per_signer_and_a_configmap_of_public_keys() -> None:
    secrets = {d["metadata"]["name"]: set(d["data"]) for d in GENERATED if d["kind"] == "Secret"}
    assert secrets == {signing_secret(s): {"signing.key"} for s in SIGNERS}
    assert _trusted()[1] == {f"{s}.pub" for s in SIGNERS}
    assert set(SIGNING) <= set(SIGNERS)  # every deployed signer gets a key generated


@pytest.mark.parametrize("stage", WORKERS)
def test_every_key_a_statefulset_mounts_is_one_the_generator_emits(stage: str) -> None:
    """`kubectl apply -f keys.yaml` is all a pod's keys need: each Secret and ConfigMap,
    and each key of them, that a StatefulSet mounts for signing or trusting is exactly one
    `keys generate --k8s` makes; and a stage mounts only its own signing Secret."""
    generated = {
        (d["kind"], d["metadata"]["name"]): set(d["data"])
        for d in GENERATED
        if d["kind"] in ("Secret", "ConfigMap")
    }
    volumes = _key_volumes(stage)
    assert len(volumes) == (stage in SIGNING) + (stage in TRUSTING)
    for volume in volumes:
        if "secret" in volume:
            kind, name, items = "Secret", volume["secret"]["secretName"], volume["secret"]["items"]
            assert name == signing_secret(stage)
        else:
            kind, name, items = "ConfigMap", volume["configMap"]["name"], []
        assert (kind, name) in generated, name
        assert {i["key"] for i in items} <= generated[kind, name], name
    signing = {
        v["secret"]["secretName"]
        for v in _pod_of(stage).get("volumes", [])
        if "secret" in v and v["secret"]["secretName"].startswith(signing_secret(""))
    }
    assert signing == ({signing_secret(stage)} if stage in SIGNING else set())


def test_no_manifest_here_ships_what_the_generator_makes() -> None:
    """A placeholder of a generated Secret or ConfigMap would replace the real keys with
    empty ones on every `kubectl apply -k`; and the SASL Secrets hold no signing key."""
    generated = {(d["kind"], d["metadata"]["name"]) for d in GENERATED}
    assert generated & {(d["kind"], d["metadata"]["name"]) for d in ALL} == set()
    assert not any("signing.key" in keys for keys in _secrets().values())


def test_every_variable_a_manifest_names_is_a_known_setting() -> None:
    named = set(_settings_configmap())
    for keys in _secrets().values():
        named |= {k for k in keys if k.startswith(PREFIX)}
    for _, container in _containers():
        named |= {e["name"] for e in container.get("env", []) if e["name"].startswith(PREFIX)}
    assert named - KNOWN_VARIABLES == set()


def test_pods_are_isolated_and_bounded() -> None:
    """Headless Services now exist: with service links on, `groundstream-geometry` would
    inject GROUNDSTREAM_GEOMETRY_* variables into every pod. Every container has requests
    and limits, the request within the limit."""
    for owner, spec in _pod_specs():
        assert spec["enableServiceLinks"] is False, owner
        assert spec["automountServiceAccountToken"] is False, owner
    for owner, container in _containers():
        resources = container["resources"]
        request, limit = resources["requests"]["memory"], resources["limits"]["memory"]
        assert _mebibytes(request) <= _mebibytes(limit), (owner, container["name"])
        assert "cpu" in resources["requests"] and "cpu" in resources["limits"]


@pytest.mark.parametrize("stage", ["geometry", "consistency"])
def test_the_encoder_stages_are_sized_for_onnx_runtime_not_torch(stage: str) -> None:
    """The image carries no torch (deploy/Dockerfile): the encoder runs on ONNX Runtime,
    measured at 522 MiB peak with claim support (docs/benchmarks.md). docs/how-to/kubernetes.md
    says the same."""
    main = _worker(stage)["spec"]["template"]["spec"]["containers"][0]
    assert main["resources"]["requests"]["memory"] == "768Mi"
    assert main["resources"]["limits"]["memory"] == "1536Mi"
    page = K8S.parents[1] / "docs" / "how-to" / "kubernetes.md"
    readme = " ".join(page.read_text().split())
    assert "request 768 MiB, limit 1.5 GiB" in readme
    assert "load torch" not in readme


# ------------------------------------------------- scaling on lag (KEDA component) --

KEDA = K8S / "components" / "keda"
KEDA_SASL = {"": "none", "PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256"}
KEDA_SASL |= {"SCRAM-SHA-512": "scram_sha512", "OAUTHBEARER": "oauthbearer"}
"""GROUNDSTREAM_KAFKA_SASL_MECHANISM as KEDA's Kafka scaler names it (`sasl`)."""


def _keda() -> list[dict[str, Any]]:
    return [
        d
        for p in sorted(KEDA.glob("*.yaml"))
        if p.name != "kustomization.yaml"
        for d in yaml.safe_load_all(p.read_text())
        if d is not None
    ]


def _scaled(stage: str) -> dict[str, Any]:
    """The ScaledObject whose target is `stage`'s StatefulSet."""
    target = _worker(stage)["metadata"]["name"]
    found = [
        d
        for d in _keda()
        if d["kind"] == "ScaledObject" and d["spec"]["scaleTargetRef"]["name"] == target
    ]
    assert len(found) == 1, (stage, len(found))
    return found[0]


def _configmap() -> dict[str, str]:
    return yaml.safe_load((K8S / "configmap.yaml").read_text())["data"]


def test_the_keda_component_is_a_component_listing_its_files() -> None:
    component = yaml.safe_load((KEDA / "kustomization.yaml").read_text())
    assert component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    assert component["kind"] == "Component"
    listed = {p.name for p in KEDA.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(component["resources"]) == listed
    kinds = {(d["apiVersion"], d["kind"]) for d in _keda()}
    assert kinds == {
        ("keda.sh/v1alpha1", "ScaledObject"),
        ("keda.sh/v1alpha1", "TriggerAuthentication"),
    }


def test_scaling_on_lag_is_off_in_the_default_kustomization() -> None:
    """KEDA's CRDs are not in every cluster: `kubectl apply -k deploy/k8s` must not need them."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert not kustomization.get("components")
    assert not any("keda" in r for r in kustomization["resources"])
    assert "#   - components/keda" in (K8S / "kustomization.yaml").read_text()  # how to turn on


@pytest.mark.parametrize("stage", STAGE_NAMES)
def test_every_stage_scales_on_the_group_and_topic_its_worker_reads(stage: str) -> None:
    """The group and topic are what the worker really uses: its loop's group id and its
    stage's source topic, under configmap.yaml's topic prefix, not a copied list."""
    from workers.runtime.ladder import row
    from workers.runtime.loop import group_id

    settings = Settings.from_env({PREFIX + "TOPIC_PREFIX": _configmap()[PREFIX + "TOPIC_PREFIX"]})
    source = row(stage).build(settings).source
    scaled = _scaled(stage)
    target = scaled["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"]) == ("apps/v1", "StatefulSet")
    main = _worker(stage)["spec"]["template"]["spec"]["containers"][0]
    assert target["envSourceContainerName"] == main["name"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert meta["consumerGroup"] == group_id(settings.topic_prefix, stage)
    assert meta["topic"] == settings.topic(source)
    assert meta["offsetResetPolicy"] == "earliest"  # as the workers' consumers
    # Kafka 4 answers no protocol version older than Kafka 2.1's.
    assert tuple(int(x) for x in meta["version"].split(".")) >= (2, 1, 0)
    assert int(meta["lagThreshold"]) >= 1


@pytest.mark.parametrize("stage", STAGE_NAMES)
def test_no_stage_scales_past_its_source_topics_partitions(stage: str) -> None:
    """A replica past the partition count gets no partition: it would only cost memory."""
    spec = _scaled(stage)["spec"]
    partitions = int(_configmap()[PREFIX + "PARTITIONS"])
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] <= partitions


def test_keda_connects_with_the_stage_s_own_settings_and_secrets() -> None:
    """Each stage's trigger authenticates as that stage: its own TriggerAuthentication reads
    the user and the password from the stage's own Secret (the keys secret.yaml holds), the
    bootstrap servers come from the scaled container's environment; `sasl` and `tls` match
    configmap.yaml's security protocol and mechanism."""
    auths = {d["metadata"]["name"]: d for d in _keda() if d["kind"] == "TriggerAuthentication"}
    secrets = {d["metadata"]["name"]: d for d in _of_kind("Secret")}
    config = _configmap()
    assert len(auths) == len(STAGE_NAMES)
    for stage in STAGE_NAMES:
        main = _worker(stage)["spec"]["template"]["spec"]["containers"][0]
        assert {"configMapRef": {"name": "groundstream-settings"}} in main["envFrom"]
        (trigger,) = _scaled(stage)["spec"]["triggers"]
        auth = auths[trigger["authenticationRef"]["name"]]
        refs = auth["spec"]["secretTargetRef"]
        assert {r["parameter"] for r in refs} == {"username", "password"}
        for ref in refs:
            assert ref["name"] == f"groundstream-{stage}"
            assert ref["key"] in secrets[ref["name"]]["stringData"]
        assert trigger["metadata"]["bootstrapServersFromEnv"] == PREFIX + "BOOTSTRAP_SERVERS"
        protocol = config[PREFIX + "KAFKA_SECURITY_PROTOCOL"]
        assert trigger["metadata"]["sasl"] == KEDA_SASL[config[PREFIX + "KAFKA_SASL_MECHANISM"]]
        assert trigger["metadata"]["tls"] == ("enable" if "SSL" in protocol else "disable")


def test_the_component_hands_the_stages_replica_count_to_the_autoscaler() -> None:
    """Under an autoscaler, a `replicas:` in the manifest resets the count on each apply:
    the component removes it from the six stages, and only from them."""
    component = yaml.safe_load((KEDA / "kustomization.yaml").read_text())
    (patch,) = component["patches"]
    assert patch["target"]["kind"] == "StatefulSet"
    selector = re.fullmatch(
        r"app\.kubernetes\.io/component in \(([a-z,]+)\)", patch["target"]["labelSelector"]
    )
    assert selector is not None
    assert set(selector.group(1).split(",")) == set(STAGE_NAMES)
    assert yaml.safe_load(patch["patch"]) == [{"op": "remove", "path": "/spec/replicas"}]
    for stage in STAGE_NAMES:
        sts = _worker(stage)
        assert sts["metadata"]["labels"]["app.kubernetes.io/component"] == stage
        assert "replicas" in sts["spec"]  # what the patch removes exists
