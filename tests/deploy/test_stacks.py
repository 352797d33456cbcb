"""The two install stacks: constraints.txt (CPU, what CI installs) and constraints-gpu.txt (verl[vllm]==0.9.1 on GPUs).
pyproject.toml gives ranges; each stack's pins must fall inside them, and the GPU file must pin what verl's vllm extra
pins. Whether the GPU stack resolves as a whole is scripts/check_gpu_stack.sh (network, minutes; docs/engines.md)."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def exact_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            spec = [s for s in req.specifier if s.operator == "=="]
            if spec:
                pins[canon(req.name)] = spec[0].version
    return pins


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"])
    for extra in ("dev", "tracking", "verl"):
        deps += project["optional-dependencies"][extra]
    return [Requirement(d) for d in deps]


@pytest.mark.parametrize("constraints", ["constraints.txt", "constraints-gpu.txt"])
def test_each_stacks_pins_are_inside_pyprojects_ranges(constraints):
    pins = exact_pins(REPO / constraints)
    outside = [
        f"{req} excludes {req.name}=={pins[canon(req.name)]}"
        for req in project_requirements()
        if canon(req.name) in pins and not req.specifier.contains(pins[canon(req.name)], prereleases=True)
    ]
    assert not outside, f"{constraints}: {outside}"


def test_the_cpu_stack_pins_torch_and_pyproject_does_not():
    assert exact_pins(REPO / "constraints.txt")["torch"] == "2.13.0"
    torch = [r for r in project_requirements() if canon(r.name) == "torch"]
    assert len(torch) == 1 and not any(s.operator == "==" for s in torch[0].specifier)


def test_the_gpu_stack_pins_what_verls_vllm_extra_pins():
    env = {**default_environment(), "extra": "vllm"}
    verl_pins = {}
    for line in importlib.metadata.requires("verl") or []:
        req = Requirement(line)
        if req.marker and "extra" in str(req.marker) and req.marker.evaluate(env):
            spec = [s for s in req.specifier if s.operator == "=="]
            if spec:
                verl_pins[canon(req.name)] = spec[0].version
    assert {"torch", "vllm", "transformers"} <= set(verl_pins)
    gpu = exact_pins(REPO / "constraints-gpu.txt")
    assert gpu["verl"] == importlib.metadata.version("verl")
    assert {name: gpu.get(name) for name in verl_pins} == verl_pins
