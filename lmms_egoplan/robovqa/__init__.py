"""RoboVQA (Sermanet et al., "RoboVQA: Multimodal Long-Horizon Reasoning for Robotics", arXiv 2311.00899): questions
about videos of long-horizon tasks done by a robot, a human, or a human with a grasping tool, one task per question
type read from the official tags. ``data`` reads the three layouts users download, ``scoring`` holds the suite's
scorer and each publishing lineage's, ``task`` the hooks in the order lmms-eval calls them and the lineages'
presets (``protocol``), ``sources`` what ``prepare`` and ``check-data`` know of the data."""
