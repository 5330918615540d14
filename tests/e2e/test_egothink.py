"""EgoThink end to end: all twelve tasks through the real lmms-eval CLI with a loopback judge: scores equal those
recomputed from the audit trail, the papers' prompts, the judge recorded whole, rejudging, a second judge's
agreement."""

import hashlib
import itertools
import json
import sqlite3
import statistics
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace

import pytest

from lmms_egoplan.demo.egothink import write_release
from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, hash_rating, rating_responder
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.egothink.data import CAPABILITIES, DIMENSIONS, load_release_dimension

SECRET = "sk-egothink-SECRET-5e1d0c"


KEY_VARIABLE = "EGOTHINK_TEST_JUDGE_KEY"
FINGERPRINT = "fp_loopback_1"


TASKS = [f"ego_think_{d.name}" for d in DIMENSIONS.values()]


SHORT_PROMPT = "Please let your answer be as short as possible. Question: {} Short answer:"  # Table 5, GPT-4V


PLANNING_PROMPT = "Answer your question in a detailed and helpful way. Question: {} Short answer:"  # Table 6


def judge_env(judge, cache_dir, **extra):
    return {"EGOTHINK_JUDGE_BASE_URL": judge.base_url, "EGOTHINK_JUDGE_MODEL": "loopback-judge",
            "EGOTHINK_JUDGE_CACHE_DIR": str(cache_dir), "EGOTHINK_JUDGE_BACKOFF": "0.01", **extra}


def sometimes_unrated(call):
    """A judge that rates 0 / 0.5 / 1 by prompt, and for about one prompt in four writes no rating."""
    if int(hashlib.sha256(call.text.encode()).hexdigest(), 16) % 4 == 0:
        return Reply("I cannot tell without seeing the image.")
    return Reply(f"The assistant's answer differs from the reference. Rating: [[{hash_rating(call)}]]")


# Two questions a dimension, four for activity and forecasting: the release's proportions (100 and 50).
QUESTIONS = {"activity": 4, "forecasting": 4}
ANSWERS = 2 * 12 + 2 + 2


def questions(task: str) -> int:
    return QUESTIONS.get(task.removeprefix("ego_think_"), 2)


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("egothink")
    data = write_release(root / "data", per_dimension=2, counts=QUESTIONS)
    with ChatServer(sometimes_unrated, system_fingerprint=FINGERPRINT) as judge:
        run = run_lmms_eval(
            model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}", tasks=["ego_think"],
            output_dir=root / "out", check=False,
            env={"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data), KEY_VARIABLE: SECRET,
                 **judge_env(judge, root / "judge-cache", EGOTHINK_JUDGE_API_KEY_ENV=KEY_VARIABLE)}).judged("ego_think")
    return SimpleNamespace(run=run, judge=judge, root=root, data=data)


def audit_trail(output_dir: Path, task: str) -> list[dict]:
    files = sorted(output_dir.rglob(f"*_judgements_{task}.jsonl"))
    assert files, f"no audit trail for {task} under {output_dir}"
    return [json.loads(line) for line in files[-1].read_text().splitlines()]


def test_every_dimension_reports_the_score_recomputed_from_its_audit_trail(evaluation):
    run = evaluation.run
    total_failed = 0
    for task, dimension in zip(TASKS, DIMENSIONS.values()):
        records = audit_trail(run.output_dir, task)
        ratings = [r["rating"] for r in records if r["error"] is None]
        assert run.metric(task, "judged") == len(ratings)
        assert run.metric(task, "failed") == len(records) - len(ratings)
        expected = 100 * statistics.mean(ratings) if ratings else None
        if expected is None:
            assert run.metric(task, "score") is None  # no value: null in the results file, never a silent zero
        else:
            assert run.metric(task, "score") == pytest.approx(expected)
        total_failed += len(records) - len(ratings)
        # The judge rated this task's model outputs, with the Table 7 prompt around them.
        docs = load_release_dimension(evaluation.data, dimension)
        by_id = {r["id"]: r for r in records}
        assert by_id.keys() == {d["id"] for d in docs}
        for sample in run.samples(task):
            doc = docs[sample["doc_id"]]
            system, user = by_id[doc["id"]]["prompt"]
            assert system == {"role": "system", "content": "You are a helpful assistant."}
            assert user["content"].startswith("[Instruction]\nPlease act as an impartial judge")
            assert user["content"].endswith(
                f"[Question]\n{doc['question']}\n\n[The Start of Reference Answer]\n{doc['answer']}\n"
                f"[The End of Reference Answer]\n\n[The Start of Assistant's Answer]\n{sample['filtered_resps']}\n"
                f"[The End of Assistant's Answer]")
            assert by_id[doc["id"]]["judge_model"] == "openai:loopback-judge"
            assert by_id[doc["id"]]["served_model"] == "loopback-judge"
    assert total_failed > 0, "the scripted judge should have left some answers unrated"
    assert len(evaluation.judge.calls) == ANSWERS  # one call per answer, nothing judged twice


def test_capabilities_average_their_dimensions_and_the_overall_is_the_mean_of_all_twelve(evaluation):
    run = evaluation.run
    scores = {name: run.metric(f"ego_think_{name}", "score") for names in CAPABILITIES.values() for name in names}
    for capability, names in CAPABILITIES.items():
        group = f"ego_think_capability_{capability}"
        assert run.metric(group, "score") == pytest.approx(statistics.mean(scores[n] for n in names))
        assert run.metric(group, "judged") == sum(run.metric(f"ego_think_{n}", "judged") for n in names)
        assert run.metric(group, "failed") == sum(run.metric(f"ego_think_{n}", "failed") for n in names)
    # The paper's "Average": the mean of the 12 dimension scores (not of the 6 capabilities).
    assert run.metric("ego_think", "score") == pytest.approx(statistics.mean(scores.values()))
    capability_mean = statistics.mean(run.metric(f"ego_think_capability_{c}", "score") for c in CAPABILITIES)
    assert capability_mean != pytest.approx(statistics.mean(scores.values()))
    assert run.metric("ego_think", "judged") + run.metric("ego_think", "failed") == ANSWERS


def test_the_groups_mean_over_the_questions_weighs_each_dimension_by_its_questions(evaluation):
    run = evaluation.run
    groups = {f"ego_think_capability_{c}": names for c, names in CAPABILITIES.items()}
    groups["ego_think"] = [name for names in CAPABILITIES.values() for name in names]
    for group, names in groups.items():
        tasks = [f"ego_think_{name}" for name in names]
        expected = sum(run.metric(t, "score") * questions(t) for t in tasks) / sum(map(questions, tasks))
        assert run.metric(group, "micro_score") == pytest.approx(expected)
    # Activity and forecasting weigh twice as much as the others: not the paper's Average.
    assert run.metric("ego_think", "micro_score") != pytest.approx(run.metric("ego_think", "score"))


def test_the_report_gives_the_average_and_each_capability_an_interval_from_the_logged_judgements(evaluation, tmp_path):
    import csv

    from lmms_egoplan.cli import main
    from lmms_egoplan.report.intervals import bootstrap_interval, stratified_bootstrap_interval
    from lmms_egoplan.report.tables import THIS_RUN

    assert main(["report", str(evaluation.run.output_dir), "--output", str(tmp_path)]) == 0
    [row] = [row for row in csv.DictReader((tmp_path / "ego_think.csv").open()) if row["source"] == THIS_RUN]
    # Each dimension's ratings x 100 as the judge gave them (its audit trail), in the order of its logged samples (the
    # bootstrap's draws follow it), failed judgements left out.
    scored = {}
    for dimension in DIMENSIONS.values():
        task, docs = f"ego_think_{dimension.name}", load_release_dimension(evaluation.data, dimension)
        ratings = {r["id"]: r["rating"] for r in audit_trail(evaluation.run.output_dir, task)}
        in_order = [ratings[docs[sample["doc_id"]]["id"]] for sample in evaluation.run.samples(task)]
        scored[dimension.name] = [100 * rating for rating in in_order if rating is not None]
    columns = {"Average": list(scored),
               **{f"{capability.capitalize()} (capability)": names for capability, names in CAPABILITIES.items()}}
    for header, names in columns.items():
        strata = [scored[name] for name in names]
        found = (row[f"{header} (0-100) 95% low"], row[f"{header} (0-100) 95% high"])
        if all(len(set(stratum)) == 1 for stratum in strata):  # each dimension's judgements alike: no interval
            assert found == ("", "") and f"every logged sample of ego_think_{names[0]}" in row["notes"], header
        else:
            assert tuple(map(float, found)) == pytest.approx(stratified_bootstrap_interval(strata), rel=1e-9), header
            assert float(found[0]) <= float(row[f"{header} (0-100)"]) <= float(found[1])
    # The mean over the questions: each dimension weighed by all its logged questions, failed judgements included
    # (none failed: the pooled ratings' bootstrap; one failed: the stratified bootstrap weighted by the questions).
    logged = [len(evaluation.run.samples(f"ego_think_{name}")) for name in scored]
    strata = list(scored.values())
    expected = (bootstrap_interval([value for stratum in strata for value in stratum])
                if logged == list(map(len, strata)) else stratified_bootstrap_interval(strata, weights=logged))
    found = (row["Mean over questions (0-100) 95% low"], row["Mean over questions (0-100) 95% high"])
    assert tuple(map(float, found)) == pytest.approx(expected, rel=1e-9)
    assert float(found[0]) <= float(row["Mean over questions (0-100)"]) <= float(found[1])


def test_models_get_the_papers_prompts_greedy_decoding_and_longer_planning_answers(evaluation):
    run = evaluation.run
    for task, dimension in zip(TASKS, DIMENSIONS.values()):
        planning = dimension.capability == "Planning"
        docs = load_release_dimension(evaluation.data, dimension)
        prompt = PLANNING_PROMPT if planning else SHORT_PROMPT
        assert [s["input"] for s in run.samples(task)] == [prompt.format(d["question"]) for d in docs]
        generation = run.results["configs"][task]["generation_kwargs"]
        assert generation["max_new_tokens"] == (300 if planning else 30)
        assert generation["do_sample"] is False and generation["until"] == []
    assert "EgoThink Planning/navigation: 2 questions from" in run.log


def test_the_judge_key_is_used_but_written_nowhere(evaluation):
    assert {c.headers["authorization"] for c in evaluation.judge.calls} == {f"Bearer {SECRET}"}
    assert SECRET not in evaluation.run.log
    files = [p for p in evaluation.root.rglob("*") if p.is_file()]
    assert any(p.name.startswith("judgements.sqlite") for p in files)
    assert [p for p in files if SECRET.encode() in p.read_bytes()] == []
    recorded = evaluation.run.results["configs"]["ego_think_existence"]["metadata"]
    assert recorded["judge_api_key_env"] == KEY_VARIABLE and recorded["judge_model"] == "loopback-judge"


def test_rejudging_logged_outputs_with_another_judge_needs_no_model(evaluation, tmp_path, capsys):
    from lmms_egoplan.cli import main

    with ChatServer(rating_responder(lambda call: "1")) as other:
        assert main(["rejudge", str(evaluation.run.output_dir), "--output", str(tmp_path / "new"),
                     "--judge_base_url", other.base_url, "--judge_model", "other-judge", "--judge_api_key_env", "",
                     "--judge_cache_dir", str(tmp_path / "cache")]) == 0
    assert len(other.calls) == ANSWERS
    summary = json.loads(next((tmp_path / "new").glob("*_rejudged.json")).read_text())
    groups = {"ego_think", *(f"ego_think_capability_{d.capability.lower()}" for d in DIMENSIONS.values())}
    assert summary.keys() == set(TASKS) | groups  # the groups as the run reports them
    assert summary["ego_think"]["score"] == summary["ego_think"]["micro_score"] == 100.0
    assert summary["ego_think"]["judged"] == ANSWERS
    for task in TASKS:
        assert summary[task]["score"] == 100.0 and (summary[task]["judged"], summary[task]["failed"]) == (
            questions(task), 0)
        assert [r["rating"] for r in audit_trail(tmp_path / "new", task)] == [1.0] * questions(task)
        # The same prompts the first judge saw.
        assert ({json.dumps(r["prompt"]) for r in audit_trail(tmp_path / "new", task)}
                == {json.dumps(r["prompt"]) for r in audit_trail(evaluation.run.output_dir, task)})
    assert "ego_think_navigation" in capsys.readouterr().out


def test_rejudging_with_the_same_judge_and_cache_makes_no_calls(evaluation, tmp_path):
    from lmms_egoplan.cli import main

    with ChatServer(sometimes_unrated) as same:
        assert main(["rejudge", str(evaluation.run.output_dir), "--output", str(tmp_path),
                     "--judge_base_url", same.base_url, "--judge_model", "loopback-judge", "--judge_api_key_env", "",
                     "--judge_cache_dir", str(evaluation.root / "judge-cache")]) == 3  # they fail again
    # Valid ratings come from the cache; the answers the judge left unrated were not cached and are asked again.
    failed = sum(evaluation.run.metric(task, "failed") for task in TASKS)
    assert len(same.calls) == failed > 0
    summary = json.loads(next(tmp_path.glob("*_rejudged.json")).read_text())
    # Every score as the run reported it, lmms-eval's group means (over the dimensions, over the questions) included.
    groups = ("ego_think", *(f"ego_think_capability_{c}" for c in CAPABILITIES))
    for task, metric in itertools.product((*TASKS, *groups), ("score", "micro_score")):
        reported = evaluation.run.metric(task, metric)
        assert summary[task][metric] == (None if reported is None else pytest.approx(reported)), (task, metric)


def test_chat_backends_get_the_preset_as_a_system_turn_with_the_image(tmp_path):
    """lmms-eval's `openai` backend against the loopback server playing a chat model."""
    data = write_release(tmp_path / "data", per_dimension=1)
    with ChatServer(lambda call: Reply("Open the fridge.")) as model, \
            ChatServer(rating_responder(lambda call: "0.5")) as judge:
        run = run_lmms_eval(
            model="openai", model_args=f"model=fake-vlm,base_url={model.base_url},api_key=unused",
            tasks=["ego_think_existence", "ego_think_navigation"], output_dir=tmp_path / "out",
            env={"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data), "EGOTHINK_PROMPT_PRESET": "llava",
                 **judge_env(judge, tmp_path / "cache", EGOTHINK_JUDGE_API_KEY_ENV="")})
    assert len(model.calls) == 2
    systems = sorted(call.messages[0]["content"] if isinstance(call.messages[0]["content"], str)
                     else call.messages[0]["content"][0]["text"] for call in model.calls)
    assert [call.messages[0]["role"] for call in model.calls] == ["system", "system"]
    # LLaVA's system prompts: Table 6 (planning) and Table 5 (short answers).
    assert systems[0].endswith("Answer the questions in a detailed and helpful way.")
    assert systems[1].endswith("Keep your answer as short as possible! Keep your answer as short as possible!")
    for call in model.calls:
        parts = call.messages[-1]["content"]
        assert any(part["type"] == "image_url" for part in parts)
        assert call.text.startswith("[existence 0]") or call.text.startswith("[navigation 0]")
    assert {c.text.rsplit("[The Start of Assistant's Answer]\n", 1)[1].split("\n")[0] for c in judge.calls} == {
        "Open the fridge."}
    assert run.metric("ego_think_existence", "score") == run.metric("ego_think_navigation", "score") == 50.0


def test_the_judge_is_recorded_whole_in_the_results_each_judged_sample_and_each_audit_line(evaluation):
    from lmms_egoplan.egothink.protocol import JUDGE_PROMPT, JUDGE_SYSTEM_PROMPT

    prompt_hash = hashlib.sha256(f"{JUDGE_SYSTEM_PROMPT}\n\n{JUDGE_PROMPT}".encode()).hexdigest()[:16]
    judge = {"backend": "openai", "model": "loopback-judge", "revision": None, "rubric": "egothink",
             "rubric_version": "2", "prompt_hash": prompt_hash, "served_model": "loopback-judge",
             "system_fingerprint": FINGERPRINT}
    run = evaluation.run
    for task in TASKS:
        metadata = run.results["configs"][task]["metadata"]
        assert {name: metadata[f"judge_{name}"] for name in judge} == judge
        assert metadata["version"] == 4  # 2: another default judge; 3: reasoning blocks left out; 4: micro_score
        assert all(sample[metric]["judge"] == judge for sample in run.samples(task) for metric in ("score", "failed"))
        assert all(record["judge"] == judge and record["system_fingerprint"] == FINGERPRINT
                   for record in audit_trail(run.output_dir, task))


def second_judge(call):
    """A judge scripted to agree with the run's (``sometimes_unrated``) on about two answers in three: on the
    others it rates one level lower (0 stays 0); it rates every answer, those the run's judge left unrated too."""
    first = hash_rating(call)
    lower = {"1": "0.5", "0.5": "0", "0": "0"}
    rating = lower[first] if int(hashlib.sha256(f"second {call.text}".encode()).hexdigest(), 16) % 3 == 0 else first
    return Reply(f"Compared with the reference. Rating: [[{rating}]]")


def test_a_second_judge_is_compared_with_the_runs_without_touching_its_judgements(evaluation, tmp_path, capsys):
    import csv

    from sklearn.metrics import cohen_kappa_score

    from lmms_egoplan.cli import main

    run = evaluation.run

    def contents(path: Path):
        """A file's bytes; a judge cache's rows (SQLite's journal files come and go as connections close)."""
        if path.suffix != ".sqlite":
            return path.read_bytes()
        with closing(sqlite3.connect(path)) as database:
            return [database.execute(f"select * from {table} order by 1").fetchall() for (table,) in
                    database.execute("select name from sqlite_master where type = 'table' order by name")]

    kept = {path: contents(path) for path in [*run.output_dir.rglob("*"), *(evaluation.root / "judge-cache").rglob("*")]
            if path.is_file() and not path.name.endswith(("-wal", "-shm", "-journal"))}
    args = ["judge-agreement", str(run.output_dir), "--output", str(tmp_path / "agreement"), "--judge_base_url",
            "{url}",
            "--judge_model", "second-judge", "--judge_api_key_env", "", "--top", "5"]
    with ChatServer(second_judge) as second:
        assert main([arg.format(url=second.base_url) for arg in args]) == 0
        assert len(second.calls) == ANSWERS  # every answer, into a cache of its own
        assert main([arg.format(url=second.base_url) for arg in args]) == 0 and len(second.calls) == ANSWERS
    assert {path: contents(path) for path in kept} == kept  # the run's judgements and cache untouched
    assert (tmp_path / "agreement" / "judge-cache" / "judgements.sqlite").is_file()
    # What the two scripts make of the answers the run's judge rated, computed here from its audit trails.
    expected: dict[str, list[tuple[float, float]]] = {}
    for task in TASKS:
        for record in audit_trail(run.output_dir, task):
            if record["rating"] is not None:
                call = SimpleNamespace(text=record["prompt"][-1]["content"])
                second_rating = float(second_judge(call).text.split("[[")[1].split("]]")[0])
                expected.setdefault(task, []).append((record["rating"], second_rating))
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "agreement" / "judge_agreement.csv").open())}
    expected["all (egothink)"] = [pair for task in TASKS for pair in expected.get(task, [])]
    assert rows.keys() == expected.keys()
    for group, pairs in expected.items():
        first, second_ratings = [a for a, _ in pairs], [b for _, b in pairs]
        row = rows[group]
        assert int(row["answers"]) == len(pairs)
        assert float(row["first score"]) == pytest.approx(100 * statistics.mean(first), abs=1e-9)
        assert float(row["second score"]) == pytest.approx(100 * statistics.mean(second_ratings), abs=1e-9)
        assert float(row["exact agreement"]) == pytest.approx(sum(a == b for a, b in pairs) / len(pairs), abs=1e-12)
        assert float(row["first 95% low"]) <= float(row["first score"]) <= float(row["first 95% high"])
    overall = rows["all (egothink)"]
    first, second_ratings = zip(*expected["all (egothink)"])
    labels = [str(r) for r in (0.0, 0.5, 1.0)]
    assert float(overall["weighted kappa (linear)"]) == pytest.approx(cohen_kappa_score(
        [str(r) for r in first], [str(r) for r in second_ratings], labels=labels, weights="linear"), abs=1e-12)
    assert 0 < float(overall["weighted kappa (linear)"]) < 1 and float(overall["difference (second - first)"]) < 0
    disagreements = list(csv.DictReader((tmp_path / "agreement" / "judge_disagreements.csv").open()))
    gaps = [abs(float(d["first rating"]) - float(d["second rating"])) for d in disagreements]
    differing = sum(a != b for a, b in expected["all (egothink)"])
    assert len(disagreements) == min(5, differing) > 0 and gaps == sorted(gaps, reverse=True) and min(gaps) > 0
    out = capsys.readouterr().out
    assert ("weighted kappa (linear)" in out and "Left out: " in out
            and (tmp_path / "agreement" / "judge_agreement.png").is_file())
