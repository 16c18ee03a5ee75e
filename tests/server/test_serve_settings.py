"""The server's settings (``server.settings``): one table read from ``LANCE_ICEBERG_NS_*`` variables
and a config file by the server itself, and the same table behind ``serve``'s flags, so that a
variable means the same, and is refused in the same words, whichever of the two reads it."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest

from lance_iceberg_ns.server.settings import (
    BOOLEAN_WORDS,
    SERVE_OPTIONS,
    ServeSettings,
    ServeSettingsError,
)

BRIDGE = {"LANCE_ICEBERG_ENDPOINT": "http://127.0.0.1:9", "LANCE_ICEBERG_ROOT": "/data/lance"}


@pytest.fixture
def own_environment(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A copy of the environment without LANCE_ICEBERG_* that the test may change."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LANCE_ICEBERG")}
    environment.pop("PROMETHEUS_MULTIPROC_DIR", None)
    monkeypatch.setattr(os, "environ", environment)
    return environment


def test_no_variable_gives_every_default(own_environment: dict[str, str]) -> None:
    own_environment.update(BRIDGE)
    settings = ServeSettings.from_environment()
    for option in SERVE_OPTIONS:
        if option.field in ("max_data_body_mb", "max_held_mb"):
            in_bytes = option.field.removesuffix("_mb") + "_bytes"
            assert getattr(settings, in_bytes) == option.default * 1024 * 1024, option.flag
        elif option.field != "auth_token_file":
            assert getattr(settings, option.field) == option.default, option.flag
    assert settings.properties == {"endpoint": "http://127.0.0.1:9", "root": "/data/lance"}
    assert settings.auth_tokens == ()


def test_each_variable_sets_its_setting(own_environment: dict[str, str], tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("from-the-file\n")
    given = {
        "LANCE_ICEBERG_NS_WORKERS": "3",
        "LANCE_ICEBERG_NS_GRACEFUL_TIMEOUT": "2.5",
        "LANCE_ICEBERG_NS_LOG_FORMAT": "json",
        "LANCE_ICEBERG_NS_CATALOG_WAIT": "0",
        "LANCE_ICEBERG_NS_HOST": "0.0.0.0",
        "LANCE_ICEBERG_NS_PORT": "8080",
        "LANCE_ICEBERG_NS_AUTH_TOKEN_FILE": str(tokens),
        "LANCE_ICEBERG_NS_AUTH_TOKEN": "from-the-variable",
        "LANCE_ICEBERG_NS_FORWARD_BEARER_TOKEN": "yes",
        "LANCE_ICEBERG_NS_ACCESS_LOG": "ON",
        "LANCE_ICEBERG_NS_MAX_DATA_BODY_MB": "4",
        "LANCE_ICEBERG_NS_REQUEST_READ_TIMEOUT": "0.5",
        "LANCE_ICEBERG_NS_DATA_THREADS": "2",
        "LANCE_ICEBERG_NS_SHARE_STATIC_CREDENTIALS": "1",
    }
    settings = ServeSettings.from_environment({**BRIDGE, **given})
    assert (settings.workers, settings.graceful_timeout, settings.log_format, settings.catalog_wait) == (
        3,
        2.5,
        "json",
        0,
    )
    assert (settings.host, settings.port, settings.access_log, settings.forward_bearer_token) == (
        "0.0.0.0",
        8080,
        True,
        True,
    )
    assert (settings.max_data_body_bytes, settings.request_read_timeout, settings.data_threads) == (4 << 20, 0.5, 2)
    assert settings.share_static_credentials and not settings.allow_anonymous
    assert settings.auth_tokens == ("from-the-variable", "from-the-file")
    assert "from-the" not in repr(settings)


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("LANCE_ICEBERG_NS_WORKERS", "0", "0 is not in the range x>=1."),
        ("LANCE_ICEBERG_NS_DATA_THREADS", "many", "The value is not a valid integer."),
        ("LANCE_ICEBERG_NS_LOG_FORMAT", "xml", "The value is not one of 'text', 'json'."),
        ("LANCE_ICEBERG_NS_REQUEST_READ_TIMEOUT", "0", "0.0 is not in the range x>0."),
        ("LANCE_ICEBERG_NS_CATALOG_WAIT", "-1", "-1.0 is not in the range x>=0."),
        ("LANCE_ICEBERG_NS_ACCESS_LOG", "maybe", "The value is not a valid boolean"),
        ("LANCE_ICEBERG_NS_GRACEFUL_TIMEOUT", "nan", "The value is not a finite number."),
        ("LANCE_ICEBERG_NS_CATALOG_WAIT", "inf", "The value is not a finite number."),
    ],
)
def test_a_value_the_server_cannot_take_is_refused_naming_its_variable(
    own_environment: dict[str, str], variable: str, value: str, why: str
) -> None:
    with pytest.raises(ServeSettingsError) as refused:
        ServeSettings.from_environment({**BRIDGE, variable: value})
    assert str(refused.value).startswith(f"Invalid value for {variable}: {why}")


def test_an_empty_variable_counts_as_unset_and_hides_the_files_value(
    own_environment: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "serve.env"
    config.write_text("LANCE_ICEBERG_NS_DATA_THREADS=5\nLANCE_ICEBERG_NS_WORKERS=2\n")
    environ = {**BRIDGE, "LANCE_ICEBERG_NS_CONFIG_FILE": str(config), "LANCE_ICEBERG_NS_DATA_THREADS": ""}
    settings = ServeSettings.from_environment(environ)
    assert (settings.data_threads, settings.workers) == (8, 2)


def test_an_unknown_property_variable_is_refused_with_a_hint(own_environment: dict[str, str]) -> None:
    with pytest.raises(ServeSettingsError, match="Unknown property 'rot' .*did you mean 'root'"):
        ServeSettings.from_environment({**BRIDGE, "LANCE_ICEBERG_ROT": "/data"})


def test_a_missing_config_file_is_refused(own_environment: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(ServeSettingsError, match="cannot read"):
        ServeSettings.from_environment({**BRIDGE, "LANCE_ICEBERG_NS_CONFIG_FILE": str(tmp_path / "gone.env")})


def test_the_app_factory_ends_a_worker_with_the_failed_start_code_on_a_bad_setting(
    own_environment: dict[str, str],
) -> None:
    from lance_iceberg_ns.server import create_app_from_env

    own_environment.update({**BRIDGE, "LANCE_ICEBERG_NS_WORKERS": "0"})
    with pytest.raises(SystemExit) as ended:
        create_app_from_env()
    assert ended.value.code == 3


# --- the command line reads the same table --------------------------------------------------------


def test_a_switch_takes_the_words_the_command_line_takes() -> None:
    assert click.types.BoolParamType.bool_states == BOOLEAN_WORDS


def test_every_serve_flag_is_a_setting_of_the_table() -> None:
    from lance_iceberg_ns.cli.serve import serve_command

    by_flag = {param.opts[0]: param for param in serve_command.params if isinstance(param, click.Option)}
    for option in SERVE_OPTIONS:
        param = by_flag[option.flag]
        assert param.envvar == option.variable, option.flag
        assert param.default == option.default or option.default is None, option.flag


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("LANCE_ICEBERG_NS_WORKERS", "0", "0 is not in the range x>=1."),
        ("LANCE_ICEBERG_NS_LOG_FORMAT", "xml", "The value is not one of 'text', 'json'."),
    ],
)
def test_serve_refuses_a_variable_in_the_servers_words(
    own_environment: dict[str, str], capsys: pytest.CaptureFixture[str], variable: str, value: str, why: str
) -> None:
    from lance_iceberg_ns.cli import main

    own_environment.update({**BRIDGE, variable: value})
    assert main(["serve", "--port", "0"]) == 2
    assert why in capsys.readouterr().err


@pytest.mark.parametrize(
    "variable", ["LANCE_ICEBERG_NS_PORT", "LANCE_ICEBERG_NS_LOG_FORMAT", "LANCE_ICEBERG_NS_ACCESS_LOG"]
)
def test_a_value_the_server_cannot_take_is_never_echoed(
    own_environment: dict[str, str], tmp_path: Path, variable: str
) -> None:
    """A value in the wrong place may be a secret pasted on the wrong line: no message shows it."""
    config = tmp_path / "serve.env"
    config.write_text(f"{variable}=SECRETpasted\n")
    with pytest.raises(ServeSettingsError) as refused:
        ServeSettings.from_environment({**BRIDGE, "LANCE_ICEBERG_NS_CONFIG_FILE": str(config)})
    assert variable in str(refused.value) and "SECRET" not in str(refused.value)
