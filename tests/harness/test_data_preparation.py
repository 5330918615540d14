"""`lmms-egoplan prepare` (issue 65 point 1), against a Hub on 127.0.0.1 serving the datasets in their real layout
through the Hub API that huggingface_hub asks: what the authors publish on the Hub is fetched (a gated one with the
user's token, once its conditions are accepted; a second run fetches nothing again; the revision recorded), what
needs a licence or an external tool is listed item by item with the official downloader's command, and one settings
file holds what a run needs. Nothing reaches the network."""

import json
import shutil
from pathlib import Path

import pytest

from lmms_egoplan.core.settings_file import read_settings_file
from lmms_egoplan.demo import egoplan
from lmms_egoplan.harness.data_check import check_benchmark
from lmms_egoplan.harness.data_preparation import NEEDED_FILE, prepare
from lmms_egoplan.suite import BENCHMARKS, benchmark
from tests.kit.loopback_hub import LoopbackHub

NAMES = [entry.name for entry in BENCHMARKS]
TOKEN = "hf_test_token_that_accepted_the_conditions"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The three Hub datasets of the suite's benchmarks, in their layouts, EgoIntent's gated."""
    with LoopbackHub() as served:
        bench2_records = served.add_the_suites_datasets(tmp_path, egointent_token=TOKEN)
        monkeypatch.setenv("HF_ENDPOINT", served.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "no-token"))
        served.bench2_records = bench2_records
        yield served


def test_prepare_fetches_the_hub_datasets_lists_the_rest_and_writes_the_settings_file(hub, tmp_path):
    root, settings = tmp_path / "data", tmp_path / "settings.yaml"
    said = []
    done = {each.name: each for each in prepare(BENCHMARKS, root, settings, judge={"judge_base_url": "http://j/v1"},
                                                say=said.append)}
    file = read_settings_file(settings, NAMES)
    # EgoThink: fetched, read as a local release at the revision recorded.
    thinking = hub.datasets["EgoThink/EgoThink"]
    assert done["egothink"].fetched["EgoThink/EgoThink"]["revision"] == thinking.sha
    assert file.prepared["egothink"]["hub"]["EgoThink/EgoThink"]["revision"] == thinking.sha
    assert file.benchmarks["egothink"] == {"source": "local", "data_root": str(root / "egothink" / "EgoThink")}
    assert all((root / "egothink" / "EgoThink" / name).read_bytes() == content
               for name, content in thinking.files.items())
    # EgoIntent: gated, and no token here: not fetched, said with what to do.
    assert "is gated: accept its access conditions at https://huggingface.co/datasets/py2279105943/EgoIntent" in \
        done["egointent"].failed["py2279105943/EgoIntent"]
    # EgoPlan-Bench2: its annotation file fetched, the Ego4D videos it names listed with the ego4d CLI's command.
    uids = sorted({record["sample_id"].split("_")[0] for record in hub.bench2_records})
    ego4d = done["egoplan_bench2"].plan.needed[0]
    assert ego4d.items == tuple(uids) and ego4d.present == 0
    assert (root / "egoplan_bench2" / "ego4d_video_uids.txt").read_text() == "".join(f"{uid}\n" for uid in uids)
    assert ego4d.commands == (f"ego4d --output_directory {root}/egoplan_bench2/ego4d --datasets full_scale "
                              f"--version v2 --aws_profile_name ego4d --video_uid_file "
                              f"{root}/egoplan_bench2/ego4d_video_uids.txt",)
    assert file.benchmarks["egoplan_bench2"]["ego4d_videos_root"] == f"{root}/egoplan_bench2/ego4d/v2/full_scale"
    # EgoPlan-Bench's annotation files and ActPlan-1K's archive: on Google Drive, gdown's commands.
    egoplan_needed = done["egoplan"].plan.needed[0]
    assert f"gdown --continue 1Hy-mWrtuDjuq29iCQxCQzk0htTJs8SHg -O {root}/egoplan/annotations/EgoPlan_validation.json" \
        in egoplan_needed.commands
    assert f"gdown --continue 1jw6I7NnAbcD7zgHKg5-w-fpXaBrkpB7h -O {root}/actplan/" in \
        done["actplan"].plan.needed[0].commands
    # RoboVQA: the 16-frame copy fetched, its frames archive listed with the command that unpacks it.
    frames16 = root / "robovqa" / "RoboVQA-16frames"
    assert file.benchmarks["robovqa"] == {"data_source": "frames16", "root": str(frames16)}
    assert done["robovqa"].plan.needed[0].commands == (f"tar -xf {frames16}/frames.tar -C {frames16}",)
    assert file.judge == {"judge_base_url": "http://j/v1"}
    needed = (root / NEEDED_FILE).read_text()
    assert f"- {len(uids)} videos (listed in {root}/egoplan_bench2/ego4d_video_uids.txt), 0 already in place" in needed
    assert said[-1] == f"Settings file (a run reads it; see docs/data.md): {settings}"


def test_a_second_run_fetches_only_what_is_missing_and_keeps_the_settings_given_before(hub, tmp_path, monkeypatch):
    root, settings = tmp_path / "data", tmp_path / "settings.yaml"
    chosen = [benchmark("egothink"), benchmark("egointent")]
    prepare(chosen, root, settings, judge={"judge_model": "my-judge"}, say=lambda line: None)
    first = dict(hub.file_requests)
    lost = root / "egothink" / "EgoThink" / "Activity" / "annotations.json"
    lost.unlink()
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # the user accepted EgoIntent's conditions and logged in
    done = prepare(chosen, root, settings, judge={}, say=lambda line: None)
    again = {name: count - first.get(name, 0) for name, count in hub.file_requests.items() if count != first.get(name)}
    release = hub.datasets["py2279105943/EgoIntent"].files
    assert again == {"EgoThink/EgoThink/Activity/annotations.json": 1,
                     **{f"py2279105943/EgoIntent/{name}": 1 for name in release}}
    assert not done[1].failed and done[1].fetched["py2279105943/EgoIntent"]["files"] == len(release)
    file = read_settings_file(settings, NAMES)
    assert file.judge == {"judge_model": "my-judge"}
    assert file.benchmarks["egointent"] == {"annotations": str(root / "egointent" / "EgoIntent"),
                                            "data_layout": "release"}


def test_the_lists_count_what_is_in_place_and_what_prepare_wrote_is_what_a_run_reads(hub, tmp_path):
    """EgoPlan-Bench once its annotation files are there: the EPIC-KITCHENS and Ego4D videos they name; EgoThink as
    fetched, read by check-data through the settings file: complete but for its counts (a subset of the 700)."""
    root, settings = tmp_path / "data", tmp_path / "settings.yaml"
    fixture = egoplan.build_fixture(tmp_path / "egoplan-fixture")
    annotations = root / "egoplan" / "annotations"
    shutil.copytree(fixture.annotation_dir, annotations)
    shutil.copytree(fixture.epic_root / "P01", root / "egoplan" / "EPIC-KITCHENS" / "P01")
    done = prepare([benchmark("egoplan"), benchmark("egothink")], root, settings, judge={}, say=lambda line: None)
    records = [*json.loads((annotations / "EgoPlan_validation.json").read_text()),
               *json.loads((annotations / "EgoPlan_test.json").read_text())]
    epic, ego4d = done[0].plan.needed
    assert epic.items == tuple(sorted({r["video_id"] for r in records if r["video_source"] == "EpicKitchens"}))
    assert ego4d.items == tuple(sorted({r["video_id"] for r in records if r["video_source"] == "Ego4D"}))
    assert epic.present == 1 and ego4d.present == 0  # P01_13's frames are in place
    assert "--rgb-frames --specific-videos $(paste -sd, " in epic.commands[1]
    check = check_benchmark(benchmark("egothink"), read_settings_file(settings, NAMES))
    assert check.counts[0].found == 24 and not check.missing and not check.problems
    assert not check.complete and check.summary() == "egothink: INCOMPLETE: questions: 24 of 700 questions (the " \
                                                     "release's count)"


def test_the_command_writes_the_judge_it_is_given_and_refuses_a_value_of_the_wrong_type(hub, tmp_path, capsys):
    from lmms_egoplan.cli import main

    settings = tmp_path / "settings.yaml"
    arguments = ["prepare", "egothink", "--root", str(tmp_path / "data"), "--settings", str(settings)]
    assert main([*arguments, "--judge_model", "my-judge", "--judge_timeout", "soon"]) == 2
    assert "judge_timeout: expected a number, got 'soon'" in capsys.readouterr().err and not settings.exists()
    # Named as the option the user typed (it used to be "_JUDGE_CONCURRENCY (metadata.judge_concurrency)"); a
    # backoff of inf or nan (which no range check catches) is no value to write into the file either.
    assert main([*arguments, "--judge_concurrency", "0", "--judge_backoff", "nan"]) == 2
    assert capsys.readouterr().err == ("lmms-egoplan prepare: --judge_backoff: expected a finite number, got 'nan'\n")
    assert main([*arguments, "--judge_concurrency", "0", "--judge_backend", "openaii"]) == 2
    assert capsys.readouterr().err == ("lmms-egoplan prepare: --judge_backend must be one of openai, azure, hf, got "
                                       "'openaii'; --judge_concurrency must be at least 1, got 0\n")
    assert not settings.exists()
    assert main([*arguments, "--judge_model", "my-judge", "--judge_timeout", "90", "--judge_cache_dir", "~/j"]) == 0
    assert read_settings_file(settings, NAMES).judge == {"judge_model": "my-judge", "judge_timeout": 90.0,
                                                         "judge_cache_dir": str(Path("~/j").expanduser())}


def test_a_root_or_settings_folder_that_cannot_be_made_stops_prepare_before_it_fetches(hub, tmp_path, capsys):
    """A file where a folder goes: the settings file's folder was mkdir's FileExistsError traceback once the data were
    fetched, --root a failure to write the list of what is needed."""
    from lmms_egoplan.cli import main

    blocking = tmp_path / "notes.txt"
    blocking.write_text("a file where a folder was to go")
    data, settings = tmp_path / "data", tmp_path / "settings.yaml"
    assert main(["prepare", "egothink", "--root", str(data), "--settings", str(blocking / "settings.yaml")]) == 1
    assert capsys.readouterr().err == (f"lmms-egoplan prepare: the folder of --settings {blocking}: cannot make this "
                                       f"folder ({blocking} is a file, where a folder goes)\n")
    assert main(["prepare", "egothink", "--root", str(blocking / "data"), "--settings", str(settings)]) == 1
    assert capsys.readouterr().err == (f"lmms-egoplan prepare: --root {blocking / 'data'}: cannot make this folder "
                                       f"({blocking} is a file, where a folder goes)\n")
    assert not data.exists() and not settings.exists()  # nothing fetched, nothing written


def test_prepare_adds_to_a_file_that_holds_other_benchmarks_and_reads_it_before_fetching_anything(hub, tmp_path):
    """A different set each time: EgoThink, then EgoPlan-Bench2 and ActPlan-1K into the same file, which keeps
    EgoThink's block and record and adds theirs; a file prepare cannot read stops it before any download."""
    from lmms_egoplan.core.settings_file import SettingsFileError

    root, settings = tmp_path / "data", tmp_path / "settings.yaml"
    prepare([benchmark("egothink")], root, settings, judge={"judge_model": "my-judge"}, say=lambda line: None)
    thinking = read_settings_file(settings, NAMES)
    prepare([benchmark("egoplan_bench2"), benchmark("actplan")], root, settings, judge={}, say=lambda line: None)
    file = read_settings_file(settings, NAMES)
    assert file.benchmarks["egothink"] == thinking.benchmarks["egothink"] and file.judge == {"judge_model": "my-judge"}
    assert file.prepared["egothink"] == thinking.prepared["egothink"]
    assert set(file.benchmarks) == {"egothink", "egoplan_bench2", "actplan"}
    assert file.prepared["egoplan_bench2"]["hub"]["qiulu66/EgoPlan-Bench2"]["revision"] == \
        hub.datasets["qiulu66/EgoPlan-Bench2"].sha

    settings.write_text(settings.read_text() + "egothinkk:\n  source: local\n")
    asked = dict(hub.file_requests)
    with pytest.raises(SettingsFileError, match=r"'egothinkk' \(line \d+\) names no block"):
        prepare([benchmark("egointent")], root, settings, judge={}, say=lambda line: None)
    assert hub.file_requests == asked and not (root / "egointent").exists()


def test_a_rerun_with_the_hub_unreachable_keeps_the_revisions_recorded(hub, tmp_path, monkeypatch):
    root, settings = tmp_path / "data", tmp_path / "settings.yaml"
    prepare([benchmark("egothink")], root, settings, judge={}, say=lambda line: None)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    said = []
    done = prepare([benchmark("egothink")], root, settings, judge={}, say=said.append)
    assert "EgoThink/EgoThink: the Hub could not be reached" in done[0].failed["EgoThink/EgoThink"]
    record = read_settings_file(settings, NAMES).prepared["egothink"]["hub"]["EgoThink/EgoThink"]
    assert record["revision"] == hub.datasets["EgoThink/EgoThink"].sha and record["files"] == len(
        hub.datasets["EgoThink/EgoThink"].files)


def test_a_fetched_file_changed_at_the_same_size_and_time_is_found_by_its_hash_and_fetched_again(hub, tmp_path):
    import os

    root, settings = tmp_path / "data", tmp_path / "settings.yaml"
    prepare([benchmark("egothink")], root, settings, judge={}, say=lambda line: None)
    changed = root / "egothink" / "EgoThink" / "Activity" / "annotations.json"
    original, stat = changed.read_bytes(), changed.stat()
    changed.write_bytes(original.replace(b"a", b"b", 1))
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert changed.read_bytes() != original and changed.stat().st_size == stat.st_size
    said = []
    prepare([benchmark("egothink")], root, settings, judge={}, say=said.append)
    assert changed.read_bytes() == original
    assert f"EgoThink/EgoThink: 1 files in {root / 'egothink' / 'EgoThink'} differed from the Hub's (their hash), " \
           f"fetched again: Activity/annotations.json" in said
