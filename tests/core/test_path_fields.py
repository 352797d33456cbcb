"""Every path a user can name is marked in the schema (`core.userpath`), so the path policy's walk over a
validated config finds it: a new field named like a path that is neither marked nor exempted here fails this test.
Also: the walk itself, and the length limits the marker brings."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

from training_platform.core.userpath import (
    MAX_COMPONENT_BYTES,
    ModelRef,
    UserFile,
    field_marker,
    raw_user_paths,
    user_paths,
)

PATHLIKE = re.compile(r"(path|file|dir|folder|tokenizer|model|eval_sets|data)", re.IGNORECASE)

# "Model.field": why it is not a user path the policy must check.
EXEMPT = {
    "ModelSpec.path": "the evaluated model is chosen by `model` / `job_id`+`checkpoint` of the request and checked by "
    "eval_service.resolve_target; the eval worker checks it again (EvalJobSupervisor._path_problems)",
    "ConvertParams.data_source": "a label written into verl rows, not a path",
    "JudgeParams.model": "the model an operator-named endpoint serves (checked against the endpoint's list)",
    "JudgeParams.reward_path": "a URL path under the operator-named endpoint, never a file",
    "GateSection.profile": "a quality-gate profile's name (built-in, operator file or admin row), never a file",
    "LLMJudgeParams.model": "the model name the judge endpoint serves (sent in the request body), never a file",
}


def _roots() -> list[type[BaseModel]]:
    import training_platform.data.operators  # noqa: F401 - registers the operators
    from training_platform.data.operators.base import OPERATORS
    from training_platform.evaluation.config import EvalConfig
    from training_platform.services.datasets import PARAMS
    from training_platform.training.algorithms import ALGORITHMS
    from training_platform.training.config import JobConfig
    from training_platform.training.rewards import REWARDS

    roots: list[type[BaseModel]] = [JobConfig, EvalConfig, *PARAMS.values()]
    roots += [spec.params for spec in ALGORITHMS.values()]
    roots += [r.params_model for r in REWARDS.values()]
    roots += [op.Params for op in OPERATORS.values()]
    return roots


def _all_models() -> list[type[BaseModel]]:
    from training_platform.core.userpath import _model_classes

    seen: list[type[BaseModel]] = []
    todo = _roots()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        for info in cls.model_fields.values():
            todo += _model_classes(info.annotation)
    return seen


def _mentions_str(annotation) -> bool:
    from typing import get_args

    return annotation is str or any(_mentions_str(a) for a in get_args(annotation))


def test_every_pathlike_string_field_is_marked_or_exempted():
    models = _all_models()
    names = {cls.__name__ for cls in models}  # the walk reached the nested sections, algorithms, rewards, operators
    assert {"DataSection", "LoraSection", "BenchmarkSpec", "LengthParams", "DecontaminateParams"} <= names, names
    unmarked, pathlike = [], set()
    for cls in models:
        for name, info in cls.model_fields.items():
            if not PATHLIKE.search(name) or not _mentions_str(info.annotation):
                continue
            key = f"{cls.__name__}.{name}"
            pathlike.add(key)
            if field_marker(cls, name) is None and key not in EXEMPT:
                unmarked.append(key)
    assert not unmarked, (
        f"path-like fields neither marked (UserPath/UserFile/UserDir/ModelRef) nor exempted: {unmarked}"
    )
    assert set(EXEMPT) <= pathlike, f"stale exemptions: {set(EXEMPT) - pathlike}"


def test_known_path_fields_are_marked():
    from training_platform.data.operators.length import LengthParams
    from training_platform.evaluation.config import BenchmarkSpec
    from training_platform.services.datasets import DecontaminateParams, ScoreParams
    from training_platform.training.algorithms import ALGORITHMS
    from training_platform.training.config import DataSection, ModelSection

    for cls, name in (
        (ModelSection, "path"),
        (DataSection, "train_file"),
        (DataSection, "eval_file"),
        (ALGORITHMS["ppo"].params, "reward_model_path"),
        (ALGORITHMS["ppo"].params, "value_model_path"),
        (BenchmarkSpec, "data"),
        (BenchmarkSpec, "fewshot_data"),
        (ScoreParams, "perplexity_model"),
        (DecontaminateParams, "eval_sets"),
        (LengthParams, "tokenizer"),
    ):
        assert field_marker(cls, name) is not None, (cls.__name__, name)


def test_the_walk_finds_every_marked_value_with_its_field_path():
    from training_platform.training.config import JobConfig, parse_config

    raw = {
        "model": {"path": "demo/model"},
        "data": {"train_file": "a.jsonl", "eval_file": "b.jsonl"},
        "algorithm": {"name": "ppo", "reward_model_path": "demo/reward_model"},
    }
    found = {loc: (value, marker.kind) for loc, value, marker in user_paths(parse_config(raw))}
    assert found == {
        "model.path": ("demo/model", "model"),
        "data.train_file": ("a.jsonl", "file"),
        "data.eval_file": ("b.jsonl", "file"),
        "algorithm.reward_model_path": ("demo/reward_model", "dir"),
    }
    # On raw data that fails validation elsewhere, guided by the schema (every union member tried).
    raw["training"] = {"max_steps": -1}
    assert {loc for loc, _, _ in raw_user_paths(JobConfig, raw)} == set(found)


def test_lists_of_paths_are_walked():
    from training_platform.services.datasets import DecontaminateParams

    params = DecontaminateParams(eval_sets=["x.jsonl", "y.jsonl"])
    assert [(loc, v) for loc, v, _ in user_paths(params, "params")] == [
        ("params.eval_sets[0]", "x.jsonl"),
        ("params.eval_sets[1]", "y.jsonl"),
    ]


class _M(BaseModel):
    f: UserFile
    m: ModelRef | None = None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("a/" + "x" * (MAX_COMPONENT_BYTES + 1), "component is at most 255 bytes"),
        ("é" * 200, "component is at most 255 bytes"),  # bytes, not characters
        ("/".join(["y" * 200] * 21), "at most 4096 bytes"),
        ("a\x00b", "NUL"),
    ],
)
def test_marked_fields_are_bounded(value, fragment):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as info:
        _M(f=value)
    assert info.value.errors()[0]["loc"] == ("f",) and fragment in str(info.value)
    assert _M(f="a/" + "x" * MAX_COMPONENT_BYTES).f  # the limit itself is fine


def test_a_user_named_dotdot_gets_no_area_above_users(tmp_path):
    """Defence in depth (the API's name pattern already refuses it): users/<name> must stay one component."""
    from types import SimpleNamespace

    from training_platform.core.path_policy import readable
    from training_platform.core.settings import Settings
    from training_platform.services.access import UserReader as Reader

    settings = Settings(TP_DATA_DIR=str(tmp_path))
    (tmp_path / "users" / "x").mkdir(parents=True)
    secret = tmp_path / "platform.db"
    secret.write_text("")

    class NoDb:
        def get(self, *a):
            return None

        def exec(self, *a):
            return SimpleNamespace(all=lambda: [], first=lambda: None)

    for name in ("..", ".", "x/../..", ""):
        reader = Reader(user=SimpleNamespace(id=99, name=name, is_admin=False), session=NoDb())
        assert not readable(secret.resolve(), reader, settings), name
    reader = Reader(user=SimpleNamespace(id=99, name="x", is_admin=False), session=NoDb())
    assert readable((tmp_path / "users" / "x" / "f.jsonl").resolve(), reader, settings)
    assert not readable((tmp_path / "users" / "y" / "f.jsonl").resolve(), reader, settings)
