"""Scripted answers for the offline demo: every scoring path shown working, with values known beforehand.

A random model writes nothing parseable, so its plans, intents and letters score 0 whether the
scorers work or not. Each generative benchmark is therefore answered once more by a script,
through lmms-eval's own ``openai`` backend against a loopback chat server (``judge_server``): answers
of known quality (exact, partly right and wrong plans; full and incomplete intents; letters and
candidate texts), rated, where a judge is needed, by a loopback judge that reads the reference and
the answer out of the judge prompt and looks their rating up in the same script. Each benchmark
states the values its script implies, computed from the script alone (its own small LCS, its own
means) and not by the suite's scoring code; ``differences`` compares them with what the run reports.
"""

from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from lmms_egoplan.testing.judge_server import ChatCall, ChatServer, Reply
from lmms_egoplan.testing.lmms_eval_run import EvalRun

MODEL_NAME = "scripted-answers"
# Values are means of a few exact numbers: only float rounding separates two right computations.
TOLERANCE = 1e-9

# metric -> value, per task or group
Expected = dict[str, dict[str, float]]


@dataclass(frozen=True)
class ScriptedAnswers:
    """A benchmark's generative tasks answered by script, and what the script implies they score."""

    tasks: tuple[str, ...]  # as passed to --tasks (groups included)
    answers: Mapping[str, str]  # a text found in exactly one prompt -> the model's answer to that prompt
    expected: Callable[[EvalRun], Expected]  # the run is read only for what the data assigns (e.g. a sample's bin)
    env: Mapping[str, str] = field(default_factory=dict)  # settings pointing the tasks at the data
    ratings: Callable[[str], str | None] | None = None  # judge prompt -> its scripted rating (None: not ours)
    judge_prefix: str | None = None  # <PREFIX>_JUDGE_* settings to point at the scripted judge

    def answer(self, prompt: str) -> str | None:
        """The answer of the most specific key the prompt holds (a key inside another found key
        yields: a normal task's description is the start of its counterfactual's); None if no key is
        found, or more than one most specific."""
        found = [key for key in self.answers if key in prompt]
        specific = [key for key in found if not any(key != other and key in other for other in found)]
        return self.answers[specific[0]] if len(specific) == 1 else None


def answering(scripts: Sequence[ScriptedAnswers]) -> Callable[[ChatCall], Reply]:
    """The chat model: the one scripted answer whose key the prompt holds. A prompt no script (or
    more than one) answers gets a reply saying so, which scores as a wrong answer: the check fails."""
    def respond(call: ChatCall) -> Reply:
        found = [answer for script in scripts if (answer := script.answer(call.text)) is not None]
        return Reply(found[0] if len(found) == 1 else f"(no scripted answer: {len(found)} scripts answer this prompt)")
    return respond


def rating_by_script(scripts: Sequence[ScriptedAnswers]) -> Callable[[ChatCall], Reply]:
    """The judge: the scripted rating of the (reference, answer) in the prompt, in the ``[[x]]`` form
    judges use. A prompt without one gets no rating: the judgement fails, is counted, and the check fails."""
    def respond(call: ChatCall) -> Reply:
        found = [rating for script in scripts if script.ratings and (rating := script.ratings(call.text)) is not None]
        if len(found) != 1:
            return Reply("The scripted judge has no rating for this answer.")
        return Reply(f"Scripted judgement of the answer against the reference. Rating: [[{found[0]}]]")
    return respond


def scripted_environment(scripts: Sequence[ScriptedAnswers], workdir: Path, resources: ExitStack) -> tuple[str, dict]:
    """Start the scripted chat model and judge (stopped with ``resources``); returns the model's
    ``--model_args`` for lmms-eval's ``openai`` backend and the environment of the run."""
    model = resources.enter_context(ChatServer(answering(scripts), model_name=MODEL_NAME))
    judge = resources.enter_context(ChatServer(rating_by_script(scripts)))
    env: dict[str, str] = {}
    for script in scripts:
        env.update(script.env)
        if script.judge_prefix:
            settings = {"base_url": judge.base_url, "model": "scripted-judge", "api_key_env": "",
                        "cache_dir": str(workdir / "judge-cache" / script.judge_prefix.lower())}
            env.update({f"{script.judge_prefix}_JUDGE_{name.upper()}": value for name, value in settings.items()})
    return f"model_version={MODEL_NAME},base_url={model.base_url},api_key=unused", env


def reported_metrics(results: Mapping) -> dict[str, dict[str, object]]:
    """Task or group -> metric -> value of an lmms-eval results file (filters and stderr dropped)."""
    reported: dict[str, dict[str, object]] = {}
    for section in ("groups", "results"):  # groups first, as lmms-eval prints them
        for task, metrics in (results.get(section) or {}).items():
            reported.setdefault(task, {}).update((key.split(",")[0], value) for key, value in metrics.items()
                                                 if key != "alias" and "_stderr" not in key)
    return reported


def differences(reported: Mapping[str, Mapping[str, object]], expected: Expected) -> list[str]:
    """Every value that differs from the script's, every value the script does not predict, every
    predicted value not reported: ``task metric: reported X, expected Y``. Empty when all agree."""
    found = []
    for task in sorted(expected):
        metrics = reported.get(task, {})
        for metric in sorted(expected[task].keys() | {m for m, v in metrics.items() if isinstance(v, (int, float))}):
            want, got = expected[task].get(metric), metrics.get(metric)
            if want is None:
                found.append(f"{task} {metric}: reported {got}, the script predicts no value")
            elif not isinstance(got, (int, float)) or not math.isclose(got, want, rel_tol=TOLERANCE, abs_tol=TOLERANCE):
                found.append(f"{task} {metric}: reported {got}, expected {want:.6g}")
    return found


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """The longest common subsequence of two step lists, steps equal as strings: the textbook DP."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]
