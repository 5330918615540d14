"""The settings file a run reads (core.settings_file, issue 65 point 1): which file (LMMS_EGOPLAN_SETTINGS, else the
default path where it exists), its blocks, and its place among the sources of a setting: defaults < YAML metadata <
the file < <PREFIX>_<SETTING> variables, every value checked and any key that names nothing refused, naming the file."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from lmms_egoplan.core.settings import SettingsError, resolve_settings
from lmms_egoplan.core.settings_file import (
    SETTINGS_VARIABLE,
    SettingsFile,
    SettingsFileError,
    read_settings_file,
    run_settings_file,
    settings_path,
    write_settings_file,
)

BENCHMARKS = ("bench", "other")


@dataclass(frozen=True)
class BenchSettings:
    data_root: str = ""
    num_frames: int = 8
    judge_model: str = "default-judge"
    sample_fps: float = 6.0


def written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return path


def resolved(file: SettingsFile, metadata=None, environ=None) -> BenchSettings:
    return resolve_settings(BenchSettings, task="bench_task", metadata=metadata or {}, env_prefix="BENCH",
                            environ=environ or {}, settings_file=file, benchmark="bench")


def test_defaults_then_yaml_then_the_file_then_variables(tmp_path):
    file = read_settings_file(written(tmp_path, "judge:\n  judge_model: file-judge\n"
                                                "bench:\n  data_root: /data/bench\n  num_frames: 16\n"), BENCHMARKS)
    settings = resolved(file, metadata={"num_frames": 4, "sample_fps": 2.0}, environ={"BENCH_NUM_FRAMES": "32"})
    # data_root and the judge: the file's; sample_fps: the YAML's (the file says nothing of it); num_frames: the
    # variable's, over the file's, over the YAML's.
    assert settings == BenchSettings(data_root="/data/bench", num_frames=32, judge_model="file-judge", sample_fps=2.0)
    assert resolved(file, metadata={"num_frames": 4}).num_frames == 16
    assert resolved(SettingsFile(), metadata={"num_frames": 4}).num_frames == 4


@dataclass(frozen=True)
class UnjudgedSettings:
    data_root: str = ""


def test_the_judge_block_is_a_judged_benchmarks_whole_and_no_unjudged_ones(tmp_path):
    path = written(tmp_path, "judge: {judge_model: j, judge_modle: typo}\nbench: {data_root: /d}\n")
    with pytest.raises(SettingsError, match=rf"settings file {path}: judge.judge_modle \(line 1\) names no setting; "
                                            r"did you mean judge_model\?"):
        resolved(read_settings_file(path, BENCHMARKS))
    unjudged = resolve_settings(UnjudgedSettings, task="t", metadata={}, env_prefix="BENCH", environ={},
                                settings_file=read_settings_file(path, BENCHMARKS), benchmark="bench")
    assert unjudged == UnjudgedSettings(data_root="/d")


def test_a_benchmarks_block_is_over_the_judge_block(tmp_path):
    file = read_settings_file(written(tmp_path, "judge: {judge_model: shared}\nbench: {judge_model: own}\n"
                                                "other: {data_root: /x}\n"), BENCHMARKS)
    assert resolved(file).judge_model == "own"


def test_a_value_of_the_wrong_type_or_a_key_that_names_no_setting_is_refused_naming_the_file(tmp_path):
    path = written(tmp_path, "bench:\n  num_frames: many\n")
    with pytest.raises(SettingsError, match=rf"settings file {path}: bench.num_frames \(line 2\): expected an integer"):
        resolved(read_settings_file(path, BENCHMARKS))
    path.write_text("bench:\n  num_frame: 4\n")
    with pytest.raises(SettingsError, match=rf"settings file {path}: bench.num_frame \(line 2\) names no setting; did "
                                            r"you mean "
                                            r"num_frames\?"):
        resolved(read_settings_file(path, BENCHMARKS))


@pytest.mark.parametrize("text, error", [
    ("egoplan9: {a: 1}\n", r"'egoplan9' \(line 1\) names no block; known: bench, expected_counts, judge, other, "
                           "prepared"),
    ("bench: [1, 2]\n", r"bench \(line 1\) must be a mapping"),
    ("expected_counts: {bench: {val: -1}}\n",
     r"expected_counts.bench \(line 1\) must map a benchmark's parts to record counts"),
    ("expected_counts:\n  bench: {val: true}\n", r"expected_counts.bench \(line 2\) must map .* got \{'val': True\}"),
    ("", "is empty: give it the blocks docs/data.md shows"),
    ("# nothing but a comment\n", "is empty"),
    ("bench:\n  num_frames: 4\nother: {}\nbench:\n  num_frames: 8\n", r"bench is given twice \(lines 1 and 4\)"),
    ("bench:\n  num_frames: 4\n  data_root: /d\n  num_frames: 8\n",
     r"bench.num_frames is given twice \(lines 2 and 4\); YAML would take the last silently"),
    ("bench: {a: [\n", "cannot be read"),
])
def test_a_file_that_cannot_be_read_as_blocks_says_what_is_wrong(tmp_path, text, error):
    with pytest.raises(SettingsFileError, match=error):
        read_settings_file(written(tmp_path, text), BENCHMARKS)


def test_a_boolean_where_a_number_goes_is_refused_naming_the_file_the_key_and_the_line(tmp_path):
    path = written(tmp_path, "# a comment\nbench:\n  data_root: /d\n  sample_fps: true\n")
    with pytest.raises(SettingsError, match=rf"settings file {path}: bench.sample_fps \(line 4\): expected a number, "
                                            r"got true \(true/false is no number\)"):
        resolved(read_settings_file(path, BENCHMARKS))
    with pytest.raises(SettingsError, match=r"metadata.num_frames: expected an integer, got false"):
        resolved(SettingsFile(), metadata={"num_frames": False})


@pytest.mark.parametrize("text, error", [
    ("bench:\n  sample_fps: .inf\n", r"bench.sample_fps \(line 2\): expected a finite number, got inf"),
    ("bench:\n  sample_fps: .nan\n", r"bench.sample_fps \(line 2\): expected a finite number, got nan"),
    ("bench:\n  num_frames: .inf\n", r"bench.num_frames \(line 2\): expected an integer, got inf"),  # no traceback
])
def test_a_value_that_is_no_finite_number_is_refused_naming_the_file_the_key_and_the_line(tmp_path, text, error):
    """nan passes every range check and inf every minimum (a judge's backoff, a frame rate): neither is a value."""
    path = written(tmp_path, text)
    with pytest.raises(SettingsError, match=rf"settings file {path}: {error}"):
        resolved(read_settings_file(path, BENCHMARKS))
    with pytest.raises(SettingsError, match=r"environment variable BENCH_SAMPLE_FPS: expected a finite number, got "
                                            r"'-inf'"):
        resolved(SettingsFile(), environ={"BENCH_SAMPLE_FPS": "-inf"})


def test_an_expected_counts_part_the_benchmark_lacks_is_refused_naming_its_line(tmp_path):
    path = written(tmp_path, "expected_counts:\n  bench:\n    val: 3\n    tset: 2\n")
    file = read_settings_file(path, BENCHMARKS)
    file.check_counted_parts("bench", ["val", "tset"])
    file.check_counted_parts("other", ["val"])
    with pytest.raises(SettingsFileError, match=rf"settings file {path}: expected_counts.bench.tset \(line 4\): bench "
                                                r"has no part 'tset'; its parts: val, test"):
        file.check_counted_parts("bench", ["val", "test"])


def test_which_file_a_run_reads(tmp_path):
    default = tmp_path / "config" / "lmms-egoplan" / "settings.yaml"
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    assert settings_path(environ) is None  # no default file: none
    write_settings_file(default, SettingsFile(benchmarks={"bench": {"data_root": "/d"}}), writer="a test")
    assert settings_path(environ) == default
    assert run_settings_file(BENCHMARKS, environ).benchmarks == {"bench": {"data_root": "/d"}}
    assert settings_path({**environ, SETTINGS_VARIABLE: ""}) is None  # empty: none, whatever the default
    named = tmp_path / "named.yaml"
    assert settings_path({**environ, SETTINGS_VARIABLE: str(named)}) == named
    with pytest.raises(SettingsFileError, match=f"{SETTINGS_VARIABLE} names {named}, which is no file"):
        run_settings_file(BENCHMARKS, {SETTINGS_VARIABLE: str(named)})


def test_a_written_file_reads_back_and_a_merge_replaces_whole_blocks(tmp_path):
    path = tmp_path / "s.yaml"
    first = SettingsFile(path, {"bench": {"data_root": "/a", "num_frames": 4}, "other": {"data_root": "/o"}},
                         {"judge_model": "j"}, {"bench": {"val": 8}}, {"bench": {"hub": {"r/x": {"revision": "abc"}}}})
    write_settings_file(path, first, writer="a test")
    assert path.read_text().startswith("# lmms-egoplan settings")
    assert read_settings_file(path, BENCHMARKS) == first
    merged = first.merged(SettingsFile(path, {"bench": {"data_root": "/b"}}))
    assert merged.benchmarks == {"bench": {"data_root": "/b"}, "other": {"data_root": "/o"}}
    assert merged.judge == {"judge_model": "j"} and merged.expected_counts == {"bench": {"val": 8}}
