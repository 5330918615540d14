"""EgoIntent: local intent, global intent and next-step plan from a clip cut before the step's key
outcome, each field rated by an LLM judge. ``task`` holds the hooks in the order lmms-eval calls
them, ``data`` reads the release, ``synthetic`` the demo's data. Re-exported here: what the task
YAML (``tasks/egointent/``) names."""

from lmms_egoplan.egointent.task import (
                                         EgoIntentTask,
                                         capped_samples,
                                         doc_to_target,
                                         doc_to_text,
                                         doc_to_visual,
                                         incomplete_answers,
                                         missing_fields,
                                         process_results,
)

__all__ = ["EgoIntentTask", "capped_samples", "doc_to_target", "doc_to_text", "doc_to_visual", "incomplete_answers",
           "missing_fields", "process_results"]
