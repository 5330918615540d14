"""What a results file records of what produced it (issue 65, point 6): the software and machine
(``environment``) and where a task's documents came from (``data_source``)."""

import hashlib
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
import torch

from lmms_egoplan.core.provenance import data_source, environment

CHECKOUT = Path(__file__).resolve().parents[2]


def test_the_environment_names_each_package_its_release_and_the_suites_commit():
    recorded = environment()
    assert recorded["lmms_eval"] == version("lmms-eval") and recorded["lm_eval"] == version("lm-eval")
    assert recorded["transformers"] == version("transformers") and recorded["torch"] == torch.__version__
    assert recorded["cuda"] == torch.version.cuda
    assert recorded["gpus"] == ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                                if torch.cuda.is_available() else [])
    suite = recorded["lmms_egoplan"]
    assert suite["version"] == version("lmms-egoplan")
    head = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # the tests run from the checkout the suite is installed from (editable)
        assert suite["commit"] == head.stdout.strip() and isinstance(suite["uncommitted_changes"], bool)


def test_a_file_is_recorded_with_its_sha256_and_a_folder_with_its_annotation_files_digest(tmp_path):
    annotation = tmp_path / "EgoPlan_validation.json"
    annotation.write_text('[{"sample_id": 1}]')
    release = tmp_path / "release"
    (release / "event").mkdir(parents=True)
    (release / "event" / "label.json").write_text("{}")
    (release / "event" / "clip.mp4").write_bytes(b"\0" * 64)
    file_entry, folder_entry, hub_entry, missing = data_source(
        [str(annotation), str(release), "hub:EgoThink/EgoThink@abc123", str(tmp_path / "gone.json")])
    assert file_entry == {"file": str(annotation), "sha256": hashlib.sha256(annotation.read_bytes()).hexdigest()}
    assert folder_entry["folder"] == str(release) and folder_entry["annotation_files"] == 1
    assert hub_entry == {"hub": "EgoThink/EgoThink", "revision": "abc123"}
    assert missing == {"path": str(tmp_path / "gone.json"), "sha256": None}
    assert data_source(["hub:EgoThink/EgoThink@"]) == [{"hub": "EgoThink/EgoThink", "revision": None}]

    (release / "event" / "clip.mp4").write_bytes(b"\1" * 64)  # a media file changed: the annotations did not
    assert data_source([str(release)])[0]["sha256"] == folder_entry["sha256"]
    (release / "event" / "label.json").write_text('{"step": 1}')
    assert data_source([str(release)])[0]["sha256"] != folder_entry["sha256"]


def test_an_unpinned_hub_revision_is_resolved_to_its_commit_which_the_task_loads_and_records(tmp_path, monkeypatch):
    from lmms_egoplan.contract.benchmark import TaskContext
    from lmms_egoplan.core.hub_download import _answered_commit, resolved_commit
    from lmms_egoplan.demo import egothink
    from lmms_egoplan.egothink import task
    from lmms_egoplan.egothink.data import DIMENSIONS
    from lmms_egoplan.egothink.protocol import EgoThinkSettings
    from tests.kit.loopback_hub import LoopbackHub

    loaded = []
    monkeypatch.setattr(task, "load_hub_dimension", lambda repo, dimension, *, revision, **_: loaded.append(revision)
                        or [])
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # the tiny checkpoints' tests set it
    _answered_commit.cache_clear()
    context = TaskContext("ego_think_existence", EgoThinkSettings(source="hub"), dataset_name=next(iter(DIMENSIONS)))
    with LoopbackHub() as hub:
        hub.add("EgoThink/EgoThink", egothink.write_release(tmp_path / "repo"))
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        commit = hub.datasets["EgoThink/EgoThink"].sha
        assert task.load_docs(context).read_from == [f"hub:EgoThink/EgoThink@{commit}"]
    assert loaded == [commit]  # the commit recorded is the one loaded
    assert data_source([f"hub:EgoThink/EgoThink@{commit}"]) == [{"hub": "EgoThink/EgoThink", "revision": commit}]
    assert resolved_commit("EgoThink/EgoThink", "a" * 40) == "a" * 40  # a pinned commit asks no Hub
    _answered_commit.cache_clear()
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    assert resolved_commit("EgoThink/EgoThink") is None  # offline: the load reads its cache, unpinned
    _answered_commit.cache_clear()


def test_a_commit_the_hub_did_not_name_is_asked_again_by_the_next_task_and_a_named_one_kept(tmp_path, monkeypatch):
    """A Hub refusing once (here: the dataset not there yet; a 5xx alike) left every later task of the process
    loading the dataset unpinned; a commit the Hub named is kept, so that every task of a run loads the same."""
    from lmms_egoplan.core.hub_download import _answered_commit, resolved_commit
    from tests.kit.loopback_hub import LoopbackHub

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # the tiny checkpoints' tests set it
    _answered_commit.cache_clear()
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "README.md").write_text("a dataset")
    with LoopbackHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        # A Hub that answers "not there" was reached: no "cannot be reached", the load that follows names it.
        assert resolved_commit("EgoThink/EgoThink") is None
        hub.add("EgoThink/EgoThink", tmp_path / "repo")
        commit = hub.datasets["EgoThink/EgoThink"].sha
        assert resolved_commit("EgoThink/EgoThink") == commit
        hub.datasets["EgoThink/EgoThink"].sha = "b" * 40  # the branch moves during the run
        assert resolved_commit("EgoThink/EgoThink") == commit
    _answered_commit.cache_clear()


def test_a_hub_model_or_dataset_with_the_hub_unreachable_fails_in_seconds_saying_what_to_do(monkeypatch):
    """No retries for minutes: one probe, then what to do (HF_HUB_OFFLINE for a cached copy, prepare or hf download
    to fetch it), for egoplan_hf's checkpoint as for a task's Hub dataset."""
    import time

    from lmms_egoplan.core.hub_download import HubFetchError, _answered_commit, resolved_commit
    from lmms_egoplan.models.egoplan_hf import EgoPlanHF

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # the tiny checkpoints' tests set it
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    _answered_commit.cache_clear()
    started = time.monotonic()
    with pytest.raises(HubFetchError, match=r"EgoThink/EgoThink: the Hugging Face Hub cannot be reached .* set "
                                            r"HF_HUB_OFFLINE=1 .*`lmms-egoplan prepare`"):
        resolved_commit("EgoThink/EgoThink")
    with pytest.raises(HubFetchError, match=r"Qwen/Qwen2-VL-2B-Instruct: the Hugging Face Hub cannot be reached .* "
                                            r"HF_HUB_OFFLINE=1 .*`hf download Qwen/Qwen2-VL-2B-Instruct`"):
        EgoPlanHF(pretrained="Qwen/Qwen2-VL-2B-Instruct", revision="main", device="cpu")
    assert time.monotonic() - started < 30
    _answered_commit.cache_clear()


def test_a_checkpoint_or_hf_judge_path_that_names_no_folder_is_said_so(tmp_path):
    """huggingface_hub took the path for a Hub id: "Repo id must be in the form 'repo_name' or
    'namespace/repo_name'", with the Hub unreachable or not, offline too."""
    from lmms_egoplan.core.errors import InputError
    from lmms_egoplan.judge.engine import preflight
    from lmms_egoplan.judge.settings import JudgeSettings, JudgeSetupError
    from lmms_egoplan.models.egoplan_hf import EgoPlanHF

    missing = tmp_path / "models" / "Qwen2.5-VL-7B-Instruct"
    with pytest.raises(InputError, match=rf"^{missing}: no such folder \(a path names no Hub model\)$"):
        EgoPlanHF(pretrained=str(missing), device="cpu")
    with pytest.raises(JudgeSetupError, match=rf"^the hf judge cannot be loaded: {missing}: no such folder"):
        preflight(JudgeSettings(judge_backend="hf", judge_model=str(missing), judge_cache_dir=None))


def test_a_model_is_named_by_its_revision_and_the_hashes_of_its_weights_index_and_chat_template(tmp_path):
    from lmms_egoplan.core.provenance import model_identity

    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "model.safetensors.index.json").write_text('{"weight_map": {"a": "model-1.safetensors"}}')
    (sharded / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    assert model_identity(str(sharded)) == {
        "pretrained": str(sharded), "revision": None, "commit": None,
        "weights_index_sha256": hashlib.sha256(b'{"weight_map": {"a": "model-1.safetensors"}}').hexdigest(),
        "chat_template_sha256": hashlib.sha256(b"{{ messages }}").hexdigest()}
    (sharded / "chat_template.jinja").write_text("{{ other }}")  # the template file over the tokenizer config's
    assert model_identity(str(sharded))["chat_template_sha256"] == hashlib.sha256(b"{{ other }}").hexdigest()
    absent = model_identity("no-such-org/no-such-model", "v1")  # not in this machine's Hub cache: nothing asked
    assert absent == {"pretrained": "no-such-org/no-such-model", "revision": "v1", "commit": None,
                      "weights_index_sha256": None, "chat_template_sha256": None}


def test_a_folders_digest_skips_tools_hidden_bookkeeping_but_not_a_folder_that_lies_under_a_hidden_one(tmp_path):
    release = tmp_path / ".cache" / "release"  # where data often lies: under ~/.cache
    (release / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (release / "label.json").write_text("{}")
    metadata = release / ".cache" / "huggingface" / "download" / "label.json.metadata"
    metadata.write_text("commit\netag\n1795873084.4\n")
    [entry] = data_source([str(release)])
    assert entry["annotation_files"] == 1
    metadata.write_text("commit\netag\n1795873999.9\n")  # the same file checked again by huggingface_hub
    (release / ".DS_Store").write_bytes(b"\0")
    assert data_source([str(release)]) == [entry]
