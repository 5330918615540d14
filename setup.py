"""The packages of the distribution (everything else is in setup.cfg).

setup.cfg's ``find_namespace:`` cannot reach the two folders installed under other names
(``package_dir``: ``tasks/`` is ``lmms_egoplan.tasks``, ``lm_eval_tasks/`` is
``lmms_egoplan.lm_eval_tasks``, ``docs/`` is ``lmms_egoplan.docs``, the reference pages that
messages point at), so they are found here: every folder of the three trees is a
package, none is listed by hand, and each ships every file it holds (``package_data``).
tests/e2e/test_wheel.py compares the built wheel with the source tree.
"""

from setuptools import find_namespace_packages, setup

MAPPED_FOLDERS = {"lmms_egoplan.tasks": "tasks", "lmms_egoplan.lm_eval_tasks": "lm_eval_tasks",
                  "lmms_egoplan.docs": "docs"}
NOT_PACKAGES = ["__pycache__", "*.__pycache__"]

packages = find_namespace_packages(include=["lmms_egoplan", "lmms_egoplan.*"], exclude=NOT_PACKAGES)
for package, folder in MAPPED_FOLDERS.items():
    packages += [package, *(f"{package}.{sub}" for sub in find_namespace_packages(where=folder, exclude=NOT_PACKAGES))]

setup(packages=packages)
