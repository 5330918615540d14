"""The error lines of failed runs, in process: a backend without loglikelihood told apart by its code, a
backend failing while it is built named, lmms-eval's built-in names mapped to the suite tasks that implement
their papers, a missing file named with its setting (the runs themselves: tests/e2e/test_failed_runs.py)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from lmms_egoplan.compat import durability
from lmms_egoplan.harness.backend_choice import computes_loglikelihood


def test_lmms_evals_backends_without_loglikelihood_are_told_apart_by_their_code():
    from lmms_eval.models.simple.dummy import Dummy
    from lmms_eval.models.simple.vllm import VLLM

    from lmms_egoplan.models.egoplan_hf import EgoPlanHF

    assert computes_loglikelihood(EgoPlanHF) and computes_loglikelihood(Dummy)
    assert not computes_loglikelihood(VLLM)  # its loglikelihood asserts False

    class Asserts:
        def loglikelihood(self, requests):
            """Not supported."""
            assert False, "not supported"

    assert not computes_loglikelihood(Asserts)


def test_a_backend_failing_while_it_is_built_is_named_in_the_error_line():
    namespace = {"__name__": "lmms_eval.api.model"}
    exec("def create_from_arg_string(arg_string):\n    raise TypeError('X.__init__() missing 1 required positional "
         "argument: engine')\n", namespace)

    def simple_evaluate(model, model_args):
        namespace["create_from_arg_string"](model_args)

    with pytest.raises(TypeError) as raised:
        simple_evaluate("some_backend", "a=1")
    assert durability.error_line(raised.value) == (
        "--model some_backend could not be loaded: TypeError: X.__init__() missing 1 required positional argument: "
        "engine; the suite's tasks also run on its own backends: --model egoplan_hf (transformers) or --model "
        "egoplan_server (an SGLang / vLLM server)")
    with pytest.raises(ValueError) as elsewhere:
        raise ValueError("a task failed")
    assert durability.error_line(elsewhere.value) == "ValueError: a task failed"


def test_a_model_args_item_without_a_value_is_named_not_lmms_evals_unpacking_error():
    from lmms_eval.api.model import lmms

    def simple_evaluate(model, model_args):
        lmms.create_from_arg_string(model_args)  # lmms-eval's parser, as its simple_evaluate calls it

    with pytest.raises(ValueError, match="not enough values to unpack") as raised:
        simple_evaluate("egoplan_hf", "pretrained=/models/m,bfloat16,max_frames=8,8")
    assert durability.error_line(raised.value) == (
        "--model egoplan_hf could not be loaded: --model_args: 'bfloat16', '8' are no key=value items (the items "
        "are key=value, separated by commas)")


def test_a_missing_file_names_the_setting_and_what_its_folder_holds(tmp_path):
    from lmms_egoplan.core.files import missing_file_message

    folder = tmp_path / "annotations"
    message = missing_file_message("the file a.json", folder / "a.json", "X_DIR", "X_FILE")
    assert message == (f"the file a.json not found: the folder {folder}, named by X_DIR, does not exist; "
                       "point it at the folder that holds a.json, or set X_FILE to the file")
    folder.mkdir()
    message = missing_file_message("a", folder / "a.json", "X_DIR", "X_FILE")
    assert f"the folder {folder}, named by X_DIR, is empty;" in message
    for name in "bcdefgh":
        (folder / f"{name}.json").write_text("[]")
    assert "X_DIR, holds b.json, c.json, d.json, e.json, f.json and 2 more;" in \
        missing_file_message("a", folder / "a.json", "X_DIR", "X_FILE")
    (folder / "a.json").mkdir()  # the file setting names a folder: that setting is the one to fix, not the folder's
    assert missing_file_message("a", folder / "a.json", "X_DIR", "X_FILE") == \
        f"a is a folder, not a file: {folder / 'a.json'}; set X_FILE to the file itself"
    assert missing_file_message("a", folder / "a.json", "X_DIR", None).endswith("; check X_DIR")


def test_a_backend_without_loglikelihood_is_told_from_its_source_without_importing_it():
    """``qwen2_vl``'s module imports decord (absent from a plain install) and takes long to import: the suite reads
    its class from source (its registry's class path, the bases through their modules' imports) and says what it
    needs on a CPU-only machine, in a fresh interpreter where nothing of the backend gets imported."""
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from lmms_eval.models import MODEL_REGISTRY_V2 as registry\n"
        "from lmms_egoplan.harness import backend_source\n"
        "paths = {m: registry.resolve(m, force_simple=s).class_path for m, s in "
        "[('qwen2_vl', False), ('qwen2_5_vl', False), ('vllm', True), ('llava_hf', False), ('dummy', False), "
        "('egoplan_hf', False)]}\n"
        "found = {m: [backend_source.computes_loglikelihood(p), backend_source.needs(p)] for m, p in paths.items()}\n"
        "print(json.dumps([found, sorted(m for m in sys.modules if m.startswith('lmms_eval.models.') and "
        "m.count('.') > 2), 'decord' in sys.modules]))\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    found, imported, decord_imported = json.loads(run.stdout.strip().splitlines()[-1])
    assert imported == [] and not decord_imported
    assert {m: computes for m, (computes, _) in found.items()} == {
        "qwen2_vl": False, "qwen2_5_vl": False, "vllm": False, "llava_hf": True, "dummy": True, "egoplan_hf": True}
    cpu = "device=cpu,device_map=cpu in its --model_args on a machine without a CUDA GPU"
    decord = "" if importlib.util.find_spec("decord") else \
        ", and decord, which it imports and this environment lacks (pip install decord)"
    assert found["qwen2_vl"][1] == found["llava_hf"][1] == cpu + decord
    assert found["dummy"][1] == found["egoplan_hf"][1] == ""  # no device to choose, or the CPU chosen where no GPU


def test_a_class_the_source_cannot_follow_is_left_to_its_import():
    from lmms_egoplan.harness import backend_source

    assert backend_source.computes_loglikelihood("no_such_package.module.Backend") is None
    assert backend_source.computes_loglikelihood("lmms_eval.models.simple.qwen2_vl.NoSuchClass") is None
    assert backend_source.needs("no_such_package.module.Backend") == ""
