"""EgoThink's text-only baseline (lm-eval; YAMLs in ``lm_eval_tasks/egothink/``): its scoring and
judge, shared with the lmms-eval tasks, joined to lm-eval's task base."""

from __future__ import annotations

from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.egothink.protocol import DECODING_PRESETS
from lmms_egoplan.egothink.task import METRICS, EgoThinkScoring, doc_to_text_blind, process_results
from lmms_egoplan.harness.benchmark import TaskSpec
from lmms_egoplan.harness.judged import JudgedScoring
from lmms_egoplan.harness.lm_eval_task import LmEvalBenchmarkTask


class EgoThinkBlind(EgoThinkScoring, JudgedScoring, LmEvalBenchmarkTask):
    """``ego_think_blind_<dimension>``: an EgoThink dimension's questions without their images,
    answered in the default inference prompt and judged as ``ego_think_<dimension>``."""

    SPEC = TaskSpec(doc_to_text=doc_to_text_blind, doc_to_target="answer", process_results=process_results,
                    metrics=METRICS)

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        if self.settings.prompt_preset:
            raise SettingsError(f"task {self.config.task}: {setting_name(self.ENV_PREFIX, 'prompt_preset')} chooses "
                                f"among the lmms-eval tasks' per-model prompts; the lm-eval baselines use the "
                                f"default prompt (lm-eval's --apply_chat_template and --system_instruction apply)")
        self.config.generation_kwargs.update(DECODING_PRESETS[self.settings.decoding])

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        super().download(dataset_kwargs, **kwargs)
        self.check_judge_answers()  # before any model call, as the lmms-eval tasks do
