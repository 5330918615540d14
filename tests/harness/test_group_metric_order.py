"""lmms-eval 0.7.3 applies a group's ``aggregate_metric_list`` entry to every member metric whose name *contains* the
entry's (``evaluator_utils.consolidate_group_results``: ``if metric_config["metric"] not in metric``), each matching
entry in turn, the last one's value kept. So ``score`` (unweighted) also aggregates ``micro_score``, and a group
reports ``micro_score`` weighted only because its own entry comes after ``score``'s. These tests pin the behaviour
(the first fails the day lmms-eval matches the name exactly; then the order no longer matters) and every suite
group's order."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.kit.group_means import group_metrics

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "tasks"
ISSUE = ROOT / "docs" / "upstream" / "issues" / "group-metric-substring.md"


def test_lmms_eval_aggregates_a_metric_by_every_entry_whose_name_it_contains(tmp_path, monkeypatch):
    """Two entries, ``score`` unweighted after ``micro_score`` weighted: ``micro_score`` comes out unweighted."""
    import tests.kit.group_means as group_means

    folder = tmp_path / "probe"
    folder.mkdir()
    (folder / "probe_group.yaml").write_text(yaml.safe_dump({
        "group": "probe_group", "task": ["probe_big", "probe_small"],
        "aggregate_metric_list": [{"metric": "micro_score", "aggregation": "mean", "weight_by_size": True},
                                  {"metric": "score", "aggregation": "mean", "weight_by_size": False}]}))
    monkeypatch.setattr(group_means, "TASKS_DIR", tmp_path)
    members = {"probe_big": {"score": 100.0, "micro_score": 100.0}, "probe_small": {"score": 0.0, "micro_score": 0.0}}
    group = group_metrics("probe", "probe_group", members, {"probe_big": 3, "probe_small": 1})["probe_group"]
    assert group["score"] == pytest.approx(50.0)
    assert group["micro_score"] == pytest.approx(50.0)  # weighted, it would be 75: "score"'s entry came last


def _entries(path: Path) -> list[str]:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)  # !function values are not needed here
    return [entry["metric"] for entry in yaml.load(path.read_text(), Loader=Loader).get("aggregate_metric_list", [])]


GROUP_FILES = sorted(path for path in TASKS.glob("*/*") if path.is_file() and "aggregate_metric_list" in
                     path.read_text(encoding="utf-8", errors="replace"))


@pytest.mark.parametrize("path", GROUP_FILES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_an_entry_comes_after_every_entry_whose_name_its_own_contains(path):
    names = _entries(path)
    early = [(later, name) for i, name in enumerate(names) for later in names[i + 1:]
             if later != name and later in name]
    assert not early, f"{path}: in each pair (shorter, longer) the longer comes first, so the shorter's rule wins: " \
                      f"{early}"


def test_the_upstream_issue_reproduces_what_it_says():
    """The reproduction in docs/upstream/issues/group-metric-substring.md, run as a user would paste it."""
    [snippet] = re.findall(r"```python\n(.*?)```", ISSUE.read_text(encoding="utf-8"), re.S)
    printed = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, check=True).stdout
    assert printed.split() == ["0.5", "0.5"] and "# 0.5 0.5: micro_score" in snippet
    swapped = snippet.replace('"micro_score", "aggregation": "mean", "weight_by_size": True}', "FIRST").replace(
        '"score", "aggregation": "mean", "weight_by_size": False}',
        '"micro_score", "aggregation": "mean", "weight_by_size": True}').replace(
        "FIRST", '"score", "aggregation": "mean", "weight_by_size": False}')
    printed = subprocess.run([sys.executable, "-c", swapped], capture_output=True, text=True, check=True).stdout
    assert printed.split() == ["0.5", "0.75"]  # "with the two entries swapped, 0.75"
