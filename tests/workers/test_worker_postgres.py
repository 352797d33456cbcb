"""The main path on PostgreSQL: a fresh database `tp_test_<random>` (dropped afterwards); skipped if unreachable."""

from __future__ import annotations

import pytest
from _wk import assert_claims_race_free, run_sft_happy_path

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def database_url(postgres_url):
    return postgres_url


def test_sft_job_succeeds_on_postgres(platform):
    assert platform.database_url.startswith("postgresql")
    platform.start_worker("pg1")
    timings = run_sft_happy_path(platform, max_steps=30)
    print(
        f"\n[postgres] created->running {timings['created_to_running_s']:.2f}s, "
        f"submit->done {timings['submit_to_done_s']:.1f}s"
    )


def test_racing_claimers_claim_each_job_once_on_postgres(platform):
    assert_claims_race_free(platform)
