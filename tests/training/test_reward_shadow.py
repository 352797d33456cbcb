"""Reward weight rules (training.reward_weights) and the reward shadow test (`tp rewards shadow`)."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from training_platform.training.config import check_rules, parse_config
from training_platform.training.rewards import REWARDS, RewardParams, register_reward
from training_platform.training.rewards.shadow import ShadowInputError, shadow_report
from training_platform.training.rewards.weights import check_reward_weights


def R(name, weight):
    return {"name": name, "weight": weight}


# ---------------------------------------------------------------------------------------------- weights


def test_normalise_warns_and_rescales():
    errors, warnings, normalised = check_reward_weights([R("a", 2.0), R("b", 2.0)], mode="normalise")
    assert errors == [] and normalised == [0.5, 0.5]
    assert len(warnings) == 1 and "sum to 4" in warnings[0] and "a=0.5" in warnings[0]
    assert check_reward_weights([R("a", 0.25), R("b", 0.75)], mode="normalise")[1] == []


def test_exact_and_strict_name_the_field():
    errors, _, _ = check_reward_weights([R("a", 0.5), R("b", 0.6)], mode="exact")
    assert [p for p, _ in errors] == ["rewards"]
    errors, _, _ = check_reward_weights([R("a", 0.3), R("b", 0.7)], mode="strict")
    assert [p for p, _ in errors] == ["rewards[1].weight"] and "more than 0.5" in errors[0][1]
    assert check_reward_weights([R("a", 0.5), R("b", 0.5)], mode="strict")[0] == []
    assert check_reward_weights([R("a", 1.0)], mode="strict")[0] == []  # a lone reward carries everything
    assert check_reward_weights([R("a", 0.0), R("b", 0.0)], mode="normalise")[0] == [
        ("rewards", "the reward weights must not all be 0")
    ]
    assert check_reward_weights([R("a", -1.0)], mode="normalise")[0][0][0] == "rewards[0].weight"


def _grpo(weights, mode):
    return parse_config(
        {
            "model": {"path": "m"},
            "data": {"train_file": "t.jsonl"},
            "algorithm": {"name": "grpo"},
            "training": {"reward_weights": mode},
            "rewards": [{"name": "math_answer", "weight": w} for w in weights],
        }
    )


def test_check_rules_applies_the_mode():
    assert {e.path for e in check_rules(_grpo([0.8, 0.2], "strict"))} >= {"rewards[0].weight"}
    assert not [e for e in check_rules(_grpo([0.8, 0.2], "exact")) if e.path.startswith("rewards")]
    assert [e.path for e in check_rules(_grpo([1.0, 2.0], "exact")) if e.path.startswith("rewards")] == ["rewards"]
    assert not [e for e in check_rules(_grpo([1.0, 2.0], "normalise")) if e.path.startswith("rewards")]


def test_negative_weight_refused_by_the_schema():
    from training_platform.training.config import ConfigError

    with pytest.raises(ConfigError) as exc:
        _grpo([-0.5], "normalise")
    assert exc.value.errors[0].path == "rewards[0].weight"


def test_validate_route_returns_the_normalise_warning():
    from training_platform.api.routes.jobs import _config_warnings

    assert any("normalised" in w for w in _config_warnings(_grpo([1.0, 3.0], "normalise")))


# ---------------------------------------------------------------------------------------------- shadow


class _Col(RewardParams):
    column: str = "x"


_NOISE = random.Random(0)
# old = f(x) = x; a monotone transform of it (exp); an independent scorer (y); a noisy scorer (x + N(0, 0.5^2)).
_SCORERS = {
    "_t_identity": lambda p: lambda completions, **kw: [float(v) for v in kw[p.column]],
    "_t_monotone": lambda p: lambda completions, **kw: [2.0 ** float(v) - 7 for v in kw[p.column]],
    "_t_noisy": lambda p: lambda completions, **kw: [float(v) + _NOISE.gauss(0, 0.5) for v in kw[p.column]],
}


@pytest.fixture(autouse=True, scope="module")
def _test_scorers():
    """Registered for this module only: the registry is global (other tests list the known rewards)."""
    for name, make in _SCORERS.items():
        if name not in REWARDS:
            register_reward(name, _Col, f"test scorer {name}")(make)
    yield
    for name in _SCORERS:
        REWARDS.pop(name, None)


@pytest.fixture
def data(tmp_path):
    rng = random.Random(1)
    path = tmp_path / "items.jsonl"
    rows = [
        {"prompt": f"p{i}", "completion": f"c{i}", "x": rng.random() * 4, "y": rng.random() * 4} for i in range(400)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_monotone_transform_has_rank_correlation_one(data):
    report = shadow_report("_t_identity", "_t_monotone", data, limit=200, repeats=2, top_k=20)
    assert report["spearman"] == pytest.approx(1.0) and report["kendall"] == pytest.approx(1.0)
    assert report["top_k_overlap"] == 1.0 and report["items"] == 200 and report["rows_in_file"] == 400
    assert report["stability"]["new"]["mean_variance"] == 0.0 and report["verdict"] == "pass"


def test_independent_scorer_has_correlation_near_zero(data):
    report = shadow_report("_t_identity", "_t_identity:column=y", data, limit=400, repeats=1)
    # 400 independent uniform pairs: the sd of Spearman's rho is 1/sqrt(399) ~ 0.05
    assert abs(report["spearman"]) < 0.2 and abs(report["kendall"]) < 0.15
    assert report["verdict"] == "fail" and "spearman" in report["reasons"][0]


def test_noisy_scorer_is_flagged_unstable(data):
    # noise variance 0.25 > 0.08: with 8 calls nearly every item's sample variance is above the threshold
    report = shadow_report("_t_identity", "_t_noisy", data, limit=100, repeats=8, min_spearman=0.5)
    new = report["stability"]["new"]
    assert new["mean_variance"] == pytest.approx(0.25, rel=0.2)
    assert new["unstable_share"] > 0.9 and report["stability"]["old"]["unstable_share"] == 0.0
    assert report["spearman"] > 0.8  # the mean of 8 calls still ranks like x (sd of x ~1.15 vs 0.18)
    assert report["verdict"] == "fail" and "unstable" in report["reasons"][0]


def test_sample_is_seeded(data):
    a = shadow_report("_t_identity", "_t_monotone", data, limit=50, repeats=1, seed=3)
    b = shadow_report("_t_identity", "_t_monotone", data, limit=50, repeats=1, seed=3)
    assert a == b


def test_bad_input_names_the_field(data, tmp_path):
    with pytest.raises(ShadowInputError) as exc:
        shadow_report("nope", "length_penalty:max_length=4,buffer=9", data, limit=0)
    fields = [f for f, _ in exc.value.errors]
    assert fields == ["limit", "old.name", "new.params"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n')
    with pytest.raises(ShadowInputError, match="prompt` and `completion"):
        shadow_report("length_penalty", "length_penalty", bad)


def test_cli_exit_codes(data, tmp_path):
    from training_platform.cli import app

    runner = CliRunner()
    out = tmp_path / "report.json"
    ok = runner.invoke(
        app,
        [
            "rewards",
            "shadow",
            "--old",
            "_t_identity",
            "--new",
            "_t_monotone",
            "--data",
            str(data),
            "--limit",
            "50",
            "--repeats",
            "2",
            "--report",
            str(out),
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert "verdict: PASS" in ok.output and json.loads(out.read_text())["spearman"] == pytest.approx(1.0)
    fail = runner.invoke(
        app,
        [
            "rewards",
            "shadow",
            "--old",
            "_t_identity",
            "--new",
            '{"name": "_t_identity", "params": {"column": "y"}}',
            "--data",
            str(data),
            "--limit",
            "100",
        ],
    )
    assert fail.exit_code == 1, fail.output
    bad = runner.invoke(
        app,
        [
            "rewards",
            "shadow",
            "--old",
            "_t_identity",
            "--new",
            "_t_identity",
            "--data",
            str(tmp_path / "missing.jsonl"),
        ],
    )
    assert bad.exit_code == 2 and "no such file" in bad.output
    spec = tmp_path / "rewards.yaml"
    spec.write_text("rewards:\n  - {name: _t_identity, weight: 2}\n  - {name: _t_monotone, weight: 0}\n")
    assert (
        runner.invoke(
            app, ["rewards", "shadow", "--old", str(spec), "--new", "_t_identity", "--data", str(data), "--limit", "20"]
        ).exit_code
        == 0
    )
    listing = runner.invoke(app, ["rewards"])
    assert listing.exit_code == 0 and "math_answer" in listing.output


# ---------------------------------------------------------------------------------------------- the gate's rule


JOB_REWARDS = [
    {"name": "math_answer", "weight": 1.0},
    {"name": "length_penalty", "weight": 0.1, "params": {"max_length": 8, "buffer": 4}},
]


def _passing_report(new, spearman=1.0):
    from training_platform.training.rewards.shadow import Scorer

    return {"verdict": "pass", "reasons": [], "spearman": spearman, "new": Scorer(new, "new").describe()}


def test_a_shadow_report_approves_exactly_its_new_reward_set():
    from training_platform.training.rewards.shadow import approval_problem

    # the same set however written: order, weights before normalisation, parameters left at their defaults
    same = [
        {"name": "length_penalty", "weight": 1.0, "params": {"max_length": 8, "buffer": 4, "unit": "tokens"}},
        {"name": "math_answer", "weight": 10.0, "params": {}},
    ]
    assert approval_problem(_passing_report(same), JOB_REWARDS, min_spearman=0.8) is None
    other_params = [JOB_REWARDS[0], {**JOB_REWARDS[1], "params": {"max_length": 16, "buffer": 4}}]
    assert "another reward set" in approval_problem(_passing_report(other_params), JOB_REWARDS, min_spearman=0.8)
    other_weights = [JOB_REWARDS[0], {**JOB_REWARDS[1], "weight": 0.5}]
    assert "another reward set" in approval_problem(_passing_report(other_weights), JOB_REWARDS, min_spearman=0.8)
    assert "below the profile's 0.95" in approval_problem(
        _passing_report(JOB_REWARDS, spearman=0.9), JOB_REWARDS, min_spearman=0.95
    )
    failed = {**_passing_report(JOB_REWARDS), "verdict": "fail", "reasons": ["spearman 0.1 < 0.8"]}
    assert "verdict is fail" in approval_problem(failed, JOB_REWARDS, min_spearman=0.8)
    assert "not a reward shadow report" in approval_problem({"passed": True}, JOB_REWARDS, min_spearman=0.8)


def _gated_rl_config(tmp_path, **gate):
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)]
    train = tmp_path / "rl.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return parse_config(
        {
            "model": {"path": "m"},
            "data": {"train_file": str(train), "gate": {"profile": "shadowed", **gate}},
            "algorithm": {"name": "grpo", "num_generations": 2, "max_completion_length": 8},
            "rewards": JOB_REWARDS,
            "training": {"per_device_batch_size": 2},
        }
    ), train


def test_offline_train_needs_an_approving_shadow_report_file(tmp_path, monkeypatch):
    """`tp train` under a profile with the reward_shadow check: exit-2 errors at data.gate.reward_shadow_report
    until the file is a passing report for these rewards; the run then keeps it (gates/reward_shadow.json)."""
    from training_platform.training import gate_check
    from training_platform.training.config import ConfigError

    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("profiles:\n  shadowed:\n    checks: {schema: {}, reward_shadow: {min_spearman: 0.9}}\n")
    monkeypatch.setenv("TP_GATE_PROFILES_FILE", str(profiles))
    monkeypatch.delenv(gate_check.GATE_REPORTS_ENV, raising=False)
    cfg, train = _gated_rl_config(tmp_path)
    with pytest.raises(ConfigError) as exc:
        gate_check.enforce(cfg, train)
    assert exc.value.errors[0].path == "data.gate.reward_shadow_report"
    assert "requires a passing reward shadow report" in exc.value.errors[0].reason

    report_file = tmp_path / "shadow.json"
    report_file.write_text(json.dumps(_passing_report([JOB_REWARDS[0]])))  # approves math_answer alone
    cfg, train = _gated_rl_config(tmp_path, reward_shadow_report=str(report_file))
    with pytest.raises(ConfigError) as exc:
        gate_check.enforce(cfg, train)
    assert exc.value.errors[0].path == "data.gate.reward_shadow_report"
    assert "another reward set" in exc.value.errors[0].reason

    report_file.write_text(json.dumps(_passing_report(JOB_REWARDS)))
    files = dict(gate_check.enforce(cfg, train))
    assert files["gates/shadowed.json"]["passed"]
    assert {c["name"]: c["verdict"] for c in files["gates/shadowed.json"]["checks"]}["reward_shadow"] == "skipped"
    assert files["gates/reward_shadow.json"]["verdict"] == "pass"
