"""Judge models that their provider shut down or will: the table (package data, with its sources) holds the
dates issue 39 names; no default of the suite and no example in its README or docs names such a model; a
server's "model not found" for one is explained with the date and what to use instead."""

import re
from datetime import date
from pathlib import Path

import pytest

from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, shut_down_model
from lmms_egoplan.egointent.protocol import EgoIntentSettings
from lmms_egoplan.egothink.protocol import EgoThinkSettings
from lmms_egoplan.judge.engine import RetiredJudgeError, preflight
from lmms_egoplan.judge.retirements import PROVIDER_NAMES, retirement, retirements, says_model_is_gone
from lmms_egoplan.judge.settings import DEFAULT_JUDGE_MODEL, PINNED_REVISIONS, JudgeSettings, JudgeSetupError

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_holds_the_announced_shut_downs_with_their_sources():
    for row in retirements():
        assert row.provider in PROVIDER_NAMES and row.source.startswith("https://")
        assert row.announced is None or row.announced < row.shut_down
    expected = {("gpt-4", "openai"): "2026-10-23", ("gpt-4-0613", "openai"): "2026-10-23",
                ("gpt-4-turbo", "openai"): "2026-10-23", ("gpt-4o-2024-05-13", "openai"): "2026-10-23",
                ("gpt-5", "openai"): "2026-12-11", ("o3", "openai"): "2026-12-11",
                **{(model, "openai"): "2027-01-14" for model in ("gpt-4o-2024-08-06", "gpt-4o-2024-11-20",
                                                                 "gpt-4o-mini",
                                                                  "gpt-4.1", "gpt-4.1-mini")},
                **{(model, "azure"): "2027-04-14" for model in ("gpt-4o-2024-08-06", "gpt-4o-2024-11-20", "gpt-4o-mini",
                                                                 "gpt-4.1", "gpt-4.1-mini")}}
    for (model, provider), shut_down in expected.items():
        assert retirement(model, provider).shut_down == date.fromisoformat(shut_down), (model, provider)
    assert retirement("gpt-4", "openai").announced == date(2026, 4, 22)
    assert retirement("GPT-4o-mini") is retirement("gpt-4o-mini", "openai")  # any provider: the first row
    assert retirement("gpt-4", "azure") is None and retirement(DEFAULT_JUDGE_MODEL) is None


def test_no_default_of_the_suite_names_a_model_its_provider_retired_or_will():
    # The suite-wide default (rejudge's and judge-agreement's too) and both judged benchmarks'.
    for settings in (JudgeSettings(), EgoThinkSettings(), EgoIntentSettings()):
        assert retirement(settings.judge_model) is None, type(settings).__name__
        assert (settings.judge_model == DEFAULT_JUDGE_MODEL
                and settings.judge_revision == PINNED_REVISIONS[DEFAULT_JUDGE_MODEL])
        assert settings.judge_base_url == "http://localhost:8000/v1" and settings.judge_api_key_env == ""
    # Another model drops the pinned revision (it is the default model's).
    assert JudgeSettings(judge_model="/models/other").judge_revision is None
    # The judge settings of rejudge (logs recording no judge) and judge-agreement when given no option.
    from lmms_egoplan.cli import _judge_settings, build_parser

    for command in ("rejudge", "judge-agreement"):
        argv = [command, "logs/", "--output", "out/"]
        settings = _judge_settings(build_parser(argv).parse_args(argv))
        assert settings.judge_model == DEFAULT_JUDGE_MODEL and retirement(settings.judge_model) is None


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("tasks/*/README.md")),
            *sorted(ROOT.glob("lm_eval_tasks/*/README.md"))]


FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
# A judge or API model set in prose: EGOTHINK_JUDGE_MODEL=x, --judge_model x, model=x, a settings-table default.
ASSIGNED = re.compile(r"(?:JUDGE_MODEL=|--judge_model[ =]|\bmodel=|^\| `judge_model` \| `)([^\s,`|\\]+)", re.MULTILINE)


def named_models(text: str) -> set[str]:
    """The retired (or retiring) models ``text`` names as whole words."""
    return {row.model for row in retirements()
            if re.search(rf"(?<![\w.<-]){re.escape(row.model)}(?![\w.>-])", text, re.IGNORECASE)}


def test_no_example_in_the_readme_or_the_docs_names_a_retired_model():
    found = {}
    for path in documents():
        text = path.read_text(encoding="utf-8")
        examples = "\n".join(FENCE.findall(text)) + "\n" + "\n".join(ASSIGNED.findall(text))
        if named := named_models(examples):
            found[str(path.relative_to(ROOT))] = sorted(named)
    assert found == {}
    assert named_models("EGOTHINK_JUDGE_MODEL=gpt-4 and --judge_model gpt-4o-2024-11-20") == {"gpt-4",
                                                                                              "gpt-4o-2024-11-20"}
    assert named_models("gpt-4v gpt-4o gpt-4.1-nano <gpt-4-deployment>") == set()  # other models, placeholders


def test_a_servers_model_not_found_is_explained_for_a_model_of_the_table(tmp_path):
    settings = JudgeSettings(judge_model="gpt-4o-2024-11-20", judge_cache_dir=None)
    with ChatServer(shut_down_model("gpt-4o-2024-11-20"), answer_preflight=False) as server:
        with pytest.raises(RetiredJudgeError, match=r"did not answer a test request: HTTP 404: The model") as raised:
            preflight(JudgeSettings(**{**vars(settings), "judge_base_url": server.base_url}))
    assert raised.value.retirement is retirement("gpt-4o-2024-11-20", "openai")
    assert raised.value.retirement.explain("EGOTHINK_JUDGE_MODEL", today=date(2026, 11, 24)) == (
        "OpenAI shuts down the judge model gpt-4o-2024-11-20 on 2027-01-14; set EGOTHINK_JUDGE_MODEL to a current "
        "model (OpenAI names its substitutes on https://platform.openai.com/docs/deprecations), or serve the suite's "
        "default open-weights judge Qwen/Qwen3-30B-A3B-Instruct-2507 locally (docs/judges.md)")
    assert retirement("gpt-3.5-turbo").explain("--judge_model", today=date(2027, 1, 1)).startswith(
        "OpenAI shut down the judge model gpt-3.5-turbo on 2026-10-23 (announced 2026-04-22); set --judge_model to "
        "OpenAI's substitute gpt-4.1-mini, or another current model")
    # A model the table does not know: the plain preflight error.
    with ChatServer(shut_down_model("my-model"), answer_preflight=False) as server:
        with pytest.raises(JudgeSetupError) as raised:
            preflight(JudgeSettings(judge_base_url=server.base_url, judge_model="my-model", judge_cache_dir=None))
    assert not isinstance(raised.value, RetiredJudgeError)


@pytest.mark.parametrize("status, code, message, gone", [
    (404, "model_not_found", "The model `gpt-4` does not exist or you do not have access to it.", True),
    (404, None, "The model `gpt-4` does not exist", True),
    (400, None, "The model gpt-4 has been deprecated", True),
    (404, "DeploymentNotFound", "The API deployment for this resource does not exist.", True),
    (401, "invalid_api_key", "Incorrect API key provided", False),
    (500, None, "The server had an error", False),
])
def test_what_counts_as_a_model_the_server_does_not_serve(status, code, message, gone):
    assert says_model_is_gone(status, code, message) is gone


def test_a_shut_down_model_answers_as_openai_does(tmp_path):
    with ChatServer(shut_down_model("gpt-4"), answer_preflight=False) as server:
        import openai

        client = openai.OpenAI(api_key="x", base_url=server.base_url, max_retries=0)
        with pytest.raises(openai.NotFoundError) as raised:
            client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.code == "model_not_found" and raised.value.body["type"] == "invalid_request_error"
    assert Reply().code is None


def test_the_docs_show_the_table_as_the_package_holds_it():
    text = (ROOT / "docs" / "judges.md").read_text(encoding="utf-8")
    shown = re.findall(r"^\| `([^`]+)` \| ([^|]+) \| (\S+) \| ([^|]+) \| ([^|]+) \| \[[^\]]+\]\(([^)]+)\) \|$", text,
                       re.MULTILINE)
    assert shown == [(row.model, row.provider_name, row.shut_down.isoformat(),
                      row.announced.isoformat() if row.announced else "not recorded",
                      f"`{row.replacement}`" if row.replacement else "not recorded",
                      row.source) for row in retirements()]
