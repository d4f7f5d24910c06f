from __future__ import annotations

from pathlib import Path

import pytest

from novaq.exceptions import ConfigError
from novaq.settings import load_settings


def test_defaults_are_novas() -> None:
    s = load_settings()
    assert (s.report_interval, s.service_down_time) == (10, 60)
    assert (s.initial_cpu_allocation_ratio, s.initial_ram_allocation_ratio) == (4.0, 1.0)
    assert s.cpu_allocation_ratio is None
    assert (s.reserved_host_memory_mb, s.reserved_host_disk_mb, s.reserved_host_cpus) == (512, 0, 0)
    assert s.scheduler.max_attempts == 3
    assert s.filter_scheduler.host_subset_size == 1


def test_environment_sets_grouped_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOVAQ_SCHEDULER__MAX_ATTEMPTS", "5")
    monkeypatch.setenv("NOVAQ_RESERVED_HOST_MEMORY_MB", "1024")
    s = load_settings()
    assert s.scheduler.max_attempts == 5 and s.reserved_host_memory_mb == 1024


def test_toml_file_named_by_novaq_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "novaq.toml"
    config.write_text(
        "ram_allocation_ratio = 1.5\n[filter_scheduler]\nhost_subset_size = 2\n"
        '[[hosts]]\nname = "gpu1"\nvcpus = 8\n'
        '[[hosts.pci_devices]]\naddress = "0000:08:00.0"\nvendor_id = "10de"\nproduct_id = "13f1"\n'
        '[[pci.alias]]\nname = "QuadroM4000-video"\nvendor_id = "10de"\nproduct_id = "13f1"\n'
    )
    monkeypatch.setenv("NOVAQ_CONFIG", str(config))
    s = load_settings()
    assert s.ram_allocation_ratio == 1.5 and s.filter_scheduler.host_subset_size == 2
    host = s.simulated_host("gpu1")
    assert host is not None and host.vcpus == 8 and host.pci_devices[0].vendor_id == "10de"
    assert s.pci.alias[0].name == "QuadroM4000-video"


def test_environment_wins_over_the_toml_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "novaq.toml"
    config.write_text("report_interval = 5\n")
    monkeypatch.setenv("NOVAQ_CONFIG", str(config))
    monkeypatch.setenv("NOVAQ_REPORT_INTERVAL", "7")
    assert load_settings().report_interval == 7


@pytest.mark.parametrize(
    ("env", "value", "named"),
    [
        ("NOVAQ_REPORT_INTERVAL", "often", "[DEFAULT] report_interval (NOVAQ_REPORT_INTERVAL)"),
        ("NOVAQ_RESERVED_HOST_CPUS", "-1", "[DEFAULT] reserved_host_cpus"),
        ("NOVAQ_CPU_ALLOCATION_RATIO", "0", "[DEFAULT] cpu_allocation_ratio"),
        (
            "NOVAQ_SCHEDULER__MAX_ATTEMPTS",
            "0",
            "[scheduler] max_attempts (NOVAQ_SCHEDULER__MAX_ATTEMPTS)",
        ),
    ],
)
def test_a_wrong_value_fails_naming_the_option(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, named: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert named in str(info.value)


def test_an_unknown_option_in_the_toml_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "novaq.toml"
    config.write_text("report_intervall = 5\n")
    monkeypatch.setenv("NOVAQ_CONFIG", str(config))
    with pytest.raises(ConfigError, match="report_intervall"):
        load_settings()


def test_a_missing_config_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOVAQ_CONFIG", "/nonexistent/novaq.toml")
    with pytest.raises(ConfigError, match="NOVAQ_CONFIG"):
        load_settings()


def test_service_down_time_below_report_interval_is_raised_as_nova_does() -> None:
    s = load_settings(report_interval=10, service_down_time=5)
    assert s.effective_service_down_time == 25


def test_guest_options_default_as_nova() -> None:
    s = load_settings()

    assert (s.libvirt.virt_type, s.libvirt.cpu_mode, s.libvirt.cpu_models) == ("kvm", None, ())
    assert (s.libvirt.wait_soft_reboot_seconds, s.libvirt.mem_stats_period_seconds) == (120, 10)
    assert (s.shutdown_timeout, s.compute.shutdown_retry_interval) == (60, 10)


@pytest.mark.parametrize(
    ("variable", "value", "option"),
    [
        ("NOVAQ_LIBVIRT__VIRT_TYPE", "xen", "virt_type"),
        ("NOVAQ_LIBVIRT__CPU_MODE", "custom", "cpu_mode custom needs"),
        ("NOVAQ_LIBVIRT__CPU_MODELS", '["Haswell"]', "only valid with cpu_mode custom"),
        ("NOVAQ_SHUTDOWN_TIMEOUT", "-1", "shutdown_timeout"),
    ],
)
def test_bad_guest_options_stop_the_process(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, option: str
) -> None:
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigError, match=option):
        load_settings()


def test_the_guest_options_reach_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.context import guest_options

    monkeypatch.setenv("NOVAQ_LIBVIRT__VIRT_TYPE", "qemu")
    monkeypatch.setenv("NOVAQ_LIBVIRT__CPU_MODE", "custom")
    monkeypatch.setenv("NOVAQ_LIBVIRT__CPU_MODELS", '["Haswell"]')
    monkeypatch.setenv("NOVAQ_COMPUTE__SHUTDOWN_RETRY_INTERVAL", "3")

    options = guest_options(load_settings())

    assert (options.virt_type, options.cpu_mode, options.cpu_models) == (
        "qemu",
        "custom",
        ("Haswell",),
    )
    assert options.shutdown_retry_interval_s == 3


# -- URLs (issue 15, defect 5): a broken URL is a ConfigError naming its option ----------------
@pytest.mark.parametrize(
    ("env", "value", "named", "reason"),
    [
        (
            "NOVAQ_DATABASE_URL",
            "garbage",
            "[DEFAULT] database_url (NOVAQ_DATABASE_URL)",
            "not a database URL",
        ),
        ("NOVAQ_DATABASE_URL", "nosuchdb://host/db", "database_url", "unknown database dialect"),
        ("NOVAQ_DATABASE_URL", "postgresql://u:hunter2@h:port/db", "database_url", "not a"),
        (
            "NOVAQ_BROKER_URL",
            "garbage",
            "[DEFAULT] broker_url (NOVAQ_BROKER_URL)",
            "no known transport 'garbage'",
        ),
        ("NOVAQ_BROKER_URL", "redis://:hunter2@127.0.0.1:63xx/0", "broker_url", "not a URL"),
        ("NOVAQ_BROKER_URL", "redis://h/0;nope://h", "broker_url", "no known transport 'nope'"),
        ("NOVAQ_RESULT_BACKEND", "garbage", "result_backend (NOVAQ_RESULT_BACKEND)", "no known"),
    ],
)
def test_a_broken_url_fails_naming_the_option_and_hides_the_password(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, named: str, reason: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert named in str(info.value) and reason in str(info.value)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("NOVAQ_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
        ("NOVAQ_DATABASE_URL", "mysql+pymysql://u:p@h/db"),
        ("NOVAQ_DATABASE_URL", "sqlite:////tmp/x.sqlite"),
        ("NOVAQ_BROKER_URL", "redis://:p@127.0.0.1:6379/0"),
        ("NOVAQ_BROKER_URL", "memory://"),
        ("NOVAQ_BROKER_URL", "amqp://guest:guest@localhost:5672//"),
        ("NOVAQ_RESULT_BACKEND", "cache+memory://"),
        ("NOVAQ_RESULT_BACKEND", "db+postgresql://u@h/db"),
    ],
)
def test_working_urls_are_taken(monkeypatch: pytest.MonkeyPatch, env: str, value: str) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(load_settings(), env.removeprefix("NOVAQ_").lower()) == value


@pytest.mark.parametrize(
    ("env", "args"),
    [
        ("NOVAQ_DATABASE_URL", ["list"]),
        ("NOVAQ_DATABASE_URL", ["db", "upgrade"]),
        ("NOVAQ_DATABASE_URL", ["up"]),
        ("NOVAQ_BROKER_URL", ["list"]),
    ],
)
def test_the_novaq_command_reports_a_broken_url_in_one_line(
    tmp_path: Path, env: str, args: list[str]
) -> None:
    import os
    import subprocess
    import sys

    variables = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
    variables.update(
        {env: "garbage", "NOVAQ_STATE_DIR": str(tmp_path / "state")},
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
        COLUMNS="400",  # one line, as rich would print it on a wide terminal
    )
    done = subprocess.run(
        [sys.executable, "-m", "novaq.cli", *args],
        env=variables,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    option = env.removeprefix("NOVAQ_").lower()
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        f"ERROR (ConfigError): Invalid settings: [DEFAULT] {option} ({env}): Value error, 'garbage'"
    )
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "state").exists()  # nothing written
