"""EgoThink (Cheng et al.): first-person questions about one image, rated by an LLM judge against
the reference. ``task`` holds the hooks in the order lmms-eval calls them, ``data`` reads the
release, ``text_baselines`` the lm-eval baseline, ``synthetic`` the demo's data. Re-exported here:
what the task YAMLs (``tasks/egothink/``, ``lm_eval_tasks/egothink/``) name."""

from lmms_egoplan.egothink.task import (
                                        EgoThinkSettings,
                                        EgoThinkTask,
                                        doc_to_messages,
                                        doc_to_text,
                                        doc_to_text_blind,
                                        doc_to_visual,
                                        process_results,
)
from lmms_egoplan.egothink.text_baselines import EgoThinkBlind

__all__ = ["EgoThinkBlind", "EgoThinkSettings", "EgoThinkTask", "doc_to_messages", "doc_to_text", "doc_to_text_blind",
           "doc_to_visual", "process_results"]
