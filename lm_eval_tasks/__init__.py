"""lm-eval task YAMLs of lmms-egoplan, the text-only baselines (installed as the package
``lmms_egoplan.lm_eval_tasks``; ``lm_eval --include_path <this folder>``)."""
