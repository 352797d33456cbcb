"""prometheus_client's multiprocess mode as the platform uses it: counters written by separate processes into one
directory are summed by /metrics' renderer, and the directory is wiped at platform start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent("""
    import sys
    from training_platform.core import telemetry
    for _ in range(int(sys.argv[1])):
        telemetry.observe_job_finished("train", "grpo", "succeeded", 12.5)
    telemetry.observe_request("GET", "/api/v1/jobs", 200, 0.01)
""")

READER = textwrap.dedent("""
    from training_platform.core import telemetry
    body, _ = telemetry.render()
    print(body.decode())
""")


def _run(code: str, env: dict, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _samples(text: str) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_counters_of_two_processes_sum(tmp_path):
    env = {**os.environ, "TP_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(REPO)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    _run(WRITER, env, "3")
    _run(WRITER, env, "4")
    # The default directory is under TP_DATA_DIR, one file per process and metric type.
    files = sorted(p.name for p in (tmp_path / "data" / "prometheus").iterdir())
    assert len([f for f in files if f.startswith("counter_")]) == 2, files
    samples = _samples(_run(READER, env))
    labels = (("algorithm", "grpo"), ("kind", "train"), ("outcome", "succeeded"))
    assert samples[("tp_jobs_finished_total", labels)] == 7
    assert samples[("tp_job_duration_seconds_count", labels)] == 7
    assert samples[("tp_job_duration_seconds_sum", labels)] == 7 * 12.5
    assert samples[("tp_http_requests_total", (("method", "GET"), ("route", "/api/v1/jobs"), ("status", "200")))] == 2

    # An explicit PROMETHEUS_MULTIPROC_DIR wins; reset_multiproc_dir empties it.
    explicit = tmp_path / "explicit"
    env2 = {**env, "PROMETHEUS_MULTIPROC_DIR": str(explicit)}
    _run(WRITER, env2, "1")
    assert any(explicit.iterdir())
    _run("from training_platform.core import telemetry; telemetry.reset_multiproc_dir()", env2)
    assert explicit.is_dir() and not any(explicit.iterdir())
    assert ("tp_jobs_finished_total", labels) not in _samples(_run(READER, env2))


def test_label_values_are_bounded():
    from training_platform.core import telemetry

    assert telemetry.label("sft") == "sft" and telemetry.label("dedup") == "dedup"
    assert telemetry.label("?") == "other" and telemetry.label("x" * 40) == "other"
    assert telemetry.label('a"b') == "other" and telemetry.label(None) == "other"
