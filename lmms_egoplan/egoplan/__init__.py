"""EgoPlan-Bench (Chen et al.): the next action among four, from the task-progress video and the
current observation. ``task`` holds the hooks in the order lmms-eval calls them, ``data`` reads the
release, the demo's data in ``demo.egoplan``, ``report_face`` its
tables and figure in ``lmms-egoplan report`` (its published rows in ``published_results.json``). The task YAMLs
(``tasks/egoplan/``, ``lm_eval_tasks/egoplan/``) name its ``benchmark.EGOPLAN`` and a spec of it; importing this
package imports nothing else, so that its data and scoring modules load without lmms-eval."""
