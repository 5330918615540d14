"""Runs through the real lmms-eval CLI for the end-to-end tests of bad input, judge failures and resuming: a damaged
copy of the synthetic EgoPlan data, a run, its documents; EgoThink run arguments; strict JSON checks."""

from __future__ import annotations

import json
from pathlib import Path


def broken_copy(egoplan_data, tmp_path):
    """A copy of the EgoPlan data to damage."""
    import shutil

    from lmms_egoplan.demo.egoplan import build_fixture

    shutil.copytree(egoplan_data.root, tmp_path / "data")
    return build_fixture(tmp_path / "data")


def egoplan_run(data, output: Path, *, model: str = "dummy", model_args: str = "", extra_args=(), **settings):
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    # dummy follows lmms-eval's conventions: no end-of-turn token, the mean over every scored token
    scored = {} if model == "egoplan_hf" else {"scored_tokens": "answer", "loss_mean": "every_scored_token"}
    return run_lmms_eval(model=model, model_args=model_args, tasks=["egoplan_val"], output_dir=output,
                         env=data.env(**{**scored, **settings}), extra_args=list(extra_args), check=False)


def first_epic_frame(data) -> Path:
    doc = next(d for d in load_docs(data) if d["media_kind"] == "epic_frames")
    return Path(doc["media_path"]) / f"frame_{doc['clips'][0][-2]:010d}.jpg"


def load_docs(data, **settings):
    from lmms_egoplan.core.settings import resolve_settings
    from lmms_egoplan.egoplan import data as egoplan_data
    from lmms_egoplan.egoplan import settings as egoplan_settings

    resolved = resolve_settings(egoplan_settings.EgoPlanSettings, task="check",
                                metadata={"annotation_file": "EgoPlan_validation.json"},
                                env_prefix="EGOPLAN", environ=data.env(**settings))
    return egoplan_data.load_samples(resolved, labelled=True).docs


def png_bytes(image) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def strict_json_files(run) -> None:
    """Every results and samples file of the run parses as strict JSON (no NaN, no Infinity)."""
    for path in [*run.output_dir.rglob("*_results.json"), *run.output_dir.rglob("*_samples_*.jsonl")]:
        for line in [path.read_text()] if path.suffix == ".json" else path.read_text().splitlines():
            json.loads(line, parse_constant=refuse_constant)


def refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def egothink_run_args(data: Path, model, judge, cache: Path, model_concurrency: int | None = None, **settings) -> dict:
    """``--model openai`` on the loopback ``model``, EgoThink's counting task judged by ``judge``, ``--use_cache``;
    ``model_concurrency``: the backend's ``num_concurrent`` (32 by default: the suite's response cache then stores
    its 12 questions as one chunk), ``settings``: EgoThink settings."""
    env = {"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data), "EGOTHINK_JUDGE_BASE_URL": judge.base_url,
           "EGOTHINK_JUDGE_MODEL": "loopback-judge", "EGOTHINK_JUDGE_API_KEY_ENV": "",
           "EGOTHINK_JUDGE_CACHE_DIR": str(cache / "judge"),
           **{f"EGOTHINK_{name.upper()}": value for name, value in settings.items()}}
    concurrency = f",num_concurrent={model_concurrency}" if model_concurrency else ""
    return dict(model="openai", model_args=f"model_version=fake,base_url={model.base_url},api_key=unused{concurrency}",
                tasks=["ego_think_counting"], env=env, extra_args=["--use_cache", str(cache / "responses")])
