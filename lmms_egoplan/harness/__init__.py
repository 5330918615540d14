"""How the suite plugs into the harnesses: ``benchmark`` (what a benchmark is to the suite: one ``Benchmark`` value,
and what a task does: a ``TaskSpec`` whose hooks get a ``TaskContext``; loaded without any harness), ``lmms_eval_task``
(lmms-eval's adapter, ``SuiteTask``), ``lm_eval_task`` (lm-eval's, ``SuiteBaseline``, for the text-only baselines),
what both hold: ``task_setup`` (a benchmark and a spec made into a harness task) and ``judged`` (the judge of a
judged task), ``contract`` (what a benchmark's hooks may read of an adapter, a Protocol), ``rejudge`` (judging
logged samples again). The lmms-eval workarounds they use are below them, in ``lmms_egoplan.compat``."""
