"""Each lineage's scorer against a transcription of its code (in ``lmms_egoplan.demo.robovqa``) on stress answers
(one-word yes / no, empty, long, Chinese punctuation); the suite's default scorer; the unsmoothed BLEU-4 trap."""

import hashlib

import pytest
import sacrebleu
from nltk.translate.bleu_score import sentence_bleu

from lmms_egoplan.demo.robovqa import (
    SIMILARITY_TOLERANCE,
    lineage_scores,
    mimo_transcribed,
    minilm,
    multinet_normalize_transcribed,
    multinet_script_normalize_transcribed,
    physbrain_transcribed,
    robomamba_transcribed,
)
from lmms_egoplan.robovqa import scoring
from tests.kit.group_means import group_metrics

STRESS = ["yes", "Yes.", "no", "Now it is done", "", "   ", "put packet on the table",
          "I think the robot should put the packet on the table and then close the drawer, then wait " * 8,
          "把包放在桌子上。", "yes，放好了！", "<think>maybe</think> no", "1- put packet on the table 2- done",
          "let me think... </think>\n\nyes",  # MiMo's filter: the text after the last </think> (no opening tag)
          "A: (put) packet: on the table",
          "I would say yes not no",  # RoboMamba: a one-word reference cuts the answer from its end (k up to 4)
          "open the drawer slowly"]  # MiMo: a three-word reference weighs its n-grams 0.33, not 1 / 3
DOCS = [{"question_type": "success", "answer": "yes", "tag": "<task:success:discrete:True>"},
        {"question_type": "discriminative_affordance", "answer": "no",
         "tag": "<task:affordance:discriminative:discrete:False>"},
        {"question_type": "next_step", "answer": "put packet on the table", "tag": "<task:planning:freeform>"},
        {"question_type": "next_five_steps", "answer": "1- put packet on the table 2- done",
         "tag": "<task:remaining5_planning_with_context20:freeform>"},
        {"question_type": "past_description", "answer": "open the drawer", "tag": "<task:past_description:freeform>"},
        # RoboMamba's gold is cut at a second ":" of its conversation value ("A: <reference>")
        {"question_type": "generative_affordance", "answer": "write the label: fragile",
         "tag": "<task:affordance:generative:positive:freeform>"}]
CASES = [(answer, doc) for answer in STRESS for doc in DOCS]


@pytest.mark.parametrize("answer, doc", CASES)
def test_mimo_is_its_code(answer, doc):
    ours = scoring.mimo_scores(answer, doc)
    theirs = mimo_transcribed(answer, doc["answer"])
    assert [ours[name] for name in ("mimo_score", "mimo_bleu1", "mimo_bleu2", "mimo_bleu3", "mimo_bleu4")] == \
        pytest.approx(list(theirs), abs=1e-12)


def test_mimo_scores_the_text_after_the_last_think_end_as_its_filter_does():
    """robovqa.yaml's AfterThinkFilter runs before robovqa_process_results: a thinking template's answer whose
    opening <think> sat in the prompt scores as its final text."""
    assert scoring.mimo_scores("let me think... </think>\n\nyes", DOCS[0])["mimo_score"] == 1.0
    assert scoring.mimo_scores("<think>a</think> no </think> yes", DOCS[0])["mimo_score"] == 1.0


def test_mimo_rewrites_now_into_no():
    assert scoring.mimo_scores("Now it is done", DOCS[1])["mimo_bleu1"] == pytest.approx(0.25)  # no it is done
    assert scoring.mimo_prompt("put packet on the table Q: possible right now?") == \
        "put packet on the table. is it possible right now? Please answer yes or no. "


@pytest.mark.parametrize("answer, doc", CASES)
def test_physbrain_is_its_code(answer, doc):
    reference = scoring.physbrain_reference(doc["answer"], doc)
    assert scoring.physbrain_scores(answer, doc)["physbrain_bleu"] == \
        pytest.approx(physbrain_transcribed(answer, reference), abs=1e-9)


def test_physbrain_rewrites_each_template():
    question, category = scoring.physbrain_question("put packet on the table Q: satisfied?",
                                                    "<task:success:discrete:True>")
    assert category == "success"
    assert question == ("put packet on the table. is it satisfied? Answer only yes or no, without explanation or "
                        "any other text.")
    assert scoring.physbrain_question("Q: what just happened?", "<task:past_description:freeform>")[0].startswith(
        "what just happened? Answer with only one short action phrase describing the completed action.")
    with pytest.raises(ValueError, match="Unsupported RoboVQA question template"):
        scoring.physbrain_question("Q: satisfied?", "<task:success:discrete:True>")  # no action before Q:


@pytest.mark.parametrize("answer, doc", CASES)
def test_robomamba_is_its_code(answer, doc):
    ours = scoring.robomamba_scores(answer, doc)
    assert [ours[f"robomamba_bleu{n}"] for n in range(1, 5)] == \
        pytest.approx(robomamba_transcribed(answer, f"A: {doc['answer']}"), abs=1e-12)


def test_robomamba_scores_against_the_reference_cut_at_its_first_colon_as_its_gold_is():
    """judge_robovqa's gold is ``conversations[1]['value'].split(":")[1]``: an answer that is the reference up to its
    colon scores full marks up to the gold's three words (BLEU-1..3), as against the whole reference it would not."""
    doc = DOCS[-1]
    assert scoring.robomamba_gold(doc["answer"]) == "write the label"
    assert scoring.robomamba_gold("put packet on the table") == "put packet on the table"
    scores = scoring.robomamba_scores("write the label", doc)
    assert [scores[f"robomamba_bleu{n}"] for n in (1, 2, 3)] == pytest.approx([1.0, 1.0, 1.0])
    whole = scoring.robomamba_scores("write the label", {**doc, "answer": "write the label fragile"})
    assert whole["robomamba_bleu1"] < 1.0


@pytest.mark.parametrize("answer", [*STRESS, "2", " 7. ", "12", "²", "two"])
def test_multinet_normalizes_as_its_code(answer):
    assert scoring.multinet_normalize(answer) == multinet_normalize_transcribed(answer)
    assert scoring.multinet_normalize(answer, digit_words=True) == multinet_script_normalize_transcribed(answer)


# ManifoldRG/MultiNet @d6fe80e definitions/robovqa_prompt.py: the SHA-256 of ROBOVQA_PROMPT's value
MULTINET_PROMPT_SHA256 = "b01885c6b7d085ba123c07c7b675574f187183f0ef8704c01d667815422c6265"


def multinet_question_transcribed(text_observation):
    """src/data_utils/openx_dataloader.py @d6fe80e lines 129-136, transcribed."""
    parts = text_observation.split('Q:', 1)
    if len(parts) == 1:
        text_observation_multi_embodiment = text_observation
    elif len(parts) == 2 and text_observation.startswith("Q:"):
        text_observation_multi_embodiment = f"Question: {parts[1].strip()}"
    else:
        text_observation_multi_embodiment = f"Task and Context: {parts[0].strip()}\n Question: {parts[1].strip()}"
    return text_observation_multi_embodiment


@pytest.mark.parametrize("question", [
    "current goal is: put the packet away Q: immediate next step?", "Q: what just happened?", "Q:", "no marker here",
    "goal: tidy up. Q: is it possible right now? Q: twice", " Q: leading space", "lower q: is not the marker"])
def test_multinet_shows_the_question_as_its_loader_does(question):
    assert scoring.multinet_question(question) == multinet_question_transcribed(question)


def test_multinet_sends_its_current_prompt():
    assert hashlib.sha256(scoring.MULTINET_SYSTEM_PROMPT.encode()).hexdigest() == MULTINET_PROMPT_SHA256


# Answers on which MultiNet's two scorers differ: a reference the script's exact match never meets (it keeps case and
# punctuation), a digit the script writes as a word, an answer whose punctuation the script drops before the cosine.
MULTINET_ANSWERS = [("1- put packet on the table 2- done", DOCS[3]), ("2", {**DOCS[2], "answer": "two"}),
                    ("Yes.", DOCS[0]), ("Put packet on the table.", DOCS[2]), ("open the door", DOCS[2]),
                    ("  ", DOCS[0])]


@pytest.mark.parametrize("scorer", ["script", "module"])
def test_multinet_scores_as_the_transcription_of_each_of_its_scorers(scorer):
    from lmms_egoplan.core.embeddings import SentenceEncoder

    encoder, sentence_model = SentenceEncoder(device="cpu"), minilm()
    suite = [scoring.multinet_scores(answer, {**doc, "multinet_scorer": scorer}, encoder)
             for answer, doc in MULTINET_ANSWERS]
    transcribed = [lineage_scores("multinet", answer, doc["answer"], doc["question_type"], sentence_model, scorer)
                   for answer, doc in MULTINET_ANSWERS]
    for ours, theirs in zip(suite, transcribed):
        assert ours == pytest.approx(theirs, abs=SIMILARITY_TOLERANCE)
    exact = [scores["multinet_exact_match"] for scores in suite]
    assert exact == ([0.0, 1.0, 1.0, 1.0, 0.0, 0.0] if scorer == "script" else [1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    assert suite[-1] == {"multinet_exact_match": 0.0, "multinet_similarity": 0.0, "multinet_invalid": 1.0}
    if scorer == "script":  # "yes" against "yes": punctuation dropped before the cosine
        assert suite[2]["multinet_similarity"] == pytest.approx(1.0, abs=SIMILARITY_TOLERANCE)


def test_the_default_reads_yes_and_no_strictly():
    assert [scoring.strict_yes_no(answer) for answer in
            ("yes", "Yes.", "  no, it is not", "Now it is done", "yes and no", "", "yes，放好了！", "nope", "**Yes**",
             "- no")] == \
        ["yes", "yes", "no", None, None, None, "yes", None, "yes", "no"]
    # an answer label is read past; "no" opening an abstention is no answer, not a denial
    assert [scoring.strict_yes_no(answer) for answer in
            ("Answer: yes", "<answer>no</answer>", "**Answer:** No.", "No idea.", "No way to tell from the image",
             "no-one can say", "No one knows", "No, the lid is on", "No the lid is on", "Answers vary")] == \
        ["yes", "no", "no", None, None, None, None, "no", "no", None]
    scores = scoring.default_scores("Yes.", DOCS[0])
    assert scores["score"] == 100.0 and scores["unextracted"] == 0.0
    assert scoring.default_scores("No idea.", DOCS[1]) == {**scoring.default_scores("", DOCS[1]), "length_ratio": 2.0}
    assert scoring.default_scores("Now it is done", DOCS[1])["unextracted"] == 1.0


def test_the_default_scores_the_answer_without_a_thinking_models_drafts():
    assert scoring.default_scores("◁think▷No... the lid is on.◁/think▷Yes.", DOCS[0])["score"] == 100.0
    cut = scoring.default_scores("<think>put packet on the table, I think, but", DOCS[2])  # cut: no answer
    assert cut["score"] == 0.0 and cut["length_ratio"] == 0.0
    drafted = scoring.default_scores("◁think▷open the door?◁/think▷put packet on the table", DOCS[2])
    assert drafted["score"] == pytest.approx(100.0) and drafted["length_ratio"] == pytest.approx(1.0)


def test_the_default_smooths_free_form_bleu():
    assert scoring.default_scores("put packet on the table", DOCS[2])["score"] == pytest.approx(100.0)
    short = scoring.default_scores("put packet", DOCS[2])
    assert 0 < short["score"] < 100 and short["length_ratio"] == pytest.approx(2 / 5)
    assert scoring.default_scores("", DOCS[2])["score"] == 0.0


def test_unsmoothed_bleu4_scores_a_right_one_word_answer_as_zero():
    trap = sentence_bleu([["yes"]], ["yes"])  # NLTK's default weights (0.25 x 4), no smoothing
    assert trap < 1e-200
    assert scoring.mimo_scores("yes", DOCS[0])["mimo_bleu4"] == 1.0  # MiMo's weights by reference length
    assert scoring.default_scores("yes", DOCS[0])["score"] == 100.0


def test_the_notebooks_call_fails_on_sacrebleu_2():
    with pytest.raises(TypeError):  # data_loading_and_eval.ipynb: sentence_bleu(answer, pred_answer)
        sacrebleu.sentence_bleu("A: yes", "This is a mock answer!")


@pytest.mark.parametrize("answer, doc", [(answer, doc) for answer in STRESS + ["Put Packet on the Table"]
                                         for doc in DOCS[2:]])
def test_the_default_bleu_is_sacrebleus_bleu4_with_13a_tokens_exp_smoothing_and_effective_order(answer, doc):
    """The default's free-form score spelled out, so that a change of sacrebleu's defaults shows here: n-grams up to
    4, 13a tokens, case kept, exponential smoothing, orders up to the sentence's; the answer as the hypothesis (the
    notebook's sentence_bleu has the same defaults and passes the reference as the hypothesis)."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(max_ngram_order=4, tokenize="13a", lowercase=False, smooth_method="exp", effective_order=True)
    assert scoring.default_scores(answer, doc)["score"] == \
        pytest.approx(bleu.sentence_score(answer.strip(), [doc["answer"]]).score, abs=1e-9)


def test_the_group_reports_the_macro_score_and_every_other_mean_over_questions():
    """lmms-eval's own group aggregation over the suite's group YAML (tests/kit/group_means.py): ``score`` the mean over
    the seven question types, the others over questions. Types (score, questions): next_step (100, 1) and the six
    others (0, 3): macro 100 / 7; micro 100 / (1 + 6 * 3) = 100 / 19."""
    types = ["next_step", "next_five_steps", "success", "discriminative_affordance", "generative_affordance",
             "future_prediction", "past_description"]
    metrics = ("score", "micro_score", "mimo_score", "physbrain_bleu", "robomamba_bleu4", "multinet_similarity")
    members = {f"robovqa_{kind}": dict.fromkeys(metrics, 100.0 if kind == "next_step" else 0.0) for kind in types}
    samples = {f"robovqa_{kind}": 1 if kind == "next_step" else 3 for kind in types}
    group = group_metrics("robovqa", "robovqa", members, samples)["robovqa"]
    assert group["score"] == pytest.approx(100 / 7)
    assert {metric: group[metric] for metric in metrics[1:]} == pytest.approx(dict.fromkeys(metrics[1:], 100 / 19))
