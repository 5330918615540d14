"""Each task's card (``harness.task_cards``, one generated file per benchmark folder) is current: what
``python -m lmms_egoplan.harness.task_cards`` writes today is what the checkout holds. That the cards say what the
harnesses build (every metric of every task and group): ``tests/architecture/test_user_surface.py``."""

from pathlib import Path

from lmms_egoplan.harness.task_cards import CARDS_FILE, every_card

CHECKOUT = Path(__file__).resolve().parents[2]


def test_every_benchmark_folder_has_its_cards_and_each_is_current():
    cards = every_card()
    folders = {path.parent for tree in ("tasks", "lm_eval_tasks") for path in (CHECKOUT / tree).glob("*/*.yaml")}
    assert {path.parent for path in cards} == folders
    stale = [str(path) for path, text in cards.items() if not path.exists() or path.read_text() != text]
    assert stale == [], "run: .venv/bin/python -m lmms_egoplan.harness.task_cards"
    assert {path for tree in ("tasks", "lm_eval_tasks") for path in (CHECKOUT / tree).rglob(CARDS_FILE)} == set(cards)


def test_a_card_names_each_hook_by_its_dotted_name_and_each_setting_with_what_it_changes():
    egoplan = (CHECKOUT / "tasks" / "egoplan" / CARDS_FILE).read_text()
    section = egoplan.split("## `egoplan_val`")[1].split("\n## ")[0]
    assert "[`egoplan_val.yaml`](egoplan_val.yaml): `benchmark` egoplan, `task_spec` `validation`" in section
    assert "| each document's answers are scored | `process_results`: `lmms_egoplan.egoplan.task." in section
    assert "`lmms_egoplan.egoplan.task.load_docs(labelled=True, with_media=True)`" in section
    assert "| `accuracy` | `mean` | yes |" in section and "`lmms_egoplan.egoplan.task.breakdown_metrics`" in section
    assert "| `scored_tokens` | `EGOPLAN_SCORED_TOKENS` | `\"answer_and_end_of_turn\"` |  | Likelihood" in section
    assert "| `annotation_file` | `EGOPLAN_ANNOTATION_FILE` | `\"\"` | `\"EgoPlan_validation.json\"` |" in section
    cosmos = (CHECKOUT / "tasks" / "cosmos_reason1" / CARDS_FILE).read_text()
    assert ('- decoding (default settings, the spec sets it): `{"max_new_tokens": 1024, "temperature": 0.6, '
            '"top_p": 0.95, "do_sample": true, "until": []}`') in cosmos
