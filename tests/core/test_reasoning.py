"""Reasoning blocks left out of an answer (``core.reasoning``): every kind, any case, a block opened in the prompt, a
block never closed, in linear time."""

from __future__ import annotations

import time

import pytest

from lmms_egoplan.core.reasoning import REASONING_BLOCKS, reasoning_left_open, without_reasoning


@pytest.mark.parametrize("text, answer", [
    *((f"{opening}Option B?{closing} D", "D") for opening, closing in REASONING_BLOCKS),
    ("<THINK>B?</Think>D", "D"),
    ("<think>a</think> B <thinking>c</thinking> D", "B   D"),
    ("<think>a <think>b</think> c </think> D", "D"),  # nested: up to the last closing
    ("the template opened it: B?</think> D", "D"),
    ("◁think▷B? ◁/think▷ D ◁think▷ then", "D"),  # the block left open is left out to the end
    ("<think>B, then", ""),
    ("D. <think> is how a tag starts", "D."),
    ("A plain answer: C", "A plain answer: C"),
    ("", ""), (None, ""),
])
def test_an_answer_is_read_without_its_reasoning(text, answer):
    assert without_reasoning(text) == answer


@pytest.mark.parametrize("text, open_", [
    ("<think>a", True), ("◁think▷a", True), ("<think>a</think>b", False), ("b</think>", False), ("b", False),
    ("<Thinking>a</THINKING><analysis>b", True), (None, False),
])
def test_a_reasoning_block_left_open_is_seen(text, open_):
    assert reasoning_left_open(text) is open_


@pytest.mark.parametrize("text", ["<think>" * 20_000 + "D", "<think>x</think>" * 20_000 + "D",
                                  "</think>" * 20_000 + "D", "◁think▷" * 10_000 + "<think>" * 10_000 + "D"])
def test_degenerate_answers_are_read_in_linear_time(text):
    started = time.perf_counter()
    without_reasoning(text)
    reasoning_left_open(text)
    assert time.perf_counter() - started < 1.0
