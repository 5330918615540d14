"""How the suite plugs into the harnesses: ``lmms_eval_task`` (lmms-eval's adapter, ``SuiteTask``), ``lm_eval_task``
(lm-eval's, ``SuiteBaseline``, for the text-only baselines), what both do: ``compiled_task`` (a benchmark, a spec and
the YAML's config compiled into the config the harness builds the task from) and ``judged`` (the judge of a judged
task, and the aggregations of the judged metrics a spec declares), ``rejudge`` (judging logged samples again). What a
benchmark is and what its hooks get of a run is the floor below, ``lmms_egoplan.contract``; the lmms-eval workarounds
the adapters use are in ``lmms_egoplan.compat``."""
