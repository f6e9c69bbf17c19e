"""The cluster's security settings, checked at start-up like every setting: a bad value or
a combination that cannot work is one SettingsError naming the variable, and no secret is
ever in it. An unknown GROUNDSTREAM_* variable is named once, with the nearest setting."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest

from workers.runtime import settings as settings_module
from workers.runtime.settings import Settings, SettingsError, unknown_variables, warn_unknown

TLS = Path(__file__).resolve().parents[1] / "fixtures" / "tls"
CERT, KEY = str(TLS / "client.crt"), str(TLS / "client.key")
SECRET = "s3cret-never-printed"


def env(**pairs: str) -> dict[str, str]:
    return {f"GROUNDSTREAM_KAFKA_{k.upper()}": v for k, v in pairs.items()}


def refused(variable: str, **pairs: str) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env(**pairs))
    assert caught.value.field == f"GROUNDSTREAM_KAFKA_{variable}", str(caught.value)
    assert SECRET not in str(caught.value)
    return caught.value


def test_the_default_is_plaintext() -> None:
    conn = Settings.from_env({}).kafka()
    assert conn.security_protocol == "PLAINTEXT"
    assert conn.client_kwargs() == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "PLAINTEXT",
    }


def test_sasl_ssl_with_scram() -> None:
    s = Settings.from_env(
        {
            "GROUNDSTREAM_BOOTSTRAP_SERVERS": "k1:9093,k2:9093",
            **env(
                security_protocol="SASL_SSL",
                sasl_mechanism="SCRAM-SHA-512",
                sasl_username="gs-geometry",
                sasl_password=SECRET,
                ssl_ca_file=CERT,
            ),
        }
    )
    kwargs = s.kafka().client_kwargs()
    assert kwargs["bootstrap_servers"] == "k1:9093,k2:9093"
    assert kwargs["sasl_plain_password"] == SECRET
    assert kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert SECRET not in repr(s) and SECRET not in repr(s.kafka())


def test_the_password_file_is_read_at_start_up(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(SECRET + "\n")
    s = Settings.from_env(
        env(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="u",
            sasl_password_file=str(secret),
        )
    )
    assert s.kafka().sasl_password == SECRET


def test_password_and_password_file_together_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("x")
    base = {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u"}
    refused("SASL_PASSWORD_FILE", **base, sasl_password=SECRET, sasl_password_file=str(secret))


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SECURITY_PROTOCOL", "TLS"),
        ("SASL_MECHANISM", "GSSAPI"),
        ("SSL_CA_FILE", "/no/such/ca.pem"),
        ("SSL_CHECK_HOSTNAME", "maybe"),
        ("SASL_PASSWORD_FILE", "/no/such/password"),
        ("OAUTH_TOKEN_FILE", "/no/such/token"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    refused(variable, **{variable.lower(): value})


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("1", True), ("yes", True), ("no", False), ("0", False)]
)
def test_check_hostname_reads_the_usual_flags(value: str, expected: bool) -> None:
    s = Settings.from_env(env(security_protocol="SSL", ssl_check_hostname=value, ssl_ca_file=CERT))
    assert s.kafka().ssl_context.check_hostname is expected


def test_sasl_needs_a_mechanism() -> None:
    refused("SASL_MECHANISM", security_protocol="SASL_SSL")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_plain_and_scram_need_a_user_and_a_password(mechanism: str) -> None:
    base = {"security_protocol": "SASL_SSL", "sasl_mechanism": mechanism}
    refused("SASL_USERNAME", **base, sasl_password=SECRET)
    refused("SASL_PASSWORD", **base, sasl_username="u")


def test_oauthbearer_needs_the_token_file(tmp_path: Path) -> None:
    refused("OAUTH_TOKEN_FILE", security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER")
    token = tmp_path / "token"
    token.write_text("tok")
    s = Settings.from_env(
        env(
            security_protocol="SASL_SSL",
            sasl_mechanism="OAUTHBEARER",
            oauth_token_file=str(token),
        )
    )
    assert s.kafka().client_kwargs()["sasl_oauth_token_provider"].read() == "tok"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SSL_CA_FILE", CERT),
        ("SSL_CERT_FILE", CERT),
        ("SSL_KEY_PASSWORD", SECRET),
        ("SSL_CHECK_HOSTNAME", "false"),
    ],
)
@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_tls_settings_without_tls_are_refused(variable: str, value: str, protocol: str) -> None:
    sasl = {"sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": SECRET}
    extra = sasl if protocol.startswith("SASL") else {}
    if variable == "SSL_CERT_FILE":
        extra = {**extra, "ssl_key_file": KEY}
    refused(variable, security_protocol=protocol, **extra, **{variable.lower(): value})


def test_sasl_settings_without_sasl_are_refused() -> None:
    refused("SASL_MECHANISM", security_protocol="SSL", sasl_mechanism="PLAIN")
    refused("SASL_USERNAME", sasl_username="u")
    error = refused("SASL_PASSWORD", sasl_password=SECRET)
    assert "(hidden)" in str(error)


def test_mutual_tls_needs_both_files() -> None:
    refused("SSL_KEY_FILE", security_protocol="SSL", ssl_cert_file=CERT)
    refused("SSL_CERT_FILE", security_protocol="SSL", ssl_key_file=KEY)
    s = Settings.from_env(env(security_protocol="SSL", ssl_cert_file=CERT, ssl_key_file=KEY))
    assert s.kafka().ssl_context is not None


def test_an_encrypted_key_without_its_password_is_refused_before_openssl_asks() -> None:
    encrypted = str(TLS / "client-encrypted.key")
    error = refused(
        "SSL_KEY_PASSWORD", security_protocol="SSL", ssl_cert_file=CERT, ssl_key_file=encrypted
    )
    assert "encrypted" in str(error) and encrypted in str(error)
    s = Settings.from_env(
        env(
            security_protocol="SSL",
            ssl_cert_file=CERT,
            ssl_key_file=encrypted,
            ssl_key_password="test-key-password",
        )
    )
    assert s.kafka().ssl_context is not None


@pytest.mark.parametrize(
    ("mechanism", "secret"),
    [("PLAIN", {"sasl_username": "u", "sasl_password": SECRET}), ("OAUTHBEARER", None)],
)
def test_a_cleartext_secret_over_sasl_plaintext_needs_a_trusted_network(
    mechanism: str, secret: dict[str, str] | None, tmp_path: Path
) -> None:
    if secret is None:
        token = tmp_path / "token"
        token.write_text(SECRET)
        secret = {"oauth_token_file": str(token)}
    given = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, **secret}
    error = refused("ALLOW_CLEARTEXT_SASL", **given)
    assert "in clear" in str(error) and "SASL_SSL" in str(error)
    trusted = Settings.from_env(env(**given, allow_cleartext_sasl="true"))
    assert trusted.kafka().security_protocol == "SASL_PLAINTEXT"
    # over TLS the same mechanism needs no such word
    assert Settings.from_env(env(**{**given, "security_protocol": "SASL_SSL"})).kafka().uses_ssl


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_over_sasl_plaintext_is_fine(mechanism: str) -> None:
    s = Settings.from_env(
        env(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_username="u",
            sasl_password=SECRET,
        )
    )
    assert s.kafka().sasl_mechanism == mechanism


def test_a_key_password_names_no_value() -> None:
    error = refused("SSL_KEY_PASSWORD", security_protocol="SSL", ssl_key_password=SECRET)
    assert SECRET not in repr(error.args) and SECRET not in repr(error.value)


def test_an_unknown_variable_names_the_nearest_setting() -> None:
    lines = unknown_variables(
        {
            "GROUNDSTREAM_KAFKA_SASL_USERNAM": "u",
            "GROUNDSTREAM_BOOTSTRAP_SERVERS": "k:1",
            "GROUNDSTREAM_ONNX_DIR": "/opt/onnx",
            "GROUNDSTREAM_KAFKA_DIR": "/opt/kafka",
            "GROUNDSTREAM_AUDIT_KEY": "k",
            "GROUNDSTREAM_ZZZZZZZZZZZZZZZZZZZZZZZ": "?",
            "OTHER": "x",
        }
    )
    assert lines == [
        "GROUNDSTREAM_KAFKA_SASL_USERNAM is not a groundstream setting"
        " (did you mean GROUNDSTREAM_KAFKA_SASL_USERNAME?)",
        "GROUNDSTREAM_ZZZZZZZZZZZZZZZZZZZZZZZ is not a groundstream setting",
    ]


def test_the_warning_is_one_line_once_per_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(settings_module, "_warned", False)
    typo = {"GROUNDSTREAM_BATCH_SIZ": "3", "GROUNDSTREAM_PARTITION": "2"}
    with caplog.at_level(logging.WARNING, logger="groundstream.settings"):
        Settings.from_env(typo)
        Settings.from_env(typo)
        warn_unknown(typo)
    warnings = [r.getMessage() for r in caplog.records if r.name == "groundstream.settings"]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "GROUNDSTREAM_BATCH_SIZ is not a groundstream setting" in warnings[0]
    assert "did you mean GROUNDSTREAM_PARTITIONS?" in warnings[0]


def test_msk_iam_is_oauthbearer_with_a_region(tmp_path: Path, monkeypatch) -> None:
    from topics.clients import MskIamTokenProvider

    oauth = {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}
    s = Settings.from_env(env(**oauth, aws_region="eu-west-1"))
    assert isinstance(s.kafka().token_provider, MskIamTokenProvider)
    assert s.kafka().token_provider.region == "eu-west-1"
    refused("AWS_REGION", **oauth, aws_region="Ireland")
    refused(
        "AWS_REGION", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
        sasl_username="u", sasl_password=SECRET, aws_region="eu-west-1",
    )  # fmt: skip
    token = tmp_path / "token"
    token.write_text("tok")
    refused("OAUTH_TOKEN_FILE", **oauth, aws_region="eu-west-1", oauth_token_file=str(token))
    monkeypatch.setattr(settings_module, "MSK_SIGNER", "not_installed_signer")
    error = refused("AWS_REGION", **oauth, aws_region="eu-west-1")
    assert "pip install 'groundstream[msk]'" in str(error)
