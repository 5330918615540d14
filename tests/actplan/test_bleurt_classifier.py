"""ActPlan-1K's BLEURT plan classifier: input format, training pairs, fine-tuning command, checkpoints."""

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import torch

from lmms_egoplan.actplan import classifier as bleurt
from lmms_egoplan.actplan import classifier_config
from lmms_egoplan.actplan.classifier import (
    RELEASE_SPECIAL_TOKENS,
    PlanPairClassifier,
    classifier_from_base,
    evaluation_pairs,
    load_classifier,
    load_finetuning_data,
    matthews_corrcoef,
    score_split,
    training_pair,
)
from lmms_egoplan.actplan.plans import parse_plan
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.demo.actplan import build_tiny_bert, write_finetuning_data


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny-bleurt")


@pytest.fixture(scope="module")
def finetuning(tmp_path_factory):
    return write_finetuning_data(tmp_path_factory.mktemp("finetuning"), activities=10)


def test_pair_input_is_the_releases(tiny_bert):
    classifier = classifier_from_base(tiny_bert, device="cpu")
    encoded = classifier.encode(["walk_to(table) grab(cup)"], ["place_inside(sink, cup) switch-on(faucet)"])
    tokens = classifier.tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    # [CLS] gold [SEP] + "[SEP] generated" [SEP]; the release's action names are single tokens.
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    first_sep = tokens.index("[SEP]")
    assert tokens[first_sep + 1] == "[SEP]" and tokens.count("[SEP]") == 3
    assert {"walk_to", "place_inside", "switch-on"} <= set(tokens)
    assert encoded["token_type_ids"][0].tolist() == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    assert set(RELEASE_SPECIAL_TOKENS) <= set(classifier.tokenizer.all_special_tokens)
    assert classifier.module.bert.get_input_embeddings().num_embeddings == len(classifier.tokenizer)


def test_training_pairs_follow_the_release_sampling():
    row = {"activity": "a", "gold_gpt": ["walk_to(a) grab(b)"], "pos_gpt": ["walk_to(a) grab(b) open(c)"],
           "pos_gemini": [], "gold_gemini": ["walk_to(x) grab(b)"], "neg_gpt": ["grab(z)"], "neg_gemini": []}
    positives = set(row["gold_gpt"] + row["pos_gpt"] + row["gold_gemini"])
    rng = random.Random(0)
    draws = [training_pair(row, rng) for _ in range(3000)]
    labels = Counter(label for _, _, label in draws)
    assert labels[1] / len(draws) == pytest.approx(0.3, abs=0.03)
    for reference, candidate, label in draws:
        assert reference in positives
        if label:
            assert candidate in positives and candidate != reference  # two different correct plans
        elif candidate != "grab(z)":  # otherwise a shuffle of the reference's own steps
            assert sorted(parse_plan(candidate).steps) == sorted(parse_plan(reference).steps)
            assert candidate != " ".join(parse_plan(reference).steps)
    wrong = sum(candidate == "grab(z)" for _, candidate, _ in draws) / len(draws)
    assert wrong == pytest.approx(0.5, abs=0.03)
    # Without wrong VLM plans every negative is a shuffle.
    no_negatives = {**row, "neg_gpt": []}
    assert all(label == 1 or c not in positives
               for _, c, label in (training_pair(no_negatives, rng) for _ in range(200)))


def test_evaluation_pairs_as_the_release_builds_them():
    rows = [{"activity": "a", "gold_gpt": ["G1"], "gold_gemini": ["G2"], "pos_gpt": ["p"], "neg_gpt": ["n"],
             "pos_gemini": [], "neg_gemini": ["m"]},
            {"activity": "b", "gold_gpt": ["H1"], "gold_gemini": [], "pos_gpt": [], "neg_gpt": ["q"],
             "pos_gemini": ["r"], "neg_gemini": []},
            {"activity": "c", "gold_gpt": [], "gold_gemini": ["K"], "pos_gpt": ["s"], "neg_gpt": [], "pos_gemini": [],
             "neg_gemini": []}]
    pairs, skipped = evaluation_pairs(rows)
    assert [(p.reference, p.candidate, p.label, p.vlm) for p in pairs] == [
        ("G2", "p", 1, "gpt"), ("G2", "n", 0, "gpt"), ("G1", "m", 0, "gemini"),
        ("H1", "q", 0, "gpt"), ("H1", "r", 1, "gemini")]
    assert skipped == 1


@pytest.mark.filterwarnings("ignore:A single label:UserWarning")
def test_mcc_matches_scikit_learn():
    from sklearn.metrics import matthews_corrcoef as reference

    rng = random.Random(3)
    for _ in range(50):
        labels = [rng.randrange(2) for _ in range(rng.randrange(1, 30))]
        predictions = [rng.randrange(2) for _ in labels]
        assert matthews_corrcoef(labels, predictions) == pytest.approx(reference(labels, predictions))


def test_fine_tuning_command_keeps_the_best_validation_epoch(tiny_bert, finetuning, tmp_path, capsys):
    from lmms_egoplan.cli import main

    data, activities = finetuning
    output = tmp_path / "classifier"
    assert main(["actplan-train-bleurt", "--data", str(data), "--activities", str(activities), "--base", str(tiny_bert),
                 "--output", str(output), "--epochs", "3", "--learning_rate", "3e-3", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    log = [json.loads(line) for line in (output / "training_log.jsonl").read_text().splitlines()]
    metrics = json.loads((output / "metrics.json").read_text())
    assert len(log) == 3
    accuracies = [epoch["validation"]["accuracy"] for epoch in log]
    assert metrics["best_epoch"] == accuracies.index(max(accuracies))
    assert f"best epoch {metrics['best_epoch']}" in printed and "MCC(val)" in printed
    # The saved checkpoint is the selected epoch's: reloading it reproduces its validation scores.
    rows, _ = load_finetuning_data(data, activities)
    validation = score_split(load_classifier(output, device="cpu"), evaluation_pairs(rows["val"])[0])
    assert validation.accuracy == metrics["validation"]["accuracy"]
    assert validation.per_vlm == metrics["validation"]["per_vlm"]
    info = json.loads((output / bleurt.CLASSIFIER_INFO).read_text())
    assert info["epoch"] == metrics["best_epoch"] and info["training"]["batch_size"] == 12


def test_a_checkpoint_that_cannot_be_saved_whole_leaves_the_one_before_as_it_was(tiny_bert, tmp_path, monkeypatch):
    """Each improved epoch replaced the best checkpoint so far file by file in place: a full disk or a crash while
    its weights were written left neither epoch's classifier."""
    import errno

    import safetensors.torch

    from lmms_egoplan.core.errors import StorageError

    output = tmp_path / "classifier"
    first = classifier_from_base(tiny_bert, device="cpu", seed=1)
    first.save(output, {"epoch": 0})
    saved = (output / classifier_config.CLASSIFIER_WEIGHTS).read_bytes()

    def disk_fills(tensors, path):
        Path(path).write_bytes(b"\0" * 100)  # a part of the weights, then no space
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", disk_fills)
    with pytest.raises(StorageError, match=rf"cannot save the classifier in {output}: the disk is full \(No space "
                                           rf"left on device\); the checkpoint there before is kept"):
        classifier_from_base(tiny_bert, device="cpu", seed=2).save(output, {"epoch": 1})
    assert (output / classifier_config.CLASSIFIER_WEIGHTS).read_bytes() == saved
    assert json.loads((output / bleurt.CLASSIFIER_INFO).read_text()) == {"epoch": 0}
    assert sorted(path.name for path in output.iterdir() if path.name.startswith(".")) == []
    reloaded = load_classifier(output, device="cpu")
    assert all(torch.equal(reloaded.module.state_dict()[name], value)
               for name, value in first.module.state_dict().items())


def test_a_training_row_without_a_correct_plan_is_named_when_the_data_is_read(finetuning, tmp_path):
    """Training draws a correct plan from every training row: one without any stops the command before the model
    loads, naming the file and line (not an epoch later, naming neither)."""
    data, activities = finetuning
    train = {line.split("\t")[0] for line in activities.read_text().splitlines() if line.endswith("\ttrain")}
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    number = next(n for n, row in enumerate(rows, 1) if row["activity"] in train)
    rows[number - 1].update(gold_gpt=[], pos_gpt=[], pos_gemini=[], gold_gemini=[])
    damaged = tmp_path / "finetuning_data.jsonl"
    damaged.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(bleurt.FinetuningDataError, match=rf"{damaged}:{number}: a training row with no gold or correct "
                                                         rf"plan \(gold_gpt, pos_gpt, pos_gemini, gold_gemini all "
                                                         rf"empty\)"):
        load_finetuning_data(damaged, activities)


@pytest.mark.parametrize("setting, value, message", [
    ("epochs", 0, "epochs must be at least 1, got 0"),
    ("batch_size", 0, "batch_size must be at least 1"),
    ("learning_rate", 0.0, "learning_rate must be positive"),
    ("select_by", "f1", "select_by must be one of accuracy, loss"),
])
def test_training_settings_that_cannot_train_are_input_errors(setting, value, message):
    with pytest.raises(InputError, match=message):
        bleurt.TrainingConfig(**{setting: value})


def test_training_command_reports_bad_input_in_one_line(tiny_bert, finetuning, tmp_path, capsys):
    from lmms_egoplan.cli import main

    data, activities = finetuning
    given = {"--data": str(data), "--activities": str(activities), "--base": str(tiny_bert),
             "--output": str(tmp_path / "out")}

    def one_line_error(**changed) -> str:
        argv = [item for option, value in {**given, **changed}.items() for item in (option, value)]
        assert main(["actplan-train-bleurt", *argv, "--device", "cpu"]) == 2
        error = capsys.readouterr().err
        assert error.startswith("lmms-egoplan actplan-train-bleurt: ") and "Traceback" not in error
        return error

    assert (f"fine-tuning data not found: {tmp_path / 'missing.jsonl'}"
            in one_line_error(**{"--data": str(tmp_path / "missing.jsonl")}))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(data.read_text().splitlines()[0] + "\n[]\n")
    assert f"{bad}:2: expected a JSON object, got list" in one_line_error(**{"--data": str(bad)})
    assert "epochs must be at least 1, got 0" in one_line_error(**{"--epochs": "0"})
    assert not (tmp_path / "out").exists()  # nothing was trained
    with pytest.raises(SystemExit) as exit:
        main(["actplan-train-bleurt", *[item for pair in given.items() for item in pair], "--preset", "bleurt-tiny"])
    assert exit.value.code == 2 and "argument --preset: invalid choice: 'bleurt-tiny'" in capsys.readouterr().err


def test_optimizer_and_presets_follow_the_paper(tiny_bert):
    assert classifier_config.PRESET_LEARNING_RATES == {"bleurt": 5e-6, "bleurt-base": 1e-6}
    config = bleurt.TrainingConfig()
    assert (config.learning_rate, config.batch_size, config.epochs, config.select_by) == (5e-6, 12, 70, "accuracy")
    module = classifier_from_base(tiny_bert, device="cpu").module
    decayed, not_decayed = bleurt._optimizer(module, config).param_groups
    names = {id(p): n for n, p in module.named_parameters()}
    assert decayed["weight_decay"] == 0.01 and not_decayed["weight_decay"] == 0.0
    assert all(names[id(p)].endswith("bias") or "LayerNorm" in names[id(p)] for p in not_decayed["params"])
    assert not any(names[id(p)].endswith("bias") for p in decayed["params"])


def test_release_state_dict_checkpoints_load_with_their_base(tiny_bert, tmp_path):
    # finetune.py saves BleurtModel.state_dict(): bert.* (pooler included), mlp.* and its CrossEntropyLoss's class
    # weights (loss.weight); finetune_large.py's model has an unweighted loss, so no loss.* key.
    trained = classifier_from_base(tiny_bert, device="cpu", seed=5)
    state = trained.module.state_dict()
    hidden = trained.module.bert.config.hidden_size
    state.update({"bert.pooler.dense.weight": torch.zeros(hidden, hidden),
                  "bert.pooler.dense.bias": torch.zeros(hidden), "loss.weight": torch.tensor([1.0, 1.0])})
    checkpoint = tmp_path / "best-model.ckpt"
    torch.save(state, checkpoint)
    with pytest.raises(ValueError, match="also give the BLEURT base"):
        load_classifier(checkpoint, device="cpu")
    loaded = load_classifier(checkpoint, base=tiny_bert, device="cpu")
    assert isinstance(loaded.module, PlanPairClassifier)
    pairs = (["walk_to(a) grab(b)", "open(c)"], ["grab(b)", "open(c) close(c)"])
    trained.module.eval()
    loaded.module.eval()
    with torch.no_grad():
        assert torch.allclose(trained.logits(*pairs), loaded.logits(*pairs))
    with pytest.raises(FileNotFoundError, match="not a plan-classifier folder"):
        load_classifier(tmp_path, device="cpu")
