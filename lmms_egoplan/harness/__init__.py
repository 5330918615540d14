"""How the suite plugs into the harnesses: ``benchmark`` (what a benchmark is to the suite: one value, loaded
without any harness), ``task_setup`` (the set-up both adapters share),
``contract`` (what a benchmark's scoring may read from an adapter, a Protocol), ``lmms_eval_task``
(lmms-eval's adapter), ``lm_eval_task`` (lm-eval's, for the text-only baselines), ``judged`` (tasks
rated by an LLM judge), ``rejudge`` (judging logged samples again). The lmms-eval workarounds they
use are below them, in ``lmms_egoplan.compat``."""
