"""Model backends of this suite, registered with lmms-eval.

lmms-eval finds them through the ``lmms_eval.models`` entry point (``model_manifests``) and,
under the deprecated ``LMMS_EVAL_PLUGINS=lmms_egoplan``, through ``AVAILABLE_MODELS``
(``<name>`` -> class ``lmms_egoplan.models.<name>.<class>``); both name the same classes.
"""

AVAILABLE_MODELS = {
    "egoplan_hf": "EgoPlanHF",
    "egoplan_server": "EgoPlanServer",
}


def model_manifests():
    from lmms_eval.models.registry_v2 import ModelManifest

    return [
        ModelManifest(model_id=name, simple_class_path=f"lmms_egoplan.models.{name}.{class_name}")
        for name, class_name in AVAILABLE_MODELS.items()
    ]


# Imported only now: importing lmms-eval's model package loads the entry points, i.e. reads
# ``model_manifests`` from this module, which must exist by then (this module may be imported first,
# e.g. ``import lmms_egoplan.models.egoplan_hf`` in a script).
from lmms_egoplan.compat.switches import on_entry_point_load  # noqa: E402

# lmms-eval imports this module (entry point) in every run, before it indexes tasks: runs that
# name the suite in LMMS_EVAL_PLUGINS get their workarounds now; other runs get nothing.
on_entry_point_load()
