"""RoboVQA's scorers: the suite's ``default`` and each lineage that publishes numbers, as its code scores
(quoted file@commit in each function; tests/robovqa/test_scoring.py holds the lineages' functions transcribed
and compares on stress answers). There is no runnable official automatic protocol: the paper rates answers by
hand, and the repository's notebook calls ``sacrebleu.sentence_bleu(answer, pred_answer)``, the reference as
hypothesis and a string where sacrebleu 2.x wants a list (a TypeError on sacrebleu 2.6).

The trap of unsmoothed BLEU-4: NLTK's ``sentence_bleu`` of a right one-word answer ("yes" against "yes") with the
default weights is about 1.8e-231 (no 2-, 3-, 4-grams), so any unsmoothed BLEU-4 scores right yes / no answers as
zero. MiMo's scorer avoids it by weights adapted to the reference length; the suite's ``default`` scores yes / no
questions by exact accuracy and smooths the BLEU of free-form answers."""

from __future__ import annotations

import re
import string

from lmms_egoplan.core.embeddings import SentenceEncoder
from lmms_egoplan.core.reasoning import without_reasoning
from lmms_egoplan.robovqa.data import BINARY_TYPES

# =============================================================================================
# default: the suite's
# =============================================================================================

_YES_NO = re.compile(r"(yes|no)(?![a-z])")
# An answer label before the word, its leading "<" or "**" stripped: "Answer: yes", "<answer>no</answer>".
_ANSWER_LABEL = re.compile(r"answer\s*(?:>|[:：])")
# "no" opening an abstention, not a denial: "No idea", "No way to tell", "No-one can say".
_ABSTENTION = re.compile(r"[\s\-]*(idea|clue|comment|way|one|body|answer|information|telling)\b")
_LEADING = string.punctuation + string.whitespace


def strict_yes_no(answer: str) -> str | None:
    """"yes" or "no" where the answer, lower-cased and stripped of white space, punctuation and an answer label
    ("Answer:", ``<answer>``) at its start, starts with the word (then a non-letter, or nothing); None otherwise
    ("Now it is done", "not sure", "No idea" included, and "Yes and no": an answer naming both is not read)."""
    text = answer.strip().lower().lstrip(_LEADING)
    if label := _ANSWER_LABEL.match(text):
        text = text[label.end():].lstrip(_LEADING)
    found = _YES_NO.match(text)
    if not found or re.search(r"\b(yes|no)\b", text[found.end():]) or \
            (found.group(1) == "no" and _ABSTENTION.match(text, found.end())):
        return None
    return found.group(1)


def smoothed_bleu(answer: str, reference: str) -> float:
    """sacrebleu's sentence BLEU (0-100) of the answer against the reference: 13a tokens, exponential smoothing,
    n-gram orders up to the sentence's (``use_effective_order``), so that a right short answer scores 100."""
    import sacrebleu

    return float(sacrebleu.sentence_bleu(answer.strip(), [reference]).score)


def default_scores(answer: str, doc: dict) -> dict[str, float]:
    """Yes / no questions: 100 if the strictly read word is the reference's, else 0 (``unextracted`` counts the
    answers read as neither); the others: the smoothed sentence BLEU. ``length_ratio``: the answer's words per
    reference word. Reasoning blocks (``core.reasoning``) are left out first: a thinking model's drafts are not its
    answer."""
    answer = without_reasoning(answer)
    length_ratio = len(answer.split()) / max(1, len(doc["answer"].split()))
    if doc["question_type"] in BINARY_TYPES:
        read = strict_yes_no(answer)
        right = 100.0 * (read == doc["answer"].lower())
        return {"score": right, "micro_score": right, "unextracted": float(read is None), "length_ratio": length_ratio}
    bleu = smoothed_bleu(answer, doc["answer"])
    return {"score": bleu, "micro_score": bleu, "unextracted": 0.0, "length_ratio": length_ratio}


# =============================================================================================
# mimo: XiaomiMiMo/MiMo-Embodied @0bee4b6 lmms_eval/tasks/robovqa/utils.py
# =============================================================================================

# lmms_eval/models/mivllm.py: the system turn every request carries (line 119), and the user turn's last text item
# under disable_thinking_user=true (lines 117, 219-220), which the README runs RoboVQA with (lines 267-286)
MIMO_SYSTEM_PROMPT = "You are a helpful assistant."
MIMO_NO_THINK = " /no_think"

# _QUESTION_REPLACEMENTS, verbatim
MIMO_REPLACEMENTS = (
    (". Q: immediate next step", ". what is the immediate next step"),
    (". Q: next 5 step", ". what are the next 5 step"),
    (". Q: satisfied", ". is it satisfied"),
    (". Q: possible right now", ". is it possible right now"),
    (" Q: immediate next step", ". what is the immediate next step"),
    (" Q: next 5 step", ". what are the next 5 step"),
    (" Q: satisfied", ". is it satisfied"),
    (" Q: possible right now", ". is it possible right now"),
)


def mimo_prompt(question: str) -> str:
    """``robovqa_doc_to_text_mimo`` on the question (the row's text before ``<PRED>A:``, tags removed)."""
    question = " ".join(question.strip().split())
    for old, new in MIMO_REPLACEMENTS:
        question = question.replace(old, new)
    question = question.replace("Q: ", "")
    if ". is it" in question:
        question = question + " Please answer yes or no. "
    return question


# get_bleu_score's weights by reference length (1, 2, 3, 4 or more tokens), verbatim
_MIMO_WEIGHTS = {
    1: ((1.00, 0.00, 0.00, 0.00),) * 4,
    2: ((1.00, 0.00, 0.00, 0.00),) + ((0.50, 0.50, 0.00, 0.00),) * 3,
    3: ((1.00, 0.00, 0.00, 0.00), (0.50, 0.50, 0.00, 0.00)) + ((0.33, 0.33, 0.33, 0.00),) * 2,
    4: ((1.00, 0.00, 0.00, 0.00), (0.50, 0.50, 0.00, 0.00), (0.33, 0.33, 0.33, 0.00), (0.25, 0.25, 0.25, 0.25)),
}


def mimo_scores(answer: str, doc: dict) -> dict[str, float]:
    """``robovqa.yaml``'s filter (``AfterThinkFilter``: the text after the last ``</think>``), then
    ``robovqa_process_results``: think blocks and tags removed, lower case, the yes / no rewrite where the
    reference is yes or no (``\\b\\w*no\\w*\\b`` -> no: "Now it is done" becomes "no it is done"), then NLTK BLEU-1..4
    on tokens split at single spaces with weights by the reference's length, and their mean (0-1)."""
    from nltk.translate.bleu_score import sentence_bleu

    # robovqa.yaml filter_list: _task_utils/eval_utils.py AfterThinkFilter (extract_after_think_content)
    if (think_end := answer.rfind("</think>")) != -1:
        answer = answer[think_end + len("</think>"):].strip()
    prediction = answer.strip()
    prediction = re.sub(r"<think>.*?</think>", "", prediction, flags=re.DOTALL | re.MULTILINE)
    prediction = re.sub(r"<[^>]+>", "", prediction)
    prediction = re.sub(r"\n+", " ", prediction).strip()
    pred, gt = prediction.replace("\n", "").lower(), doc["answer"].replace("\n", "").lower()
    if gt in ["yes", "no"]:
        pred = re.sub(r"\b\w*yes\w*\b", "yes", pred)
        pred = re.sub(r"\b\w*no\w*\b", "no", pred)
    reference = [gt.split(" ")]
    weights = _MIMO_WEIGHTS[min(4, max(1, len(reference[0])))]
    bleu = [float(sentence_bleu(reference, pred.split(" "), weights=w)) for w in weights]
    return {"mimo_score": sum(bleu) / 4, **{f"mimo_bleu{n}": value for n, value in enumerate(bleu, 1)}}


# =============================================================================================
# physbrain: DeepCybo-PhysAI/PhysBrainEvalKit @c95d9ee benchmark/robovqa.py
# =============================================================================================

EVAL_BINARY_INSTRUCTION = " Please answer yes or no without any other extra text."
# eval_robovqa.py @c95d9ee main: the system prompt of a local-data run under train_explicit_style, verbatim
PHYSBRAIN_SYSTEM_PROMPT = "You are a helpful assistant."
_SUFFIXES = ("what is likely to happen next?", "what action is possible right now?", "what just happened?",
             "possible right now?", "satisfied?", "immediate next step?", "next 5 steps?")
_NEXT_ACTION = "Do not explain or add any other text."
_YES_NO_ONLY = "Answer only yes or no, without explanation or any other text."
# transform_training_qa's (category, suffix) -> (the question's new ending, the instruction), verbatim
_PHYSBRAIN_REWRITES = {
    ("past_description", "what just happened?"): (
        "what just happened?", "Answer with only one short action phrase describing the completed action. "
        + _NEXT_ACTION),
    ("future_prediction", "what is likely to happen next?"): (
        "what is likely to happen next?", "Answer with only one short action phrase describing the most likely next "
        "action. " + _NEXT_ACTION),
    ("affordance", "what action is possible right now?"): (
        "what action is possible right now?", "Answer with only one short action phrase describing an action that "
        "is possible now. " + _NEXT_ACTION),
    ("affordance", "possible right now?"): ("is it possible right now?", _YES_NO_ONLY),
    ("success", "satisfied?"): ("is it satisfied?", _YES_NO_ONLY),
    ("planning", "immediate next step?"): (
        "what is the immediate next step?", "Answer with only one short action phrase describing the immediate "
        "next action. " + _NEXT_ACTION),
    ("remaining5_planning_with_context20", "next 5 steps?"): (
        "what are the next 5 steps?", 'Answer with up to five consecutively numbered entries in the format "1- ... '
        '2- ...". If the task will be completed in fewer than five actions, list the remaining actions and then write '
        '"done" as the final numbered entry. If it is already complete, answer "1- done". Do not add any text after '
        '"done" or outside the numbered list.'),
}
_PREFIXED = {("affordance", "possible right now?"), ("success", "satisfied?"), ("planning", "immediate next step?"),
             ("remaining5_planning_with_context20", "next 5 steps?")}


def physbrain_category(tag: str) -> str:
    """``prepare_dataset``'s category: the tag's first field (``re.search(r"<task:([^:]+)", question_idx)``)."""
    found = re.search(r"<task:([^:>]+)", tag)
    return found.group(1) if found else "Unknown"


def physbrain_question(question: str, tag: str) -> tuple[str, str]:
    """``transform_training_qa``'s question (prompt policy ``train_explicit_style``): the suffix after the last
    ``Q:`` (or a known ending) rewritten with the category's instruction; returns (question, category). An
    unsupported template raises ValueError, as the transform does."""
    category = physbrain_category(tag)
    question = question.strip()
    if "Q:" in question:
        prefix, suffix = question.rsplit("Q:", 1)
        prefix, suffix = prefix.rstrip(), suffix.strip()
    else:
        normalized = question.removesuffix(EVAL_BINARY_INSTRUCTION).rstrip() \
            if question.endswith(EVAL_BINARY_INSTRUCTION) else question
        prefix = suffix = ""
        for candidate in _SUFFIXES:
            if normalized.endswith(candidate):
                prefix, suffix = normalized[: -len(candidate)].rstrip(), candidate
                break
    key = ("planning" if category == "immediate_planning_with_context20" else category, suffix)
    if key not in _PHYSBRAIN_REWRITES or (key in _PREFIXED and not prefix):
        raise ValueError(f"Unsupported RoboVQA question template for {category}: {question}")
    ending, instruction = _PHYSBRAIN_REWRITES[key]
    transformed = f"{prefix}. {ending}" if key in _PREFIXED else ending
    return f"{transformed} {instruction}", category


def physbrain_reference(answer: str, doc: dict) -> str:
    """``transform_training_qa``'s answer: stripped, a final "." removed, yes / no lower-cased."""
    reference = answer.strip().rstrip(".").rstrip()
    return reference.lower() if doc["question_type"] in BINARY_TYPES else reference


def physbrain_scores(answer: str, doc: dict) -> dict[str, float]:
    """``process_raw_output`` (not a thinking model): the answer stripped and lower-cased, one final "." and every
    "<" and ">" removed, then ``sacrebleu.sentence_bleu(pred, [gt], tokenize="intl").score`` (0-100)."""
    import sacrebleu

    predicted = answer.strip().lower()
    if predicted.endswith("."):
        predicted = predicted[:-1]
    predicted = predicted.replace("<", "").replace(">", "")
    reference = physbrain_reference(doc["answer"], doc)
    return {"physbrain_bleu": float(sacrebleu.sentence_bleu(predicted, [reference], tokenize="intl").score)}


# =============================================================================================
# robomamba: lmzpai/roboMamba @d383bbb src/test.py judge_robovqa (non-standard: reference and hypothesis swapped)
# =============================================================================================


def robomamba_gold(reference: str) -> str:
    """``judge_robovqa``'s gold: ``conversations[1]['value'].split(":")[1]``, stripped. Its ``robovqa.json`` is not
    published; a value without ":" would raise IndexError there, so the value is taken as the notebook's answer
    ``A: <reference>``: the gold is the reference up to its first ":" (the whole reference where it holds none)."""
    return f"A: {reference}".split(":")[1].strip()


def robomamba_scores(answer: str, doc: dict) -> dict[str, float]:
    """``judge_robovqa``: special tokens and tags blanked, "A:", ":", "(" and ")" blanked, then for each n the
    best over k in [-5, 5) of NLTK's BLEU with weight 1 on n-grams of order n alone and smoothing method 4, the
    answer's first ``len(gt) - k`` characters as the reference and the gold answer (``robomamba_gold``) as the
    hypothesis (0-1). jieba's segmentation is joined back without separators, which leaves the text as it was."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    result = re.sub(r"<\|.*?\|>", " ", answer.replace("\n", " "))
    result = re.sub(r"<.*?>", " ", result)
    result = result.replace("A:", " ").replace(":", " ").replace("(", " ").replace(")", " ").strip()
    gt = robomamba_gold(doc["answer"])
    smoothing = SmoothingFunction().method4
    scores = {}
    for order in range(1, 5):
        weights = tuple(1 if n == order else 0 for n in range(1, 5))
        scores[f"robomamba_bleu{order}"] = float(max(
            sentence_bleu([result[:len(gt) - k].split()], gt.split(), smoothing_function=smoothing, weights=weights)
            for k in range(-5, 5)))
    return scores


# =============================================================================================
# multinet: ManifoldRG/MultiNet @d6fe80e src/v1/modules/Magma/scripts/robovqa_single_inference.py (_normalize_text,
# _validate_outputs_and_parse, _calculate_final_metrics), src/v1/modules/robovqa_module.py (RoboVQAModule:
# _normalize_text, _validate_outputs_and_calculate_metrics), src/data_utils/openx_dataloader.py,
# definitions/robovqa_prompt.py
# =============================================================================================

# definitions/robovqa_prompt.py @d6fe80e ROBOVQA_PROMPT (last changed at 3efce5b, 2025-09-20, before MultiNet's
# RoboVQA results of 2025-09-30), verbatim, its indentation included
MULTINET_SYSTEM_PROMPT = """
        You are a Visual-Language Model Assistant that specializes in answering questions about robotics tasks based on given images representing the robot's environment.

        Core directive:
        Analyze the provided image and answer the question. 
        Your answer must be grounded in the provided verbal context and/or task descriptions and informed by general commonsense. 
        Adhere strictly to the output formatting rules.

        Inputs:
            1. Image: A visual representation of the robot's current environment.
            2. Question: A specific query about the environment or the next possible action, along with additional context and/or task description.

        Output formatting rules:
        Your response must be one of the following, and nothing else. Do not add conversational filler, explanations, or apologies.
            1. Action Execution Query (e.g., "What should I do?", "What is the next step?"):
                - Respond with a concise action phrase.
            2. Feasibility/Possibility/Completion Query (e.g., "Is it possible to grasp the handle?", "Is the drawer open?"):
                - Respond with a single word: yes or no.
        If the current goal is to perform an action with no followup question, then assume it's an action execution query.
        Do not respond with any additional explanation or information.
    """  # noqa: E501, W291, W293


def multinet_question(question: str) -> str:
    """src/data_utils/openx_dataloader.py @d6fe80e (lines 129-136), the text a robot_vqa step shows: split at the
    first "Q:"; a text that starts with it becomes "Question: ...", one with a context before it
    "Task and Context: ...\n Question: ..."; one without it stays as it is."""
    parts = question.split("Q:", 1)
    if len(parts) == 1:
        return question
    if question.startswith("Q:"):
        return f"Question: {parts[1].strip()}"
    return f"Task and Context: {parts[0].strip()}\n Question: {parts[1].strip()}"


# The system turn each protocol sends (the default and robomamba send none): settings.RoboVQASettings.system_prompt
SYSTEM_PROMPTS = {"mimo": MIMO_SYSTEM_PROMPT, "physbrain": PHYSBRAIN_SYSTEM_PROMPT, "multinet": MULTINET_SYSTEM_PROMPT}


# The scorers of MultiNet's two RoboVQA runs (the setting ``multinet_scorer``): ``script``, its open-weight script's
# (src/v1/modules/Magma/scripts/robovqa_single_inference.py, behind its published Magma results, whose decoding the
# preset takes); ``module``, its API runs' (src/v1/modules/robovqa_module.py, RoboVQAModule)
MULTINET_SCRIPT, MULTINET_MODULE = "script", "module"
MULTINET_SCORERS = (MULTINET_SCRIPT, MULTINET_MODULE)
_DIGITS = tuple(str(digit) for digit in range(10))
_DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def multinet_normalize(text: str, *, digit_words: bool = False) -> str:
    """``_normalize_text``: lower case, every character neither a word character nor white space removed, white
    space collapsed; the script's (``digit_words``) then writes a text that is one digit as its word ("2" -> "two")."""
    normalized = " ".join(re.sub(r"[^\w\s]", "", text.lower()).split())
    return _DIGIT_WORDS[int(normalized)] if digit_words and normalized in _DIGITS else normalized


def multinet_scores(answer: str, doc: dict, encoder: SentenceEncoder) -> dict[str, float]:
    """An empty (or all white space) answer is invalid, scored 0 and 0 (both scorers). Else, by ``doc``'s
    ``multinet_scorer``: the script's ``_calculate_final_metrics`` compares the normalised answer (digits as words)
    with the reference as it is, exactly and by the cosine of all-MiniLM-L6-v2's embeddings (``encoder``'s); the
    module's ``_validate_outputs_and_calculate_metrics`` compares the two normalised texts exactly and the two raw
    texts by the cosine."""
    if not answer.strip():
        return {"multinet_exact_match": 0.0, "multinet_similarity": 0.0, "multinet_invalid": 1.0}
    reference = doc["answer"]
    if doc["multinet_scorer"] == MULTINET_MODULE:
        exact = float(multinet_normalize(answer) == multinet_normalize(reference))
        similarity = encoder.cosine_similarities([(answer, reference)])[0]
    else:
        predicted = multinet_normalize(answer, digit_words=True)
        exact = float(predicted == reference)
        similarity = encoder.cosine_similarities([(predicted, reference)])[0]
    return {"multinet_exact_match": exact, "multinet_similarity": float(similarity), "multinet_invalid": 0.0}
