"""lmms-eval task YAMLs of lmms-egoplan (installed as the package ``lmms_egoplan.tasks``)."""
