"""Cosmos-Reason1's benchmark (NVIDIA, "Cosmos-Reason1: From Physical Common Sense To Embodied Reasoning",
arXiv 2503.15558): 1,214 multiple-choice questions on videos, six embodied-reasoning sources and three
physical-common-sense categories, scored as ``nvidia-cosmos/cosmos-reason1`` ``examples/benchmark`` scores them.
``data`` reads both layouts, ``parsing`` reads the answers (the official parsers, transcribed, and a robust
one), ``task`` holds the hooks in the order lmms-eval calls them (what ``tasks/cosmos_reason1/`` names),
``sources`` what ``prepare`` and ``check-data`` know of the data. This package imports none of them."""
