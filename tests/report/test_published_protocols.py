"""The published rows of every benchmark say how they were made (their protocol, field by field), the ones
transcribed from 2025-26 reports hold what their sources print, and the report sets a published row beside a run
only where they score alike (likelihood beside likelihood, generative beside generative), the others apart with the
field that differs named, and one model's several published values shown as their spread with sources."""

import json
import re

import pytest

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.report import write_report
from lmms_egoplan.report.layout import PROTOCOL_FIELDS, protocol_problems, published_rows
from lmms_egoplan.report.tables import APART, NOT_COMPARED, THIS_RUN
from lmms_egoplan.suite import report_faces
from tests.report.test_report import (
    EGOPLAN_SAMPLES,
    cosmos_reason1_run,
    egoplan_bench2_run,
    egoplan_run,
    read_csv,
    robovqa_run,
    write_lmms_eval_run,
)

FACES = report_faces()
ROWS = [row for face in FACES for row in face.published]


def test_every_published_row_of_every_benchmark_says_how_it_was_made():
    assert {row["benchmark"] for row in ROWS} >= {"egoplan_val", "egoplan_test", "egoplan_bench2", "ego_think",
                                                   "egointent", "actplan1k", "cosmos_reason1"}
    for row in ROWS:
        assert protocol_problems(row) == [], (row["benchmark"], row["model"])
        assert set(row["protocol"]) == set(PROTOCOL_FIELDS), row["model"]


def test_a_row_without_its_protocol_is_refused_naming_the_row_and_field(tmp_path, monkeypatch):
    row = {"benchmark": "b", "paper": "p", "table": "Table 1", "model": "m", "values": {"accuracy": 1.0},
           "protocol": {**{name: "not stated" for name in PROTOCOL_FIELDS}, "source_kind": "secondary"}}
    assert protocol_problems(row) == []
    del row["protocol"]["frames"]
    row["protocol"].update(scoring="ranked", made="someone")
    assert protocol_problems(row) == [
        "protocol: no field 'frames' (write \"not stated\" where the source is silent)",
        "protocol: scoring 'ranked' is none of likelihood, generative, not stated",
        "protocol: made 'someone' starts with none of 'ran it', 'copied from <source>', 'not stated'"]
    package = tmp_path / "transcribed"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "published_results.json").write_text(json.dumps([row]))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InputError, match=r"published_results.json: row 1 \(m\): protocol: no field 'frames'"):
        published_rows("transcribed")
    # a same_model naming no other row's model (a typo would leave the two rows unlinked, silently) is refused too
    complete = {**row, "protocol": {**{name: "not stated" for name in PROTOCOL_FIELDS}, "source_kind": "secondary"}}
    (package / "published_results.json").write_text(json.dumps([
        {**complete, "model": "Kimi-VL-A3B-16B", "same_model": "Kimi-VL-A3B"}, {**complete, "same_model": "m"}]))
    with pytest.raises(InputError, match=r"row 1 \(Kimi-VL-A3B-16B\): same_model 'Kimi-VL-A3B' names no model of "
                                         r"another row of 'b'; row 2 \(m\): same_model 'm' names no model of another"):
        published_rows("transcribed")


def _rows(paper, benchmark):
    return {row["model"]: row for row in ROWS if row["paper"].startswith(paper) and row["benchmark"] == benchmark}


def test_seed_bench_r1s_levels_are_counts_of_their_questions_as_its_readme_prints_them():
    """Levels 1-2 are EgoPlan-Bench Val's 2,432 EPIC-KITCHENS and 923 Ego4D questions, level 3 EgoPlan-Bench2's
    1,321 (its data_statistics.png): each printed accuracy is k of them, to the printed 0.01."""
    val, bench2 = _rows("SEED-Bench-R1", "egoplan_val"), _rows("SEED-Bench-R1", "egoplan_bench2")
    assert {model: (row["values"]["accuracy_epic_kitchens"], row["values"]["accuracy_ego4d"])
            for model, row in val.items()} == {"Qwen2-VL-7B-Instruct": (34.79, 34.02),
                                               "Qwen2-VL-7B-Instruct + SFT (SEED-Bench-R1)": (43.79, 44.10),
                                               "Qwen2-VL-7B-Instruct + GRPO (SEED-Bench-R1)": (46.01, 50.16)}
    for model, row in val.items():
        for metric, questions in (("accuracy_epic_kitchens", 2432), ("accuracy_ego4d", 923)):
            value = row["values"][metric]
            assert round(value * questions / 100) / questions * 100 == pytest.approx(value, abs=0.005), model
        assert "accuracy" not in row["values"]  # the README prints no accuracy over all of Val
    assert bench2["Qwen2-VL-7B-Instruct"]["values"]["accuracy"] == 31.57
    for model, row in bench2.items():
        value = row["values"]["accuracy"]
        assert round(value * 13.21) / 13.21 == pytest.approx(value, abs=0.005), model
        assert row["protocol"]["scoring"] == "generative" and row["protocol"]["items"] == "1321"


def test_the_2025_26_egoplan_bench2_rows_are_as_their_sources_print_them_and_copies_are_marked():
    mimo, hy = _rows("MiMo-Embodied", "egoplan_bench2"), _rows("HY-Embodied", "egoplan_bench2")
    assert {m: r["values"]["accuracy"] for m, r in mimo.items()} == {
        "MiMo-Embodied-7B": 43.0, "Qwen2.5-VL-7B": 39.67, "MiMo-VL-7B": 34.14, "Qwen-VL-Max": 44.68,
        "InternVL3.5-8B": 42.92}
    assert mimo["InternVL3.5-8B"]["protocol"]["made"].startswith("copied from")  # unstarred: not MiMo's framework
    assert {m: r["values"]["accuracy"] for m, r in hy.items()} == {
        "HY-Embodied-0.5 MoT-2B": 45.5, "Qwen3-VL-2B": 35.5, "Qwen3-VL-4B": 38.8, "RoboBrain 2.5-4B": 52.6,
        "MiMo-Embodied-7B": 39.9}
    # Hy-Embodied-VLM-1.0's README @711d267 (row EgoPlan2): its 0.5 MoT-2B cell is HY-Embodied-0.5's value again
    hy1 = _rows("Hy-Embodied-VLM-1.0", "egoplan_bench2")
    assert {m: r["values"]["accuracy"] for m, r in hy1.items()} == {
        "Hy-Embodied-VLM-1.0 A3B": 49.6, "Qwen3.6-A3B": 49.9, "Embodied-R1.5-8B": 61.0, "Cosmos3-Nano-8B": 42.6,
        "HY-Embodied-0.5 MoT-2B": 45.5}
    assert hy1["HY-Embodied-0.5 MoT-2B"]["protocol"]["made"].startswith("copied from HY-Embodied-0.5, README")
    assert hy1["HY-Embodied-0.5 MoT-2B"]["values"] == hy["HY-Embodied-0.5 MoT-2B"]["values"]
    assert [hy1[m]["protocol"]["made"] for m in ("Hy-Embodied-VLM-1.0 A3B", "Qwen3.6-A3B")] == [
        "ran it (the README's own model)", "not stated (the README does not say who ran its other models)"]
    # MiMo's unstarred cells equal to RoboBrain 2.0's Table 4 are copies: said on the original, not transcribed again
    robobrain = _rows("RoboBrain 2.0", "egoplan_bench2")
    assert "MiMo-Embodied's Table 2 prints the same value" in robobrain["GPT-4o-2024-11-20"]["note"]
    assert not any(model.startswith(("GPT-4o", "Gemini")) for model in mimo)
    # its "Gemini2.5-Pro 48.64" is Gemini 2.0 Flash's five-source mean in the Cosmos-Reason1 paper: not a Gemini 2.5
    # row
    cosmos = _rows("", "cosmos_reason1")
    assert not any(48.64 in row["values"].values() for row in cosmos.values())
    flash = cosmos["Gemini 2.0 Flash"]["values"]
    no_av = [flash[f"accuracy_{s}"] for s in ("bridgev2", "robovqa", "agibot", "holoassist", "robofail")]
    assert sum(no_av) / 5 == pytest.approx(48.64) and "48.64" in cosmos["Gemini 2.0 Flash"]["note"]


def test_the_robovqa_rows_are_as_their_sources_print_them_each_in_its_lineages_column_or_scorer_not_stated(tmp_path):
    """RoboMamba's own Table 1 in the RoboMamba lineage's column (its BLEU-1, which no column holds, in the notes);
    ThinkAct's and Fast-ThinkAct's pages name no scorer: their Overall, the mean of the BLEU-1..4 each row's notes
    give (to the printed 0.1), under "scorer not stated"; Fast-ThinkAct's GPT-4V and Magma-8B, ThinkAct's values
    again, not transcribed twice. In the report beside a run of the default protocol, each fills its column alone."""
    robomamba = _rows("RoboMamba", "robovqa")
    assert {m: r["values"] for m, r in robomamba.items()} == {
        "RoboMamba (2.7B, 224 px)": {"robomamba_bleu4": 42.8}, "RoboMamba (2.7B, 336 px)": {"robomamba_bleu4": 41.8},
        "TinyLLaVA (2.7B, fine-tuned on RoboVQA)": {"robomamba_bleu4": 29.6},
        "LLaMA-AdapterV2 (7B, fine-tuned on RoboVQA)": {"robomamba_bleu4": 8.1}}
    assert all(row["note"].startswith("the RoboMamba lineage (protocol robomamba)") for row in robomamba.values())
    thinkact, fast = _rows("ThinkAct", "robovqa"), _rows("Fast-ThinkAct", "robovqa")
    assert len(thinkact) == 9 and len(fast) == 8
    for row in (*thinkact.values(), *fast.values()):
        assert set(row["values"]) == {"unstated_score"} and row["note"].startswith("the page names no scorer")
        bleu = [float(value) for value in re.search(r"BLEU-1\.\.4 ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+) and",
                                                    row["note"]).groups()]
        assert row["values"]["unstated_score"] == pytest.approx(sum(bleu) / 4, abs=0.05 + 1e-9), row["model"]
    assert {"GPT-4V", "Magma"} <= set(thinkact) and not {"GPT-4V", "Magma-8B"} & set(fast)
    assert [thinkact["ThinkAct"]["protocol"]["made"], fast["Fast-ThinkAct-3B"]["protocol"]["made"],
            fast["ThinkAct-3B"]["protocol"]["made"]] == [
        "ran it (the page's own model)", "ran it (the page's own model)",
        "not stated (the page does not say who ran the other models)"]
    robovqa_run(tmp_path / "run")
    write_report([tmp_path / "run"], tmp_path / "report", FACES)
    rows = read_csv(tmp_path / "report" / "robovqa.csv")
    lineage, unstated, default = "RoboMamba BLEU-4 (%)", "Scorer not stated (0-100)", "Default, macro (0-100)"
    filled = {row["model"]: {column for column in (lineage, unstated, default) if row[column] not in ("", "—")}
              for row in rows if "RoboMamba" in row["source"] or "ThinkAct" in row["source"] or
              row["source"] == THIS_RUN}
    assert filled == {**{model: {lineage} for model in robomamba},
                      **{model: {unstated} for model in (*thinkact, *fast)}, "tiny-model": {default}}
    assert next(row for row in rows if row["model"] == "ThinkAct")[unstated] == "59.8"


def _egoplan_gen_run(folder, **kwargs):
    outcomes = [c for c, *_ in EGOPLAN_SAMPLES]
    metrics = {"accuracy": sum(outcomes) / len(outcomes), "predictions": len(outcomes)}
    samples = [{"doc_id": i, "accuracy": c} for i, c in enumerate(outcomes)]
    write_lmms_eval_run(folder, "20260101_100000", {"egoplan_val_gen": metrics}, {"egoplan_val_gen": samples}, **kwargs)


def test_published_rows_sit_beside_the_runs_that_score_as_they_did_the_others_apart(tmp_path):
    egoplan_run(tmp_path / "likelihood")
    write_report([tmp_path / "likelihood"], tmp_path / "report", FACES)
    rows = read_csv(tmp_path / "report" / "egoplan_val.csv")
    published = [row for row in rows if row["source"] != THIS_RUN]
    journal = [row for row in published if "journal" in row["source"] and row["model"] == "BLIP-2"]
    assert [row["task"] for row in journal] == ["egoplan_val"]  # likelihood beside likelihood
    seed = [row for row in published if "SEED-Bench-R1" in row["source"]]
    assert len(seed) == 3 and all(f"{APART}: scoring generative" in row["source"] and row["task"] == ""
                                  for row in seed)
    assert all(row["notes"].startswith(f"{APART}: scoring generative, the runs here egoplan_val likelihood")
               for row in seed)
    # the apart rows come after those beside the run
    order = [f"{APART}" in row["source"] for row in published]
    assert order == sorted(order)
    assert all("protocol: scoring " in row["notes"] for row in published)

    _egoplan_gen_run(tmp_path / "generative")
    write_report([tmp_path / "generative"], tmp_path / "report2", FACES)
    rows = read_csv(tmp_path / "report2" / "egoplan_val.csv")
    seed = [row for row in rows if "SEED-Bench-R1" in row["source"]]
    assert [row["task"] for row in seed] == ["egoplan_val_gen"] * 3 and not any(APART in r["source"] for r in seed)
    journal = [row for row in rows if "journal" in row["source"]]
    assert journal and all(APART in row["source"] for row in journal)  # nor likelihood rows beside a generative run


def test_one_models_several_published_values_show_their_spread_and_sources(tmp_path):
    egoplan_bench2_run(tmp_path / "run")
    write_report([tmp_path / "run"], tmp_path / "report", FACES)
    mimo = [row for row in read_csv(tmp_path / "report" / "egoplan_bench2.csv")
            if row["model"] == "MiMo-Embodied-7B"]
    assert len(mimo) == 3
    for row in mimo:
        assert row["notes"].startswith("3 published values of this model, 37.90 to 43.00: 43.00 (MiMo-Embodied "
                                       "technical report, Table 2); 39.90 (HY-Embodied-0.5, README); 37.90 "
                                       "(PhysBrain 1.5, project page results table)"), row["notes"]
    # rows that fill another column only (a "Cosmos" mean their sources do not name): their spread in that column,
    # and none with the rows of a mean they do name (MiMo's five sources without AV)
    cosmos_reason1_run(tmp_path / "cosmos")
    write_report([tmp_path / "cosmos"], tmp_path / "cosmos_report", FACES)
    rows = read_csv(tmp_path / "cosmos_report" / "cosmos_reason1.csv")
    unstated = "Cosmos, mean not stated (%)"
    r15 = [row for row in rows if row["model"] == "Embodied-R1.5-8B"]
    assert sorted(float(row[unstated]) for row in r15) == [67.5, 68.6]
    assert all(row["notes"].startswith(f"2 published values of this model in '{unstated[:-4]}', 67.50 to 68.60: 67.50 "
                                       "(PhysBrain 1.5, project page results table); 68.60 (Hy-Embodied-VLM-1.0, "
                                       "README)") for row in r15)
    assert all(row[unstated] in ("", "—") for row in rows if row["source"] == THIS_RUN)
    mimo = [row for row in rows if row["model"] == "MiMo-Embodied-7B"]
    assert len(mimo) == 2 and not any("published values" in row["notes"] for row in mimo)
    # two names of one model (EgoIntent's leaderboard and its paper's "-16B"), linked by the row's same_model
    write_lmms_eval_run(tmp_path / "intent", "20260101_120000", {"egointent": {"overall": 30.0}})
    write_report([tmp_path / "intent"], tmp_path / "intent_report", FACES)
    kimi = [row for row in read_csv(tmp_path / "intent_report" / "egointent.csv") if row["model"].startswith("Kimi")]
    assert {row["model"] for row in kimi} == {"Kimi-VL-A3B-Thinking-2506", "Kimi-VL-A3B-Thinking-2506-16B"}
    assert all(row["notes"].startswith("2 published values of this model, 22.27 to 25.09: 25.09 (EgoIntent") for row
               in kimi), [row["notes"] for row in kimi]


def test_a_row_whose_stated_frames_or_items_differ_from_the_runs_is_shown_apart_naming_the_field(tmp_path):
    # MiMo-Embodied's rows state 2 fps (its README's preprocessing); a run at the suite's 4 fps is not their protocol
    cosmos_reason1_run(tmp_path / "four_fps", settings={"fps": 4.0})
    write_report([tmp_path / "four_fps"], tmp_path / "report_four", FACES)
    rows = read_csv(tmp_path / "report_four" / "cosmos_reason1.csv")
    mimo = [row for row in rows if "MiMo-Embodied" in row["source"]]
    assert mimo and all(row["source"].endswith(f"{APART}: frames 2 fps") and row["task"] == "" for row in mimo)
    assert all(row["notes"].startswith(f"{APART}: frames 2 fps, the run's 4 fps") for row in mimo)
    # the paper states no frame rate (the benchmark script that samples 4 fps came later): its rows sit beside a run
    # at 2 fps as beside one at 4 fps
    cosmos_reason1_run(tmp_path / "two_fps", settings={"fps": 2.0})
    write_report([tmp_path / "two_fps"], tmp_path / "report", FACES)
    rows = read_csv(tmp_path / "report" / "cosmos_reason1.csv")
    paper = [row for row in rows if "arXiv 2503.15558" in row["source"]]
    assert paper and all(APART not in row["source"] and row["task"] == "cosmos_reason1" for row in paper)
    # MiMo's rows state 2 fps: beside the run, saying what could not be compared (no run here states thinking)
    mimo = [row for row in rows if "MiMo-Embodied" in row["source"]]
    assert mimo and all(row["task"] == "cosmos_reason1" and APART not in row["source"] for row in mimo)
    assert all(row["notes"].startswith(f"{NOT_COMPARED}: thinking (the row's words not read as a value; not stated by "
                                       "the run), parser (the row's words not read as a value; not stated by the run), "
                                       "items (not stated by either)") for row in mimo)

    # SEED-Bench-R1's Val rows count 3,355 questions: beside a run of the whole split, apart from a run of another
    for name, original in (("whole", 3355), ("other", 40)):
        _egoplan_gen_run(tmp_path / name, n_samples={"egoplan_val_gen": {"original": original, "effective": 12}})
        write_report([tmp_path / name], tmp_path / f"report_{name}", FACES)
    seed = {name: [row for row in read_csv(tmp_path / f"report_{name}" / "egoplan_val.csv")
                   if "SEED-Bench-R1" in row["source"]] for name in ("whole", "other")}
    assert len(seed["whole"]) == 3 and all(row["task"] == "egoplan_val_gen" for row in seed["whole"])
    assert len(seed["other"]) == 3 and all(row["source"].endswith(f"{APART}: items 3355") for row in seed["other"])
    assert all(f"{APART}: items 3355, the run's 40" in row["notes"] for row in seed["other"])
