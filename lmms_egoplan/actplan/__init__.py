"""ActPlan-1K (Su et al.): a plan of ``action(object)`` steps from a household task description and
scene images, scored by LCS with sentence-embedding step matching (``lcs``) and a fine-tuned BERT
classifier (``classifier``). ``task`` holds the hooks in the order lmms-eval calls them, ``data``
reads the release, ``plans`` parses and scores plans,
the demo's data in ``demo.actplan``, ``report_face`` its tables and figure in ``lmms-egoplan report`` (its
published rows in ``published_results.json``), ``commands`` its ``lmms-egoplan`` commands. The task YAMLs
(``tasks/actplan/``, ``lm_eval_tasks/actplan/``) name
its ``benchmark.ACTPLAN`` and a spec of it; importing this package imports nothing else, so that its data and
scoring modules load without lmms-eval."""
