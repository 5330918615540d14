"""The patches of docs/upstream/ do their workarounds' jobs in lmms-eval alone. Scratch copies of the installed
lmms-eval (never the environment's own), in lmms-eval's file modes, take every ``NN-*.patch`` of the folder without
a warning from ``git apply``: each alone (on the patches its text says it needs), and all in order. Every patch's
tests (its own, in lmms-eval's test tree, and the suite's tests of the behaviour its workarounds give) run in fresh
pytest processes with the workarounds switched off: against the released copy, where each patch's suite tests and
some of its own fail; against the release with that patch alone (on those it needs), and with every patch in order,
where every one passes. A skipped test fails the check. docs/upstream/README.md's tables name the
patches, their workarounds and tests, and the workarounds that cannot become a patch, with why; every workaround of
lmms_egoplan.compat's switch table is in one. A pull request of the benchmark series that adds a task and carries no
test of its own (its row says which do: they are checked as the fixes are) names in its row the
equivalence run that proves it instead (docs/upstream/equivalence.py, tests/e2e/test_upstream_equivalence.py), and
these checks say so rather than pass it silently."""

from __future__ import annotations

import re

import pytest

from tests.e2e.upstream_patches import (
    PATCH_FILES,
    ROOT,
    git_apply,
    outcomes_of,
    patched_paths,
    run_tests,
    scratch_lmms_eval,
    series_rows,
    switch_table,
    table_rows,
    upstream_patches,
    workarounds_without_a_patch,
)

PATCHES = upstream_patches()
# The patches whose own tests run in lmms-eval's test tree; the others are proven by an equivalence run
# (test_a_pull_request_without_a_test_of_its_own_is_proven_by_an_equivalence_run).
TESTED = [patch for patch in PATCHES if patch.proven_by is None]


def patch_tests(patches, scratch) -> list[str]:
    """The patches' own tests in the scratch copy, then the suite's tests of their behaviours."""
    return [*(str(scratch / test) for patch in patches for test in patch.own_tests()),
            *(str(ROOT / test) for patch in patches for test in patch.suite_tests)]


def scratch_with(patches, folder):
    """A scratch copy of the release with ``patches`` applied, in order, each without a warning."""
    scratch = scratch_lmms_eval(folder)
    for patch in patches:
        applied = git_apply(patch, scratch)
        assert (applied.returncode, applied.stderr) == (0, ""), f"{patch.name}: {applied.stderr}"
    return scratch


def not_passed(outcomes: dict) -> dict:
    return {test: outcome for test, outcome in outcomes.items() if outcome != "passed"}


def test_every_workaround_has_a_patch_or_a_reason_and_every_patch_its_row_text_and_tests():
    rows, series = table_rows(), series_rows()
    assert not set(rows) & set(series), set(rows) & set(series)
    assert PATCH_FILES and sorted([*rows, *series]) == [patch.name for patch in PATCH_FILES], \
        set(rows) ^ set(series) ^ {p.name for p in PATCH_FILES}
    patched = [workaround for patch in PATCHES for workaround in patch.workarounds]
    without = workarounds_without_a_patch()
    assert len(patched) == len(set(patched)), patched
    assert switch_table() == set(patched) | set(without), switch_table() ^ (set(patched) | set(without))
    assert not set(patched) & set(without) and all(without.values())
    for patch in PATCHES:
        assert patch.patch.with_suffix(".md").exists(), patch.patch
        assert patch.own_tests() or patch.proven_by, f"{patch.patch.name} adds no test to lmms-eval's test tree"
        assert bool(patch.workarounds) == bool(patch.suite_tests), patch
        assert all((ROOT / test.split("::")[0]).exists() for test in patch.suite_tests), patch.suite_tests
        applied_before = [other.patch for other in PATCHES[:PATCHES.index(patch)]]
        assert all(need in applied_before for need in patch.tested_with), f"{patch.name}: a patch it needs is later"


def test_a_patch_of_the_response_cache_says_it_rebases_on_the_rewrite_merged_after_the_release():
    """#1513 (merged after 0.7.3) rewrote lmms_eval/caching/response_cache.py's reads and merging: each text that
    changes that file says, under its patch line, that it rebases on it."""
    rewritten = [patch for patch in PATCHES if "lmms_eval/caching/response_cache.py" in patched_paths(patch.patch)]
    assert rewritten
    for patch in rewritten:
        text = patch.patch.with_suffix(".md").read_text(encoding="utf-8")
        assert re.search(r"^Rebases on: #1513 ", text, re.M), f"{patch.name} does not say it rebases on #1513"


def test_every_patch_applies_without_a_warning_alone_and_after_the_ones_before_it(tmp_path):
    scratch = scratch_lmms_eval(tmp_path / "lmms-eval")
    for patch in PATCHES:
        base = scratch_with(patch.needs, tmp_path / f"base-{patch.name}") if patch.needs else scratch
        checked = git_apply(patch.patch, base, "--check")
        assert (checked.returncode, checked.stderr) == (0, ""), \
            f"{patch.name} on lmms-eval as released (with {[need.name for need in patch.needs]}): {checked.stderr}"
    for patch in PATCHES:
        applied = git_apply(patch.patch, scratch)
        assert (applied.returncode, applied.stderr) == (0, ""), \
            f"{patch.name} after the ones before it: {applied.stderr}"


def test_a_pull_request_without_a_test_of_its_own_is_proven_by_an_equivalence_run():
    """Its row names the benchmark; docs/upstream/equivalence.py declares it with this patch among those it applies,
    and the end-to-end tier runs that comparison (tests/e2e/test_upstream_equivalence.py)."""
    from docs.upstream.equivalence import BENCHMARKS
    from tests.e2e.test_upstream_equivalence import EQUIVALENCE_RUNS

    proven = [patch for patch in PATCHES if patch.proven_by]
    for patch in proven:
        assert not patch.own_tests(), f"{patch.name} has its own tests: its row should not need an equivalence run"
        assert patch.proven_by in BENCHMARKS, f"{patch.name}: equivalence.py declares no {patch.proven_by}"
        assert patch.patch.name in BENCHMARKS[patch.proven_by].patches, (patch.name, BENCHMARKS[patch.proven_by])
        assert any(patch.proven_by in run for run in EQUIVALENCE_RUNS), \
            f"{patch.name}: the end-to-end tier does not run {patch.proven_by}"


def test_the_released_lmms_eval_fails_the_patches_tests_and_passes_them_with_every_patch_in_order(
        checkpoint_cache, tmp_path):
    scratch = scratch_lmms_eval(tmp_path / "lmms-eval")
    for patch in PATCHES:  # the patches' tests, lmms-eval as released
        assert git_apply(patch.patch, scratch, "--include=test/*").returncode == 0, patch.name
    workarounds = {workaround for patch in PATCHES for workaround in patch.workarounds}
    tests = patch_tests(PATCHES, scratch)
    released = run_tests(scratch, tests, workarounds, checkpoint_cache, tmp_path / "released.json")
    for patch in PATCHES:  # then every fix, in order
        assert git_apply(patch.patch, scratch, "--exclude=test/*").returncode == 0, patch.name
    patched = run_tests(scratch, tests, workarounds, checkpoint_cache, tmp_path / "patched.json")

    assert not not_passed(patched), not_passed(patched)
    assert "skipped" not in released.values(), {test: o for test, o in released.items() if o == "skipped"}
    for patch in TESTED:
        suite = [outcome for test in patch.suite_tests for outcome in outcomes_of(released, test)]
        assert not patch.suite_tests or (suite and set(suite) == {"failed"}), (patch.name, suite)
        own = [outcome for test in patch.own_tests() for outcome in outcomes_of(released, test)]
        assert "failed" in own, f"none of {patch.name}'s own tests fails on lmms-eval as released: {own}"
        assert all(outcomes_of(patched, test) for test in [*patch.suite_tests, *patch.own_tests()]), patch.name


@pytest.mark.parametrize("patch", TESTED, ids=[patch.name for patch in TESTED])
def test_a_patch_alone_passes_its_tests_with_its_workarounds_switched_off(patch, checkpoint_cache, tmp_path):
    scratch = scratch_with([*patch.tested_with, patch.patch], tmp_path / "lmms-eval")
    alone = run_tests(scratch, patch_tests([patch], scratch), set(patch.workarounds), checkpoint_cache,
                      tmp_path / "alone.json")
    assert not not_passed(alone), (patch.name, not_passed(alone))
    assert all(outcomes_of(alone, test) for test in [*patch.suite_tests, *patch.own_tests()]), patch.name
