"""EgoPlan-Bench2 (Qiu et al.): the next action among four, from the task's progress on an Ego4D video
and the current observation, answered by a letter. ``task`` holds the hooks in the order lmms-eval
calls them (what the task YAMLs in ``tasks/egoplan_bench2/`` name), ``data`` reads both sources,
``parsing`` reads the answers two ways, ``demo.egoplan_bench2`` writes the tests' and the demo's data. This
package imports none of them: ``data`` and ``parsing`` load without lmms-eval."""
