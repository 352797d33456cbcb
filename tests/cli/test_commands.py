"""`tp` as a user meets it: every command group listed by `tp --help`, the capability table and the reward list,
and the offline demo builders (a tiny model that loads, synthetic data in every format)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from training_platform.cli import app

pytestmark = pytest.mark.unit

GROUPS = (
    "train",
    "verify",
    "config",
    "algorithms",
    "rewards",
    "demo",
    "models",
    "data",
    "eval",
    "db",
    "users",
    "worker",
    "beat",
    "api",
    "up",
    "doctor",
)


def tp(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_help_lists_every_command_group():
    result = tp("--help")
    assert result.exit_code == 0
    listed = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("│ ") and len(line.split()) > 1}
    assert set(GROUPS) <= listed, set(GROUPS) - listed


def test_algorithms_list_is_the_capability_table():
    rows = json.loads(tp("algorithms", "list", "--json").stdout)
    pairs = {(r["engine"], r["algorithm"]) for r in rows}
    assert {("trl", "sft"), ("trl", "grpo"), ("verl", "sft"), ("verl", "reinforce_pp")} <= pairs
    assert ("trl", "reinforce_pp") not in pairs  # verl only: TRL cannot express REINFORCE++
    table = tp("algorithms").stdout  # no subcommand: the same table, as text
    assert table.splitlines()[0].split()[:2] == ["ENGINE", "ALGORITHM"] and len(table.splitlines()) == len(rows) + 1


def test_rewards_list_names_every_registered_reward():
    from training_platform.training.rewards import REWARDS

    listed = {line.split()[0] for line in tp("rewards", "list").stdout.splitlines() if line.strip()}
    assert listed == set(REWARDS)


def test_demo_builders_make_a_loadable_model_and_data_in_every_format(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = tp("models", "create-tiny", str(tmp_path / "model"))
    assert result.exit_code == 0, result.stdout
    model_dir = result.stdout.strip().splitlines()[-1]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert model.num_parameters() > 0 and tokenizer("1+2=3")["input_ids"]

    result = tp("data", "synth", "arithmetic", str(tmp_path / "data"), "--max-operand", "9")
    assert result.exit_code == 0
    written = dict(line.split(": ", 1) for line in result.stdout.strip().splitlines())
    assert {"sft", "preference", "kto", "rl"} <= set(written)
    for path in written.values():
        if path.endswith(".jsonl"):
            assert Path(path).read_text().strip()


def test_rays_worker_ports_never_hold_the_heads_own_ports(monkeypatch):
    """`tp up --ray` picks its ports at random: a worker range drawn around the GCS port made `ray start` refuse."""
    from training_platform.cli import processes

    draws = iter([58563, 65500, 40000])  # around the GCS port; too close to 65535 for a range; clear
    monkeypatch.setattr(processes, "free_port", lambda host="127.0.0.1": next(draws))
    assert processes.worker_port_range(taken={58633, 1234}) == (40000, 40200)

    monkeypatch.setattr(processes, "free_port", lambda host="127.0.0.1": 58600)
    with pytest.raises(RuntimeError, match="clear of"):
        processes.worker_port_range(taken={58633})
