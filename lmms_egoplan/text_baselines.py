"""The lm-eval task classes of the text-only baselines (YAMLs in ``lm_eval_tasks/``, installed as
``lmms_egoplan.lm_eval_tasks``): each joins a benchmark's scoring, shared with its lmms-eval task,
to lm-eval's task base (``harness_lm_eval.LmEvalBenchmarkTask``)."""

from __future__ import annotations

from typing import ClassVar

from lmms_egoplan.actplan import ActPlanScoring
from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.egoplan import EgoPlanScoring
from lmms_egoplan.egothink import DECODING_PRESETS, EgoThinkScoring
from lmms_egoplan.harness_lm_eval import LmEvalBenchmarkTask
from lmms_egoplan.judged_task import JudgedScoring


class EgoPlanBlind(EgoPlanScoring, LmEvalBenchmarkTask):
    """``egoplan_val_blind`` / ``egoplan_val_narrated``: EgoPlan-Val from text alone (no media needed)."""

    WITH_MEDIA: ClassVar[bool] = False


class EgoPlanBlindTest(EgoPlanBlind):
    """``egoplan_test_blind``: EgoPlan-Test predictions from text alone, for the submission file."""

    LABELLED: ClassVar[bool] = False


class EgoThinkBlind(EgoThinkScoring, JudgedScoring, LmEvalBenchmarkTask):
    """``ego_think_blind_<dimension>``: an EgoThink dimension's questions without their images,
    answered in the default inference prompt and judged as ``ego_think_<dimension>``."""

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


class ActPlanTextOnly(ActPlanScoring, LmEvalBenchmarkTask):
    """``actplan1k_text_only_lm``: ActPlan-1K's text-only ablation (paper Table 6) with lm-eval's
    models, generation and chat templates, scored as ``actplan1k_text_only``."""
