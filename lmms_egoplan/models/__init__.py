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
    """The entry point lmms-eval loads and calls in every run (before it indexes tasks): the suite's workarounds
    are switched on now where ``LMMS_EVAL_PLUGINS`` names the suite (``compat.switches``); other runs get nothing
    until a suite task or backend is built."""
    from lmms_eval.models.registry_v2 import ModelManifest

    from lmms_egoplan.compat.switches import ENTRY_POINT_LOADED, switch_on

    switch_on(ENTRY_POINT_LOADED)
    return [
        ModelManifest(model_id=name, simple_class_path=f"lmms_egoplan.models.{name}.{class_name}")
        for name, class_name in AVAILABLE_MODELS.items()
    ]

