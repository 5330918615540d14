"""What a task's requests ask of the suite's backends beyond lmms-eval's arguments, for a task whose official run
sends its own system turn and vLLM's SamplingParams (Cosmos-Reason1): the system prompt reaches the tiny
Qwen2.5-VL's rendered prompt on egoplan_hf and on egoplan_server (both engines) without a model_arg, a differing
model_arg is refused; the sampling settings the request leaves unset are off, not the checkpoint's generation_config
(``top_k: 1, repetition_penalty: 1.05``, as Qwen2.5-VL derivatives ship)."""

import json
import shutil

import pytest
import torch

from lmms_egoplan.core.request_options import SAMPLING_DEFAULTS, SYSTEM_PROMPT, UNSET_IS_OFF
from lmms_egoplan.harness.lmms_eval_task import SuiteInstance
from lmms_egoplan.models.chat import SystemPromptConflict
from lmms_egoplan.models.egoplan_hf import EgoPlanHF
from lmms_egoplan.models.egoplan_server import EgoPlanServer
from tests.models.engine_servers import EngineServer

TASK, SPLIT = "probe", "test"
TASK_SYSTEM = "Answer the questions."
TEMPLATE_SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>"
SAMPLED = {"max_new_tokens": 8, "temperature": 0.6, "top_p": 0.95, "do_sample": True, "until": []}


@pytest.fixture(scope="module")
def checkpoint(tiny_model, tmp_path_factory):
    """The tiny Qwen2.5-VL whose generation_config carries Qwen2.5-VL derivatives' top_k 1 and repetition_penalty
    1.05."""
    folder = tmp_path_factory.mktemp("greedy_config") / "qwen2_5_vl"
    shutil.copytree(tiny_model("qwen2_5_vl"), folder)
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, "top_k": 1, "repetition_penalty": 1.05}))
    return folder


def requests(backend, count: int = 2, generation_kwargs=None, **options: str) -> list[SuiteInstance]:
    docs = [{"question": f"What should I do next? (case {n})"} for n in range(count)]
    backend.task_dict = {TASK: {SPLIT: docs}}
    made = [SuiteInstance(request_type="generate_until", idx=0,
                          arguments=(doc["question"], dict(generation_kwargs or SAMPLED), None, n, TASK, SPLIT),
                          metadata={"task": TASK, "doc_id": n, "repeats": 1}) for n, doc in enumerate(docs)]
    for option in (SYSTEM_PROMPT, SAMPLING_DEFAULTS):
        if option.name in options:
            option.mark(made, options[option.name])
    return made


def rendered_prompts(backend: EgoPlanHF, monkeypatch) -> list[str]:
    """The prompts egoplan_hf hands its processor, recorded."""
    seen, encode = [], backend._encode
    monkeypatch.setattr(backend, "_encode", lambda texts, *args: seen.extend(texts) or encode(texts, *args))
    return seen


def test_egoplan_hf_renders_the_task_s_system_turn_and_refuses_a_differing_model_arg(checkpoint, monkeypatch):
    backend = EgoPlanHF(pretrained=str(checkpoint), device="cpu", dtype="float32")
    seen = rendered_prompts(backend, monkeypatch)
    backend.generate_until(requests(backend, 1, system_prompt=TASK_SYSTEM))
    backend.generate_until(requests(backend, 1))
    assert seen[0].startswith(f"<|im_start|>system\n{TASK_SYSTEM}<|im_end|>\n<|im_start|>user\n")
    assert seen[1].startswith(TEMPLATE_SYSTEM)  # a request without the option: the template's own
    other = EgoPlanHF(pretrained=str(checkpoint), device="cpu", dtype="float32", system_prompt="Be brief.")
    with pytest.raises(SystemPromptConflict, match="system_prompt 'Be brief.' differs from the system prompt"):
        other.generate_until(requests(other, 1, system_prompt=TASK_SYSTEM))
    same = EgoPlanHF(pretrained=str(checkpoint), device="cpu", dtype="float32", system_prompt=TASK_SYSTEM)
    seen = rendered_prompts(same, monkeypatch)
    same.generate_until(requests(same, 1, system_prompt=TASK_SYSTEM))
    assert seen[0].count(TASK_SYSTEM) == 1


def test_egoplan_hf_leaves_unset_sampling_off_not_the_generation_config_s(checkpoint, monkeypatch):
    """The checkpoint's top_k 1 makes sampling greedy (the same text under any seed); a request asking for
    unset-is-off samples (texts differ by seed), and generate gets top_k 0, min_p 0, repetition_penalty 1.0 and the
    request's own top_p."""
    backend = EgoPlanHF(pretrained=str(checkpoint), device="cpu", dtype="float32")
    given, generate = [], backend._model.generate
    monkeypatch.setattr(backend._model, "generate", lambda **kwargs: given.append(kwargs) or generate(**kwargs))

    def texts(**options) -> set[str]:
        answers = set()
        for seed in range(4):
            torch.manual_seed(seed)
            answers.add(backend.generate_until(requests(backend, 1, **options))[0])
        return answers

    assert len(texts()) == 1  # generation_config's top_k 1
    assert {key: given[-1].get(key) for key in ("top_k", "repetition_penalty")} == {"top_k": None,
                                                                                    "repetition_penalty": None}
    assert len(texts(sampling_defaults=UNSET_IS_OFF)) > 1
    assert {key: given[-1][key] for key in ("top_k", "top_p", "min_p", "repetition_penalty")} == {
        "top_k": 0, "top_p": 0.95, "min_p": 0.0, "repetition_penalty": 1.0}
    backend.generate_until(requests(backend, 1, {"max_new_tokens": 4, "temperature": 0, "do_sample": False,
                                                 "until": []}, sampling_defaults=UNSET_IS_OFF))
    assert given[-1]["repetition_penalty"] == 1.0 and "top_k" not in given[-1]  # greedy: only the penalty applies


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_egoplan_server_sends_the_task_s_system_turn_and_unset_sampling_off(engine, checkpoint):
    with EngineServer(engine, checkpoint) as server:
        backend = EgoPlanServer(engine=engine, base_url=server.base_url, model=server.served_model_name,
                                retries=0, backoff=0.01, concurrency=1)
        server.reset()
        backend.generate_until(requests(backend, 1, system_prompt=TASK_SYSTEM, sampling_defaults=UNSET_IS_OFF))
        backend.generate_until(requests(backend, 1))
        (asked, asked_ids), (plain, plain_ids) = server.ran[-2:]
        rendered = [server.model.tokenizer.decode(ids) for ids in (asked_ids, plain_ids)]
        assert rendered[0].startswith(f"<|im_start|>system\n{TASK_SYSTEM}<|im_end|>\n<|im_start|>user\n")
        assert rendered[1].startswith(TEMPLATE_SYSTEM)
        sampling = [body["sampling_params"] if engine == "sglang" else body for body in (asked, plain)]
        keys = ("top_k", "top_p", "min_p", "repetition_penalty")
        assert {key: sampling[0].get(key) for key in keys} == {"top_k": -1, "top_p": 0.95, "min_p": 0.0,
                                                               "repetition_penalty": 1.0}
        assert {key: sampling[1].get(key) for key in keys} == {"top_k": 1, "top_p": 0.95, "min_p": None,
                                                               "repetition_penalty": 1.05}
        other = EgoPlanServer(engine=engine, base_url=server.base_url, model=server.served_model_name,
                              retries=0, backoff=0.01, concurrency=1, system_prompt="Be brief.")
        with pytest.raises(SystemPromptConflict, match="differs from the system prompt 'Answer the questions.'"):
            other.generate_until(requests(other, 1, system_prompt=TASK_SYSTEM))
