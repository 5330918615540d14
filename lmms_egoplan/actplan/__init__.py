"""ActPlan-1K (Su et al.): a plan of ``action(object)`` steps from a household task description and
scene images, scored by LCS with sentence-embedding step matching (``lcs``) and a fine-tuned BERT
classifier (``classifier``). ``task`` holds the hooks in the order lmms-eval calls them, ``data``
reads the release, ``plans`` parses and scores plans, ``text_baselines`` the lm-eval baseline,
``synthetic`` the demo's data. Re-exported here: what the task YAMLs (``tasks/actplan/``,
``lm_eval_tasks/actplan/``) name."""

from lmms_egoplan.actplan.plans import aggregate_format_error_rate
from lmms_egoplan.actplan.task import (
                                       ActPlanSettings,
                                       ActPlanTask,
                                       ActPlanTextOnlyTask,
                                       aggregate_bleurt_accuracy,
                                       aggregate_lcs,
                                       aggregate_norm_lcs,
                                       doc_to_target,
                                       doc_to_text,
                                       doc_to_visual,
                                       doc_to_visual_text_only,
                                       process_results,
)
from lmms_egoplan.actplan.text_baselines import ActPlanTextOnly

__all__ = ["ActPlanSettings", "ActPlanTask", "ActPlanTextOnly", "ActPlanTextOnlyTask", "aggregate_bleurt_accuracy",
           "aggregate_format_error_rate", "aggregate_lcs", "aggregate_norm_lcs", "doc_to_target", "doc_to_text",
           "doc_to_visual", "doc_to_visual_text_only", "process_results"]
