"""Worker settings from the environment, and policy files: every bad value names its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bounds.thresholds import Thresholds
from pipeline.errors import PolicyError
from pipeline.failures import ErrorAction
from pipeline.policy.document import DEFAULT_POLICY_PATH, Policy, load_policy, parse_policy
from pipeline.policy.routing import ACTIVE_APPROVAL, Mode
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
from topics.names import Topic
from workers.runtime.settings import Settings, SettingsError


def settings_error(env: dict[str, str]) -> SettingsError:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    return info.value


class TestSettingsFromEnv:
    def test_empty_env_gives_defaults(self):
        assert Settings.from_env({}) == Settings()
        s = Settings.from_env({})
        assert s.bootstrap_servers == "127.0.0.1:9092"
        assert s.web_host == "127.0.0.1"
        assert s.judge_url == "" and s.sampler_url == ""
        assert s.partitions >= 1

    def test_unrelated_variables_are_ignored(self):
        assert Settings.from_env({"PATH": "/bin", "GROUNDSTREAM": "x"}) == Settings()

    def test_values_are_parsed(self):
        s = Settings.from_env(
            {
                "GROUNDSTREAM_BOOTSTRAP_SERVERS": "k1:9092,k2:9093",
                "GROUNDSTREAM_PARTITIONS": "6",
                "GROUNDSTREAM_BATCH_WITHIN": "0.25",
                "GROUNDSTREAM_JUDGE_URL": "http://127.0.0.1:8000/v1/",
                "GROUNDSTREAM_TOPIC_PREFIX": "t1-",
                "GROUNDSTREAM_LOG_LEVEL": "DEBUG",
            }
        )
        assert s.bootstrap_servers == "k1:9092,k2:9093"
        assert s.partitions == 6
        assert s.batch_within == 0.25
        assert s.judge_url == "http://127.0.0.1:8000/v1"
        assert s.topic(Topic.STATE) == "t1-state"

    def test_overrides_win_and_none_is_ignored(self):
        s = Settings.from_env({"GROUNDSTREAM_PARTITIONS": "6"}, partitions=2, replication=None)
        assert s.partitions == 2
        assert s.replication == Settings().replication

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("GROUNDSTREAM_PARTITIONS", "zero"),
            ("GROUNDSTREAM_PARTITIONS", "0"),
            ("GROUNDSTREAM_PARTITIONS", "-3"),
            ("GROUNDSTREAM_REPLICATION", "1.5"),
            ("GROUNDSTREAM_BATCH_SIZE", ""),
            ("GROUNDSTREAM_BATCH_WITHIN", "0"),
            ("GROUNDSTREAM_BATCH_WITHIN", "nan"),
            ("GROUNDSTREAM_MAX_CANDIDATE_BYTES", "lots"),
            ("GROUNDSTREAM_BOOTSTRAP_SERVERS", "nohost"),
            ("GROUNDSTREAM_BOOTSTRAP_SERVERS", "host:"),
            ("GROUNDSTREAM_BOOTSTRAP_SERVERS", ":9092"),
            ("GROUNDSTREAM_BOOTSTRAP_SERVERS", "a:9092,b"),
            ("GROUNDSTREAM_JUDGE_URL", "ftp://x"),
            ("GROUNDSTREAM_SAMPLER_URL", "localhost:8000/v1"),
            ("GROUNDSTREAM_WEB_PORT", "0"),
            ("GROUNDSTREAM_WEB_PORT", "70000"),
            ("GROUNDSTREAM_JUDGE_TIMEOUT", "-1"),
            ("GROUNDSTREAM_SAMPLER_TIMEOUT", "soon"),
            ("GROUNDSTREAM_CONTROL_POLL", "0"),
            ("GROUNDSTREAM_LOG_LEVEL", "verbose"),
            ("GROUNDSTREAM_ON_PROCESSING_ERROR", "retry"),
            ("GROUNDSTREAM_ON_PROCESSING_ERROR", "Stop"),
        ],
    )
    def test_bad_value_names_the_variable(self, name, value):
        err = settings_error({name: value})
        assert name in str(err)
        assert err.field == name
        assert err.value == value

    def test_on_processing_error_is_deadletter_unless_stop_is_asked(self):
        assert Settings.from_env({}).on_processing_error is ErrorAction.DEADLETTER
        stop = Settings.from_env({"GROUNDSTREAM_ON_PROCESSING_ERROR": "stop"})
        assert stop.on_processing_error is ErrorAction.STOP
        expected = settings_error({"GROUNDSTREAM_ON_PROCESSING_ERROR": "x"}).expected
        assert expected == "deadletter or stop"

    def test_the_switch_batches_more_unless_a_batch_size_is_given(self):
        unset = Settings.from_env({})
        assert (unset.batch_size_for("switch"), unset.batch_size_for("geometry")) == (1000, 64)
        given = Settings.from_env({"GROUNDSTREAM_BATCH_SIZE": "64"})
        assert (given.batch_size_for("switch"), given.batch_size_for("geometry")) == (64, 64)
        assert Settings.from_env({}, batch_size=16).batch_size_for("switch") == 16
        assert Settings(batch_size=16).batch_size_for("switch") == 16

    def test_settings_error_is_a_policy_and_value_error(self):
        err = settings_error({"GROUNDSTREAM_PARTITIONS": "zero"})
        assert isinstance(err, PolicyError)
        assert isinstance(err, ValueError)

    def test_load_policy_checks_the_default_route(self):
        with pytest.raises(SettingsError) as info:
            Settings(default_route="nope").load_policy()
        assert "GROUNDSTREAM_DEFAULT_ROUTE" in str(info.value)

    def test_settings_load_the_shipped_policy(self):
        assert isinstance(Settings().load_policy(), Policy)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        load_policy(write(tmp_path, text))
    return info.value


class TestLoadPolicy:
    def test_shipped_default_loads(self):
        policy = load_policy()
        assert policy.source == str(DEFAULT_POLICY_PATH)
        assert len(policy.sha256) == 64
        assert policy.version
        assert "default" in policy.routes
        assert isinstance(policy.thresholds, Thresholds)
        assert isinstance(policy.switch(), GroundingSwitch)

    def test_minimal_file(self, tmp_path):
        policy = load_policy(write(tmp_path, '[policy]\nversion = "t1"\n'))
        assert policy.version == "t1"
        assert policy.thresholds.sgi_strong_pass == 1.20
        assert policy.thresholds.sgi_review == 0.95
        assert policy.thresholds.dgi_pass == 0.525
        assert policy.on_reject is SwitchAction.FALLBACK

    def test_full_file(self, tmp_path):
        text = f"""
[policy]
version = "t2"
[thresholds]
sgi_strong_pass = 1.4
sgi_review = 1.0
dgi_pass = 0.6
[switch]
on_reject = "regenerate"
[routes.default]
mode = "shadow"
[routes.prod]
mode = "active"
active_approval = "{ACTIVE_APPROVAL}"
on_reject = "reject"
[rules]
max_response_chars = 500
"""
        policy = load_policy(write(tmp_path, text))
        assert policy.thresholds.sgi_strong_pass == 1.4
        assert policy.on_reject is SwitchAction.REGENERATE
        assert policy.routes["default"].mode is Mode.SHADOW
        assert policy.routes["prod"].mode is Mode.ACTIVE
        assert policy.switch(policy.routes["prod"]).on_reject is SwitchAction.REJECT
        assert policy.switch().on_reject is SwitchAction.REGENERATE
        assert policy.rules.max_response_chars == 500

    def test_unknown_route_fails_closed_to_off(self):
        policy = parse_policy({})
        assert policy.route("nope").mode is Mode.OFF

    def test_missing_file(self, tmp_path):
        with pytest.raises(PolicyError) as info:
            load_policy(tmp_path / "absent.toml")
        err = info.value
        assert "policy file" in str(err)

    def test_bad_toml(self, tmp_path):
        err = load_error(tmp_path, "[policy\nversion = ")
        assert "TOML" in str(err)
        assert err.field == "policy file"

    def test_not_utf8(self, tmp_path):
        path = tmp_path / "policy.toml"
        path.write_bytes(b'[policy]\nversion = "\xff"\n')
        with pytest.raises(PolicyError):
            load_policy(path)

    def test_unknown_section(self, tmp_path):
        err = load_error(tmp_path, "[bogus]\nx = 1\n")
        assert "bogus" in str(err)
        assert "thresholds" in str(err)  # lists the known sections

    def test_inverted_thresholds(self, tmp_path):
        err = load_error(tmp_path, "[thresholds]\nsgi_strong_pass = 0.9\nsgi_review = 1.1\n")
        assert err.field == "thresholds.sgi_review"
        assert "thresholds.sgi_review" in str(err)

    def test_threshold_not_a_number(self, tmp_path):
        err = load_error(tmp_path, '[thresholds]\ndgi_pass = "high"\n')
        assert err.field == "thresholds.dgi_pass"

    def test_unknown_rules_key(self, tmp_path):
        err = load_error(tmp_path, "[rules]\nmax_chars = 5\n")
        assert err.field == "rules.max_chars"
        assert "rules.max_chars" in str(err)

    def test_bad_switch_on_reject(self, tmp_path):
        err = load_error(tmp_path, '[switch]\non_reject = "accept"\n')
        assert err.field == "switch.on_reject"

    def test_active_route_without_approval(self, tmp_path):
        err = load_error(tmp_path, '[routes.prod]\nmode = "active"\n')
        assert err.field == "routes.prod.active_approval"
        assert "routes.prod.active_approval" in str(err)

    def test_active_route_with_wrong_approval(self, tmp_path):
        err = load_error(tmp_path, '[routes.prod]\nmode = "active"\nactive_approval = "ok"\n')
        assert err.field == "routes.prod.active_approval"

    def test_bad_version(self, tmp_path):
        err = load_error(tmp_path, "[policy]\nversion = 3\n")
        assert err.field == "policy.version"

    def test_section_not_a_table(self, tmp_path):
        err = load_error(tmp_path, "thresholds = 3\n")
        assert err.field == "thresholds"

    def test_bad_reference(self, tmp_path):
        err = load_error(tmp_path, '[reference]\ndgi_mu = [1.0, "x"]\n')
        assert err.field == "reference.dgi_mu"

    def test_sha256_tracks_content(self, tmp_path):
        a = load_policy(write(tmp_path, '[policy]\nversion = "a"\n'))
        b = load_policy(write(tmp_path, '[policy]\nversion = "b"\n'))
        assert a.sha256 != b.sha256


def test_load_policy_without_a_path_honours_the_environment(tmp_path, monkeypatch) -> None:
    custom = tmp_path / "custom.toml"
    custom.write_text('[policy]\nversion = "from-env"\n[thresholds]\nsgi_strong_pass = 1.5\n')
    monkeypatch.setenv("GROUNDSTREAM_POLICY", str(custom))
    policy = load_policy()
    assert policy.version == "from-env"
    assert policy.thresholds.sgi_strong_pass == 1.5
    monkeypatch.delenv("GROUNDSTREAM_POLICY")
    assert load_policy().version != "from-env"


def test_instance_id_is_checked_against_kafkas_legal_characters():
    assert Settings.from_env({"GROUNDSTREAM_INSTANCE_ID": "geo-1.a_b"}).instance_id == "geo-1.a_b"
    err = settings_error({"GROUNDSTREAM_INSTANCE_ID": "two words"})
    assert err.field == "GROUNDSTREAM_INSTANCE_ID"
