"""EgoIntent: Local Intent, Procedural Intent and Next-Plan from a clip cut before the step's key
outcome, each field rated by an LLM judge. ``task`` holds the hooks in the order lmms-eval calls
them, ``data`` reads the release, the demo's data in ``demo.egointent``, ``report_face`` its table and figure
in ``lmms-egoplan report`` (its published rows in ``published_results.json``), ``commands`` its
``lmms-egoplan`` command. The task YAMLs
(``tasks/egointent/``) name its ``benchmark.EGOINTENT`` and a spec of it; importing this package imports nothing else,
so that its data and scoring modules load without lmms-eval."""
