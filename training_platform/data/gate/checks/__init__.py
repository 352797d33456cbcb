"""The gate checks, one module each; importing a module registers its check (`@register_check`)."""

from training_platform.data.gate.checks import (  # noqa: F401 - each import registers its check
    difficulty_mix,
    distinct_2,
    duplicates,
    leakage,
    length_bounds,
    metadata_coverage,
    ngram_divergence,
    reward_shadow,
    schema,
)
