"""core.errors.DatasetProblems: every problem of a dataset in one error, each record's first problem collected, the
list capped."""

from __future__ import annotations

import pytest

from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.media import MissingMedia


class RecordError(InputError):
    pass


def test_each_records_first_problem_is_collected_and_all_are_raised_together_the_list_capped():
    problems = DatasetProblems("the test data", RecordError)
    kept = []
    for number in range(25):
        with problems.collected():
            if number % 5 == 0:
                raise RecordError(f"data.json, record {number}: field x must be text")
            kept.append(number)
    kept = problems.without_repeats([*kept, 3, 4], lambda number: number, where="data.json", field="id", why="keys")
    assert kept == [number for number in range(25) if number % 5 and number not in (3, 4)]
    for number in range(20):
        problems.add(f"sample {number}: image not found")
    with pytest.raises(RecordError) as error:
        problems.raise_if_any("Check DATA_ROOT")
    lines = str(error.value).splitlines()
    assert lines[0] == "26 problems in the test data:" and len(lines) == 1 + DatasetProblems.LISTED + 1
    assert lines[1:6] == [f"  data.json, record {number}: field x must be text;" for number in range(0, 25, 5)]
    assert lines[6] == "  data.json: id(s) 3, 4 appear more than once; each record needs its own (keys);"
    assert lines[-1] == "  ... and 6 more. Check DATA_ROOT"
    # Every one of them, for whoever lists them all (lmms-egoplan check-data's report)
    assert len(error.value.problems) == 26 and error.value.problems[-1] == "sample 19: image not found"


def test_one_problem_is_the_error_as_it_is_and_none_raises_nothing():
    problems = DatasetProblems("the test data", RecordError)
    problems.raise_if_any("advice")
    with problems.collected():
        raise RecordError("data.json, record 2: field image_path must be a list")
    with pytest.raises(RecordError, match=r"^data\.json, record 2: field image_path must be a list$"):
        problems.raise_if_any()
    with pytest.raises(ValueError, match="not a record problem"):  # other errors are not collected
        with problems.collected():
            raise ValueError("not a record problem")


def test_unusable_media_are_problems_with_the_skip_settings_advice_or_left_out_when_skipped():
    unusable = [MissingMedia(7, "/data/7.mp4", "clip not found: /data/7.mp4; check BENCH_ROOT"),
                MissingMedia("q9", "/data/9.mp4", "video is empty (0 bytes): /data/9.mp4; check BENCH_ROOT")]
    problems = DatasetProblems("the test data", RecordError)
    problems.add("data.json, record 3: field answer must be text")
    with pytest.raises(RecordError) as error:
        problems.unusable_media(unusable, skip=False, label="Bench", skip_setting="BENCH_SKIP_MISSING",
                                media="clips")
    assert error.value.problems == ("data.json, record 3: field answer must be text",
                                    "Bench sample 7: clip not found: /data/7.mp4; check BENCH_ROOT",
                                    "Bench sample q9: video is empty (0 bytes): /data/9.mp4; check BENCH_ROOT")
    assert str(error.value).endswith("Set BENCH_SKIP_MISSING to true to skip the questions whose clips are unusable "
                                     "instead (they are counted in the skipped_samples metric)")
    # Skipped: left out, and the data's other problems are raised without advice about media
    problems = DatasetProblems("the test data", RecordError)
    assert problems.unusable_media(unusable, skip=True, label="Bench", skip_setting="BENCH_SKIP_MISSING") == {7, "q9"}
    problems.add("data.json, record 3: field answer must be text")
    with pytest.raises(RecordError, match=r"^data\.json, record 3: field answer must be text$"):
        problems.unusable_media(unusable, skip=True, label="Bench", skip_setting="BENCH_SKIP_MISSING")
    assert DatasetProblems("the test data", RecordError).unusable_media(
        [], skip=False, label="Bench", skip_setting="BENCH_SKIP_MISSING") == set()
