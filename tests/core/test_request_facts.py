"""A request's facts travel on it: how often its answer was asked again reaches the task's scoring with the answer's
text, through what lmms-eval does to that text (it strips a generation task's answers)."""

from lmms_eval.api.instance import Instance

from lmms_egoplan.core.request_facts import AnswerRetries, RetriedAnswer, answer_retries, mark_retries, retries_of


def test_a_requests_retries_are_marked_on_it_and_carried_by_its_answer_through_lmms_evals_strip():
    asked_again, asked_once = (Instance("generate_until", ("q", {}, None, doc, "task", "test"), 0,
                                        {"task": "task", "doc_id": doc, "repeats": 1}) for doc in (0, 1))
    mark_retries(asked_again, AnswerRetries(3, still_empty=True))
    mark_retries(asked_once, AnswerRetries())
    assert retries_of(asked_again) == (3, True) and retries_of(asked_once) == (0, False)
    answer = RetriedAnswer("  <answer></answer>\n", retries_of(asked_again))
    assert answer.strip() == "<answer></answer>" and answer_retries(answer.strip()) == (3, True)
    assert answer_retries("<answer>C</answer>") == (0, False)  # an answer asked once carries none
