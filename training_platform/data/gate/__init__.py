"""Quality gates: profiles of checks with thresholds, run on a dataset file into a gate report (base.py); the checks
are `checks/`, one module each."""

from training_platform.data.gate import checks  # noqa: F401 - registers the checks
from training_platform.data.gate.base import (
    CHECKS,
    GATE_REPORT_VERSION,
    MAX_EVAL_SETS,
    PROFILE_NAME_PATTERN,
    CheckParams,
    GateContext,
    GateError,
    GateProfile,
    Outcome,
    ProfileName,
    builtin_profiles,
    inputs_match,
    load_profiles_file,
    local_profiles,
    parse_profile,
    profile_hash,
    register_check,
    resolve_local_profile,
    run_gate,
    summary_line,
)
from training_platform.data.gate.checks.reward_shadow import REWARD_SHADOW_CHECK

__all__ = [
    "CHECKS",
    "GATE_REPORT_VERSION",
    "MAX_EVAL_SETS",
    "PROFILE_NAME_PATTERN",
    "REWARD_SHADOW_CHECK",
    "CheckParams",
    "GateContext",
    "GateError",
    "GateProfile",
    "Outcome",
    "ProfileName",
    "builtin_profiles",
    "inputs_match",
    "load_profiles_file",
    "local_profiles",
    "parse_profile",
    "profile_hash",
    "register_check",
    "resolve_local_profile",
    "run_gate",
    "summary_line",
]
