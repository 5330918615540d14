"""ActPlan-1K's learned plan metric: a fine-tuned BLEURT (BERT) classifier of plan pairs (paper §4.2.2).

Model, as the release's ``bleu-cls/finetune.py``: a BERT encoder, dropout 0.1 on the last
layer's [CLS] vector, a linear 2-way head (label 1: the generated plan is correct). Input: the
text pair ``(gold, "[SEP] " + generated)``, i.e. ``[CLS] gold [SEP] [SEP] generated [SEP]``
(the release prefixes the second segment with a literal ``[SEP]``), truncated longest-first to
512 tokens, with the release's five action names added to the vocabulary as special tokens.
Plans are written as their steps joined by spaces, the form of ``finetuning_data.jsonl``.

Training (``train_classifier``; CLI ``lmms-egoplan actplan-train-bleurt``) follows §4.2.2: the
60/20/20 activity split of ``activities.txt``; each epoch draws one pair per training instance:
two correct plans (gold or human-judged correct VLM plans, label 1) with probability 0.3, a
correct plan and a wrong VLM plan (label 0) with probability 0.5, otherwise a correct plan and a
shuffle of its own steps (label 0); AdamW (weight decay 0.01 except biases and LayerNorm), batch
12, gradient norm clipped at 5, no schedule, up to 70 epochs; the epoch with the best validation
accuracy is kept. Validation and test pairs are built as the release builds them and scored
per VLM with accuracy and the Matthews correlation coefficient (Table 5).
"""

from __future__ import annotations

import math
import os
import random
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
from torch import nn
from transformers import AutoTokenizer, BertConfig, BertModel

from lmms_egoplan.actplan.classifier_config import CLASSIFIER_WEIGHTS, MAX_LENGTH, TrainingConfig
from lmms_egoplan.actplan.plans import parse_plan
from lmms_egoplan.core.devices import resolve_device
from lmms_egoplan.core.errors import InputError, StorageError
from lmms_egoplan.core.files import (
    LineAppender,
    make_folder,
    read_jsonl,
    read_text,
    storage_failure,
    strict_json,
    write_atomically,
)
from lmms_egoplan.core.statistics import mean_or_nan
from lmms_egoplan.core.text_tables import format_table

# The release adds these action names to the BERT vocabulary as special (unsplit) tokens.
RELEASE_SPECIAL_TOKENS = ("switch-on", "switch-off", "place_inside", "place_on_top", "walk_to")
CLASSIFIER_INFO = "plan_classifier.json"


VLMS = ("gpt", "gemini")
SPLITS = ("train", "val", "test")
_PLAN_LISTS = tuple(f"{kind}_{vlm}" for vlm in VLMS for kind in ("pos", "neg", "gold"))


class FinetuningDataError(InputError):
    """The fine-tuning rows or the activity split file are malformed."""


class PlanPairClassifier(nn.Module):
    """BERT encoder + dropout + Linear(hidden, 2) on the last layer's [CLS] vector."""

    def __init__(self, config, encoder: BertModel | None = None):
        super().__init__()
        self.bert = encoder if encoder is not None else BertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(p=0.1)
        self.mlp = nn.Linear(config.hidden_size, 2)  # the release's name for the head

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                           token_type_ids=token_type_ids).last_hidden_state
        return self.mlp(self.dropout(hidden[:, 0, :]))


class PlanClassifier:
    """A loaded classifier and its tokenizer: ``predict`` labels plan pairs (1 = correct)."""

    def __init__(self, module: PlanPairClassifier, tokenizer, device: str = "cpu", max_length: int = MAX_LENGTH):
        self.module = module.to(device)
        self.tokenizer = tokenizer
        self.device = device
        self.max_length = max_length

    def encode(self, references: Sequence[str], candidates: Sequence[str]):
        batch = self.tokenizer(list(references), ["[SEP] " + c for c in candidates], truncation="longest_first",
                               padding="longest", max_length=self.max_length, return_tensors="pt")
        return {key: batch[key].to(self.device) for key in ("input_ids", "attention_mask", "token_type_ids")}

    def logits(self, references: Sequence[str], candidates: Sequence[str]):
        return self.module(**self.encode(references, candidates))

    def predict(self, references: Sequence[str], candidates: Sequence[str], batch_size: int = 16) -> list[int]:
        """Predicted labels (1 = correct) of the pairs ``(references[i], candidates[i])``."""
        return self.evaluate(references, candidates, None, batch_size)[1]

    def evaluate(self, references, candidates, labels, batch_size: int = 16) -> tuple[float, list[int]]:
        """(mean cross-entropy against ``labels`` or nan without labels, predicted labels)."""
        self.module.eval()
        predictions: list[int] = []
        total_loss = 0.0
        with torch.no_grad():
            for start in range(0, len(references), batch_size):
                logits = self.logits(references[start:start + batch_size], candidates[start:start + batch_size])
                predictions += logits.argmax(dim=-1).tolist()
                if labels is not None:
                    target = torch.tensor(labels[start:start + batch_size], device=self.device)
                    total_loss += nn.functional.cross_entropy(logits, target, reduction="sum").item()
        return (total_loss / len(references) if labels is not None and references else math.nan), predictions

    def save(self, out_dir: str | Path, info: dict) -> Path:
        """The checkpoint in ``out_dir``, replacing the one there only once it is whole: its files are written into a
        folder beside them, then each renamed over its predecessor, the info naming its epoch last. A crash or a full
        disk while the weights are written leaves the checkpoint there before as it was."""
        from safetensors.torch import save_file

        out = make_folder(out_dir, "the classifier's output folder")
        staging = out / ".checkpoint-being-saved"
        shutil.rmtree(staging, ignore_errors=True)  # what a crash left
        try:
            staging.mkdir()
            self.tokenizer.save_pretrained(staging)
            self.module.bert.config.save_pretrained(staging)
            save_file({k: v.detach().cpu().contiguous() for k, v in self.module.state_dict().items()},
                      staging / CLASSIFIER_WEIGHTS)
            (staging / CLASSIFIER_INFO).write_text(strict_json(info, indent=2) + "\n")
        except BaseException as error:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(error, OSError):
                kept = "the checkpoint there before is kept" if (out / CLASSIFIER_INFO).exists() else "none is there"
                raise StorageError(f"cannot save the classifier in {out}: {storage_failure(error, out)}; "
                                   f"{kept}") from error
            raise
        for path in sorted(staging.iterdir(), key=lambda path: path.name == CLASSIFIER_INFO):
            os.replace(path, out / path.name)
        staging.rmdir()
        return out


def _base_tokenizer(base: Path):
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    tokenizer.add_special_tokens({"additional_special_tokens": list(RELEASE_SPECIAL_TOKENS)})
    return tokenizer


def classifier_from_base(base: str | Path, *, device: str = "auto", seed: int = 0) -> PlanClassifier:
    """A classifier to fine-tune: the BERT encoder of a BLEURT-style checkpoint folder + a fresh head."""
    base = _existing_path(base, "BLEURT base checkpoint")
    try:
        tokenizer = _base_tokenizer(base)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            encoder = BertModel.from_pretrained(str(base), add_pooling_layer=False)
    except (OSError, ValueError) as error:  # transformers' own words name no setting: a file, or not a BERT folder
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"BLEURT base checkpoint {base}: not a BERT-based checkpoint folder with its tokenizer "
                         f"({reason})") from None
    encoder.resize_token_embeddings(len(tokenizer))
    module = PlanPairClassifier(encoder.config, encoder)
    return PlanClassifier(module, tokenizer, resolve_device(device, runs=f"the BLEURT classifier built on {base}"))


def load_classifier(checkpoint: str | Path, *, base: str | Path | None = None, device: str = "auto") -> PlanClassifier:
    """Load a fine-tuned classifier.

    ``checkpoint`` is either a folder written by ``train_classifier`` (``plan_classifier.safetensors``
    + config + tokenizer), or a state-dict file saved by the release's ``finetune.py``
    (``best-model.ckpt``), which needs ``base``: the BLEURT checkpoint folder it was fine-tuned from.
    """
    checkpoint = _existing_path(checkpoint, "BLEURT classifier checkpoint")
    if checkpoint.is_dir():
        weights = checkpoint / CLASSIFIER_WEIGHTS
        if not weights.is_file():
            raise FileNotFoundError(f"{checkpoint} is not a plan-classifier folder (no {CLASSIFIER_WEIGHTS}); "
                                    "train one with `lmms-egoplan actplan-train-bleurt`")
        from safetensors.torch import load_file

        tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
        config = BertConfig.from_pretrained(str(checkpoint))
        state = load_file(str(weights))
    else:
        if not base:
            raise InputError(f"{checkpoint} is a state-dict file (the release's format): also give the BLEURT base "
                             "checkpoint folder it was fine-tuned from (setting bleurt_base / --bleurt-base)")
        base = _existing_path(base, "BLEURT base checkpoint")
        tokenizer = _base_tokenizer(base)
        config = BertConfig.from_pretrained(str(base))
        config.vocab_size = len(tokenizer)
        state = torch.load(checkpoint, map_location="cpu")
        # The release's BertModel carries an unused pooler, this head reads the [CLS] vector directly; finetune.py's
        # model also holds its loss, whose class weights (``loss.weight``) are training's only.
        state = {k: v for k, v in state.items() if not k.startswith(("bert.pooler.", "loss."))}
    module = PlanPairClassifier(config)
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise InputError(f"{checkpoint} does not fit a BERT + 2-way head classifier: "
                         f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    return PlanClassifier(module, tokenizer, resolve_device(device, runs=f"the BLEURT classifier {checkpoint}"))


def _existing_path(path: str | Path, what: str) -> Path:
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    return path


# ---------------------------------------------------------------------------------------------
# Fine-tuning data (release: bleu-cls/data/finetuning_data.jsonl + activities.txt)
# ---------------------------------------------------------------------------------------------


def load_finetuning_data(data_file: str | Path, activities_file: str | Path) -> tuple[dict[str, list[dict]], int]:
    """Rows of ``finetuning_data.jsonl`` by split of their activity, and how many rows no split names."""
    data_file = _existing_path(data_file, "fine-tuning data")
    split_of: dict[str, str] = {}
    for number, line in enumerate(read_text(_existing_path(activities_file, "activity split file")).splitlines(), 1):
        if not line.strip():
            continue
        fields = line.strip().split("\t")
        if len(fields) != 2 or fields[1] not in SPLITS:
            raise FinetuningDataError(f"{activities_file}:{number}: expected '<activity>\\t<train|val|test>', "
                                      f"got {line!r}")
        split_of[fields[0]] = fields[1]
    rows: dict[str, list[dict]] = {split: [] for split in SPLITS}
    unassigned = 0
    for number, row in read_jsonl(data_file, FinetuningDataError):
        missing = [key for key in ("activity", *_PLAN_LISTS) if key not in row]
        if missing:
            raise FinetuningDataError(f"{data_file}:{number}: missing {', '.join(missing)}")
        split = split_of.get(row["activity"])
        if split == "train" and not _positives(row):  # training draws a correct plan from every row
            raise FinetuningDataError(f"{data_file}:{number}: a training row with no gold or correct plan "
                                      f"({', '.join(POSITIVE_LISTS)} all empty)")
        if split is not None:
            rows[split].append(row)
        else:
            unassigned += 1
    return rows, unassigned


# The plans of a row the classifier learns as correct. The paper and the release's readme mix gold and correct plans
# of both VLMs as positives (the release's code leaves out pos_gpt).
POSITIVE_LISTS = ("gold_gpt", "pos_gpt", "pos_gemini", "gold_gemini")


def _positives(row: dict) -> list[str]:
    return [plan for name in POSITIVE_LISTS for plan in row[name]]


def training_pair(row: dict, rng: random.Random) -> tuple[str, str, int]:
    """One (reference, candidate, label) pair drawn from a training row (release ``EmbDataset``; every training row
    has a correct plan: ``load_finetuning_data``)."""
    positives = _positives(row)
    negatives = row["neg_gpt"] + row["neg_gemini"]
    draw = rng.random()
    if draw < 0.3:
        return (*_two_positives(positives, rng), 1)
    if draw < 0.8 and negatives:
        return rng.choice(positives), rng.choice(negatives), 0
    reference = rng.choice(positives)
    shuffled = _shuffled_steps(reference, rng)
    # A plan whose steps are all the same cannot be shuffled into a different plan.
    return (reference, shuffled, 0) if shuffled is not None else (*_two_positives(positives, rng), 1)


def _two_positives(positives: list[str], rng: random.Random) -> tuple[str, str]:
    return tuple(rng.sample(positives, 2)) if len(positives) > 1 else (positives[0], positives[0])


def _shuffled_steps(plan: str, rng: random.Random) -> str | None:
    # The release splits on newlines, but the released plans are single lines (steps joined by
    # spaces), so its "shuffled" negatives are the positive plan itself. Shuffle the steps.
    steps = parse_plan(plan).steps
    if len(set(steps)) < 2:
        return None
    shuffled = steps[:]
    while shuffled == steps:
        rng.shuffle(shuffled)
    return " ".join(shuffled)


@dataclass(frozen=True)
class EvaluationPair:
    reference: str
    candidate: str
    label: int
    vlm: str


def evaluation_pairs(rows: Iterable[dict]) -> tuple[list[EvaluationPair], int]:
    """Validation / test pairs as the release builds them, and how many rows lacked the gold needed.

    Every human-judged VLM plan is paired with one gold plan: GPT-4V plans with the first
    ``gold_gemini`` plan (the first ``gold_gpt`` one when there is none), Gemini plans with the
    first ``gold_gpt`` plan.
    """
    pairs: list[EvaluationPair] = []
    skipped = 0
    for row in rows:
        if not row["gold_gpt"]:
            skipped += 1
            continue
        references = {"gpt": (row["gold_gemini"] or row["gold_gpt"])[0], "gemini": row["gold_gpt"][0]}
        for vlm in VLMS:
            for label, kind in ((1, "pos"), (0, "neg")):
                pairs += [EvaluationPair(references[vlm], plan, label, vlm) for plan in row[f"{kind}_{vlm}"]]
    return pairs, skipped


def matthews_corrcoef(labels: Sequence[int], predictions: Sequence[int]) -> float:
    """MCC of binary labels; 0 when it is undefined (a constant row or column), as scikit-learn."""
    counts = Counter(zip(labels, predictions))
    tp, tn, fp, fn = counts[(1, 1)], counts[(0, 0)], counts[(0, 1)], counts[(1, 0)]
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


@dataclass
class SplitScores:
    """Accuracy overall and, per VLM, accuracy and MCC of one evaluation split."""

    loss: float
    accuracy: float
    per_vlm: dict[str, dict[str, float]] = field(default_factory=dict)


def score_split(classifier: PlanClassifier, pairs: Sequence[EvaluationPair], batch_size: int = 16) -> SplitScores:
    labels = [p.label for p in pairs]
    loss, predictions = classifier.evaluate([p.reference for p in pairs], [p.candidate for p in pairs], labels,
                                            batch_size)
    per_vlm = {}
    for vlm in VLMS:
        chosen = [i for i, p in enumerate(pairs) if p.vlm == vlm]
        if chosen:
            vlm_labels, vlm_predictions = [labels[i] for i in chosen], [predictions[i] for i in chosen]
            per_vlm[vlm] = {"n": len(chosen), "accuracy": _accuracy(vlm_labels, vlm_predictions),
                            "mcc": matthews_corrcoef(vlm_labels, vlm_predictions)}
    return SplitScores(loss=loss, accuracy=_accuracy(labels, predictions), per_vlm=per_vlm)


def _accuracy(labels: Sequence[int], predictions: Sequence[int]) -> float:
    return mean_or_nan(a == b for a, b in zip(labels, predictions))


@dataclass
class TrainingReport:
    best_epoch: int
    selected_by: str
    validation: SplitScores
    test: SplitScores
    checkpoint: Path
    counts: dict[str, int]


def _optimizer(module: PlanPairClassifier, config: TrainingConfig):
    no_decay = ("bias", "LayerNorm.weight", "LayerNorm.bias")
    named = list(module.named_parameters())
    groups = [
        {"params": [p for n, p in named if not any(nd in n for nd in no_decay)], "weight_decay": config.weight_decay},
        {"params": [p for n, p in named if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.learning_rate)


def train_classifier(data_file: str | Path, activities_file: str | Path, base: str | Path, output_dir: str | Path,
                     config: TrainingConfig = TrainingConfig(), *, device: str = "auto",
                     log: Callable[[str], None] = print) -> TrainingReport:
    """Fine-tune a classifier from ``base`` and keep the best validation epoch in ``output_dir``.

    Every epoch's scores are appended to ``output_dir/training_log.jsonl`` as soon as they are known,
    and the checkpoint is rewritten whenever validation improves.
    """
    rows, unassigned = load_finetuning_data(data_file, activities_file)
    if not rows["train"]:
        raise FinetuningDataError(f"no training rows: none of the activities in {data_file} is 'train' in "
                                  f"{activities_file}")
    val_pairs, val_skipped = evaluation_pairs(rows["val"])
    test_pairs, test_skipped = evaluation_pairs(rows["test"])
    if not val_pairs:
        raise FinetuningDataError(f"no validation pairs in {data_file}: checkpoint selection needs judged VLM plans of "
                                  f"'val' activities")
    counts = {"train_rows": len(rows["train"]), "val_pairs": len(val_pairs), "test_pairs": len(test_pairs),
              "rows_without_split": unassigned, "rows_without_gold": val_skipped + test_skipped}
    log(f"training rows {counts['train_rows']}, validation pairs {counts['val_pairs']}, test pairs "
        f"{counts['test_pairs']}"
        + (f"; {unassigned} rows whose activity is not in {activities_file} left out" if unassigned else "")
        + (f"; {counts['rows_without_gold']} evaluation rows without gold_gpt left out"
           if counts["rows_without_gold"] else ""))

    output_dir = make_folder(output_dir, "the classifier's output folder")  # before the base checkpoint is read
    classifier = classifier_from_base(base, device=device, seed=config.seed)
    positions = classifier.module.bert.config.max_position_embeddings
    if config.max_length > positions:  # found now, not as a tensor-size error in the first batch
        raise InputError(f"max_length {config.max_length} is more than the {positions} token positions of the BLEURT "
                         f"base checkpoint {base}")
    classifier.max_length = config.max_length
    optimizer = _optimizer(classifier.module, config)
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    best: tuple[int, SplitScores, SplitScores] | None = None
    if (output_dir / CLASSIFIER_INFO).exists():
        log(f"{output_dir} holds a classifier already: this training's best epoch replaces it once scored")
    log_file = LineAppender(output_dir / "training_log.jsonl", append=False)
    try:
        for epoch in range(config.epochs):
            train_loss = _train_epoch(classifier, optimizer, rows["train"], rng, config)
            validation = score_split(classifier, val_pairs, config.eval_batch_size)
            test = (score_split(classifier, test_pairs, config.eval_batch_size) if test_pairs
                    else SplitScores(math.nan, math.nan))
            improved = best is None or (validation.accuracy > best[1].accuracy if config.select_by == "accuracy"
                                        else validation.loss < best[1].loss)
            log_file.write(strict_json({"epoch": epoch, "train_loss": train_loss, "validation": asdict(validation),
                                        "test": asdict(test), "selected": improved}) + "\n")
            log(f"epoch {epoch}: train loss {train_loss:.4f}, validation accuracy {validation.accuracy:.4f} "
                f"(loss {validation.loss:.4f}), test accuracy {test.accuracy:.4f}" + (" *" if improved else ""))
            if improved:
                best = (epoch, validation, test)
                classifier.save(output_dir, {"format": "lmms_egoplan plan classifier",
                                             "input": "[CLS] gold [SEP] [SEP] generated [SEP]",
                                             "labels": {"0": "wrong", "1": "correct"}, "base": str(base),
                                             "epoch": epoch, "training": asdict(config),
                                             "validation": asdict(validation), "test": asdict(test)})
    finally:
        log_file.close()
    epoch, validation, test = best
    report = TrainingReport(best_epoch=epoch, selected_by=config.select_by, validation=validation, test=test,
                            checkpoint=output_dir, counts=counts)
    write_atomically(output_dir / "metrics.json", strict_json(
        {"best_epoch": epoch, "selected_by": config.select_by, "validation": asdict(validation), "test": asdict(test),
         "counts": counts}, indent=2) + "\n")
    return report


def _train_epoch(classifier: PlanClassifier, optimizer, rows: list[dict], rng: random.Random,
                 config: TrainingConfig) -> float:
    """One pass over the training rows in a shuffled order, a pair drawn from each; the mean training loss."""
    classifier.module.train()
    order = rng.sample(range(len(rows)), len(rows))
    train_loss = 0.0
    for start in range(0, len(order), config.batch_size):
        pairs = [training_pair(rows[i], rng) for i in order[start:start + config.batch_size]]
        logits = classifier.logits([p[0] for p in pairs], [p[1] for p in pairs])
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor([p[2] for p in pairs], device=classifier.device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(classifier.module.parameters(), config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        train_loss += loss.item() * len(pairs)
    return train_loss / len(order)


def format_report(report: TrainingReport) -> str:
    """Table 5's layout: per VLM, validation MCC and accuracy, test accuracy (and test MCC)."""
    rows = []
    for vlm in VLMS:
        val, test = report.validation.per_vlm.get(vlm), report.test.per_vlm.get(vlm)
        if val or test:
            rows.append((vlm, _cell(val, "mcc", 1, 3), _cell(val, "accuracy", 100, 1), _cell(test, "accuracy", 100, 1),
                         _cell(test, "mcc", 1, 3)))
    rows.append(("all", "", f"{report.validation.accuracy * 100:.1f}", f"{report.test.accuracy * 100:.1f}", ""))
    return (f"best epoch {report.best_epoch} (by validation {report.selected_by}); checkpoint: {report.checkpoint}\n"
            + format_table(("VLM", "MCC(val)", "Val acc", "Test acc", "MCC(test)"), rows, right=(1, 2, 3, 4)))


def _cell(scores: dict | None, key: str, scale: float, digits: int) -> str:
    return "-" if not scores else f"{scores[key] * scale:.{digits}f}"
