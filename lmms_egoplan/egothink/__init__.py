"""EgoThink (Cheng et al.): first-person questions about one image, rated by an LLM judge against the
reference. ``task`` holds the hooks in the order lmms-eval calls them (and the lm-eval baseline's), ``data`` reads
the release, the demo's data in ``demo.egothink``, ``report_face`` its table and
figure in ``lmms-egoplan report`` (its published rows in ``published_results.json``). The task YAMLs
(``tasks/egothink/``, ``lm_eval_tasks/egothink/``) name its ``benchmark.EGOTHINK`` and a spec of it; importing this
package imports nothing else, so that its data and scoring modules load without lmms-eval."""
