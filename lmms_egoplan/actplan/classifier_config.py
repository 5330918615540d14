"""How the ActPlan-1K plan classifier is fine-tuned (paper §4.2.2): learning-rate presets, the epoch
selection and the training settings, importable without torch (``lmms-egoplan actplan-train-bleurt
--help`` reads them; ``classifier`` trains with them)."""

from __future__ import annotations

from dataclasses import dataclass

from lmms_egoplan.core.errors import InputError

MAX_LENGTH = 512  # tokens per plan pair, as the release
CLASSIFIER_WEIGHTS = "plan_classifier.safetensors"  # a trained classifier folder's weights (the settings check it)
# Paper §4.2.2. (The release's scripts use them the other way round: 5e-6 for BLEURT-base, 1e-6
# for BLEURT-large.)
PRESET_LEARNING_RATES = {"bleurt": 5e-6, "bleurt-base": 1e-6}
DEFAULT_PRESET = "bleurt"
# Which validation score picks the kept epoch: the paper's best accuracy, or the release code's lowest loss.
SELECTION_CRITERIA = ("accuracy", "loss")


@dataclass(frozen=True)
class TrainingConfig:
    learning_rate: float = PRESET_LEARNING_RATES[DEFAULT_PRESET]
    batch_size: int = 12
    epochs: int = 70
    max_length: int = MAX_LENGTH
    weight_decay: float = 0.01
    max_grad_norm: float = 5.0
    eval_batch_size: int = 16
    select_by: str = SELECTION_CRITERIA[0]
    seed: int = 0

    def __post_init__(self):
        if self.select_by not in SELECTION_CRITERIA:
            raise InputError(f"select_by must be one of {', '.join(SELECTION_CRITERIA)}, got {self.select_by!r}")
        # Training keeps the best epoch, so it needs at least one.
        for name in ("epochs", "batch_size", "eval_batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise InputError(f"learning_rate must be positive, got {self.learning_rate}")
