"""Each judged benchmark names its judge's endpoint in a setting of its own (``<PREFIX>_JUDGE_BASE_URL``): a run of
EgoThink and EgoIntent together reaches each one's server, and neither reads lmms-eval's global ``OPENAI_API_URL``."""

from __future__ import annotations

from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.egointent.data import ENV_PREFIX as EGOINTENT
from lmms_egoplan.egointent.protocol import EgoIntentSettings
from lmms_egoplan.egothink.data import ENV_PREFIX as EGOTHINK
from lmms_egoplan.egothink.protocol import EgoThinkSettings
from lmms_egoplan.judge.settings import DEFAULT_JUDGE_BASE_URL


def test_egothink_and_egointent_in_one_run_each_reach_their_own_judge():
    environ = {"EGOTHINK_JUDGE_BASE_URL": "https://api.openai.com/v1",
               "EGOINTENT_JUDGE_BASE_URL": "http://127.0.0.1:8001/v1", "OPENAI_API_URL": "http://127.0.0.1:9/v1"}
    egothink = resolve_settings(EgoThinkSettings, task="ego_think_counting", metadata={}, env_prefix=EGOTHINK,
                                environ=environ)
    egointent = resolve_settings(EgoIntentSettings, task="egointent", metadata={}, env_prefix=EGOINTENT,
                                 environ=environ)
    assert (egothink.judge_base_url, egointent.judge_base_url) == ("https://api.openai.com/v1",
                                                                   "http://127.0.0.1:8001/v1")
    only_global = resolve_settings(EgoThinkSettings, task="ego_think_counting", metadata={}, env_prefix=EGOTHINK,
                                   environ={"OPENAI_API_URL": "http://127.0.0.1:9/v1"})
    assert only_global.judge_base_url == DEFAULT_JUDGE_BASE_URL
