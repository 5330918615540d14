"""EgoPlan-Bench (Chen et al.): the next action among four, from the task-progress video and the
current observation. ``task`` holds the hooks in the order lmms-eval calls them, ``data`` reads the
release, ``text_baselines`` the lm-eval baselines, ``synthetic`` the demo's data. Re-exported here:
what the task YAMLs (``tasks/egoplan/``, ``lm_eval_tasks/egoplan/``) name."""

from lmms_egoplan.egoplan.task import (
                                       EgoPlanSettings,
                                       EgoPlanTest,
                                       EgoPlanValidation,
                                       doc_to_choice,
                                       doc_to_target,
                                       doc_to_text,
                                       doc_to_text_blind,
                                       doc_to_text_narrated,
                                       doc_to_text_with_options,
                                       doc_to_visual,
                                       process_blind_ranking_results,
                                       process_blind_submission_results,
                                       process_generation_results,
                                       process_ranking_results,
                                       process_submission_results,
                                       write_submission,
)
from lmms_egoplan.egoplan.text_baselines import EgoPlanBlind, EgoPlanBlindTest

__all__ = ["EgoPlanBlind", "EgoPlanBlindTest", "EgoPlanSettings", "EgoPlanTest", "EgoPlanValidation", "doc_to_choice",
           "doc_to_target", "doc_to_text", "doc_to_text_blind", "doc_to_text_narrated", "doc_to_text_with_options",
           "doc_to_visual", "process_blind_ranking_results", "process_blind_submission_results",
           "process_generation_results", "process_ranking_results", "process_submission_results", "write_submission"]
