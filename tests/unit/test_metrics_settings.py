"""``compute_monitors`` and the ``[metrics]`` group: Nova's spellings accepted, anything
else refused at start with the option named."""

from __future__ import annotations

from pathlib import Path

import pytest

from novaq.exceptions import ConfigError
from novaq.settings import load_settings


def test_monitors_are_off_by_default_as_in_nova() -> None:
    assert load_settings().compute_monitors == ()


@pytest.mark.parametrize(
    "spelling", ["cpu.virt_driver", "virt_driver", "nova.compute.monitors.cpu.virt_driver"]
)
def test_every_nova_spelling_of_the_cpu_monitor_is_one_monitor(spelling: str) -> None:
    settings = load_settings(compute_monitors=[spelling, "cpu.virt_driver"])
    assert settings.compute_monitors == ("cpu.virt_driver",)


def test_an_unknown_monitor_is_refused_naming_the_option() -> None:
    with pytest.raises(ConfigError, match=r"compute_monitors .*unknown monitor 'cpu\.mem'"):
        load_settings(compute_monitors=["cpu.mem"])


def test_weight_setting_from_the_environment_as_nova_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NOVAQ_COMPUTE_MONITORS", "cpu.virt_driver")
    monkeypatch.setenv("NOVAQ_METRICS__WEIGHT_SETTING", "cpu.percent=-1.0, cpu.frequency = 0.5")
    settings = load_settings()
    assert settings.compute_monitors == ("cpu.virt_driver",)
    assert settings.metrics.weights == (("cpu.percent", -1.0), ("cpu.frequency", 0.5))


def test_weight_setting_from_a_toml_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "novaq.toml"
    config.write_text('[metrics]\nweight_setting = ["cpu.percent=-1"]\nrequired = false\n')
    monkeypatch.setenv("NOVAQ_CONFIG", str(config))
    settings = load_settings()
    assert settings.metrics.weights == (("cpu.percent", -1.0),)
    assert settings.metrics.required is False


@pytest.mark.parametrize(
    "bad", ["cpu.percent", "=1.0", "cpu.percent=", "cpu.percent=high", "cpu.percent=nan"]
)
def test_a_malformed_weight_setting_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"\[metrics\] weight_setting .*not a metric=ratio"):
        load_settings(metrics={"weight_setting": ["cpu.frequency=1", bad]})


def test_a_multiplier_that_is_not_finite_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\[metrics\] weight_multiplier"):
        load_settings(metrics={"weight_multiplier": float("inf")})
