"""RoboVQA's validation questions in the three layouts users download, each question typed by its official tag
(``<task:...>``), every record checked before a run (docs hold where the frames are, never decoded media).

* ``data_source: frames16``: the 16-frame copy (``VLyb/RoboVQA-16frames``), as PhysBrainEvalKit's
  ``benchmark/robovqa.py`` (@c95d9ee, ``RoboVQADataset.load_dataset``) reads it: ``<root>/qa.jsonl``, one question
  a line (``id``, ``question_idx`` holding the official tag, ``question``, ``answer``, ``frame_paths`` relative to
  ``root``), the frames unpacked from ``frames.tar`` under ``root``.
* ``data_source: tianli``: the ``Tianli/robovqa`` Hub copy: its validation rows (``video``, a file name, and
  ``text``, the official tagged text) in parquet or JSON-lines files whose name holds ``validation`` under
  ``root``, and the videos found by name anywhere under ``root``.
* ``data_source: tfrecord``: the official shards (``gs://anon_robovqa/tfrecord/val/val*``): TFRecord files of
  ``SequenceExample``s (feature list ``images``: a JPEG per frame; ``texts``: the tagged text), read without
  TensorFlow by the ``tfrecord`` package, as the official notebook (``google-deepmind/robovqa`` @93f1831,
  ``data_loading_and_eval.ipynb``) reads them with TensorFlow.

The tagged text is split into questions as the notebook's ``fetch_question_answer`` splits it (transcribed below:
``Tasks.text_to_dict``, ``Task.get_splits('A:')``, ``Task._remove_tags``). Every layout gives the same questions for
the same videos (tests/robovqa/test_data.py)."""

from __future__ import annotations

import io
import re
import struct
from pathlib import Path
from typing import Any, Iterator

from lmms_egoplan.catalogue import entry
from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import inside_root, parquet_rows, read_jsonl
from lmms_egoplan.core.media import (
    LoadedSamples,
    MediaError,
    MissingMedia,
    image_file_problem,
    last_declared_frame,
    video_problems,
)
from lmms_egoplan.core.settings import SettingsError, setting_name

ENV_PREFIX = entry("robovqa").env_prefix  # settings are overridden by ROBOVQA_<SETTING>

FRAMES16, TIANLI, TFRECORD = "frames16", "tianli", "tfrecord"
DATA_SOURCES = (FRAMES16, TIANLI, TFRECORD)

# The question types, each a task (its YAML's dataset_name), and the official tags each holds: the tag's fields up to
# the first that is not the type's (tags seen: planning:freeform, immediate_planning_with_context20:freeform,
# remaining5_planning_with_context20:freeform, success:discrete:True|False, affordance:discriminative:discrete:
# True|False, affordance:generative:positive:freeform, future_prediction:freeform, past_description:freeform).
QUESTION_TYPES = {
    "next_step": ("planning", "immediate_planning_with_context20"),
    "next_five_steps": ("remaining5_planning_with_context20",),
    "success": ("success",),
    "discriminative_affordance": ("affordance:discriminative",),
    "generative_affordance": ("affordance:generative",),
    "future_prediction": ("future_prediction",),
    "past_description": ("past_description",),
}
BINARY_TYPES = ("success", "discriminative_affordance")  # answered yes / no


class RoboVQADataError(InputError):
    """A record, its text or its frames cannot be used; the message names the file, the record and the field."""


# =============================================================================================
# The official text: data_loading_and_eval.ipynb, "Task utils", transcribed
# =============================================================================================

TASK_RE = r"(<task[:\w]*>)"  # Tasks.TASK_RE, with re.IGNORECASE
TAGS_RE = r"(</*\w[:\w]*>)"  # Task.TAGS_RE


def fetch_question_answer(text: str) -> list[tuple[str, str, str]]:
    """``(tag, question, answer)`` for every question of a tagged text, as the notebook's ``fetch_question_answer``
    gives them (its ``Tasks.text_to_dict`` groups the questions by tag, in the order each tag first appears; within
    a question ``A:`` starts the answer, and the tags are removed)."""
    split = re.split(TASK_RE, text, flags=re.IGNORECASE)[1:]
    by_tag: dict[str, list[str]] = {}
    for tag, task in zip(split[0::2], split[1::2]):
        if task.lstrip():
            by_tag.setdefault(tag.strip(), []).append(task.lstrip())
    found = []
    for tag, tasks in by_tag.items():
        for task in tasks:
            question, answer = _splits_at_answer(task)
            found.append((tag, question.strip(), answer.strip()))
    return found


def _splits_at_answer(text: str) -> tuple[str, str]:
    """``Task(text).get_splits('A:')``: the first ``A:`` (case-insensitive) starts the one split, which runs to the
    text's end (no end tag); the question is what precedes it, the answer the rest, ``A:`` included, tags removed;
    a text without ``A:`` is all answer."""
    start = text.lower().find("a:")
    if start < 0:
        return "", text
    return (re.sub(TAGS_RE, "", text[:start]) if start > 0 else ""), re.sub(TAGS_RE, "", text[start:])


def answer_text(notebook_answer: str) -> str:
    """The reference answer: the notebook's answer without its leading ``A:`` (which the notebook keeps and scores),
    its white space collapsed."""
    return " ".join(notebook_answer.strip().removeprefix("A:").removeprefix("a:").split())


def question_type(tag: str) -> str | None:
    """The question type an official tag (``<task:affordance:discriminative:discrete:True>``) names, or None."""
    fields = tag.strip().lstrip("<").rstrip(">").split(":")[1:]
    for name, prefixes in QUESTION_TYPES.items():
        if any(fields[:len(prefix.split(":"))] == prefix.split(":") for prefix in prefixes):
            return name
    return None
# =============================================================================================
# The three layouts
# =============================================================================================


def typed_questions(text: str, where: str) -> list[dict]:
    """The questions of one tagged text with their type; an unknown tag or an empty answer is an error naming
    ``where`` and the field."""
    found = []
    for number, (tag, question, answer) in enumerate(fetch_question_answer(text)):
        kind = question_type(tag)
        if kind is None:
            raise RoboVQADataError(f"{where}: field text, question #{number}: tag {tag} names no RoboVQA question "
                                   f"type (known: {', '.join(QUESTION_TYPES)})")
        if not answer.lower().startswith("a:"):  # the notebook's split makes such a text all answer
            raise RoboVQADataError(f"{where}: field text, question #{number}: no 'A:' marks where its answer starts")
        found.append(_question(kind, tag, question, answer_text(answer), f"{where}, question #{number}"))
    if not found:
        raise RoboVQADataError(f"{where}: field text holds no <task:...> question")
    return found


def _question(kind: str, tag: str, question: str, answer: str, where: str) -> dict:
    question = " ".join(re.sub(TAGS_RE, "", question).split())
    if not question:
        raise RoboVQADataError(f"{where}: the question is empty")
    if not answer:
        raise RoboVQADataError(f"{where}: the answer is empty")
    if kind in BINARY_TYPES and answer.lower() not in ("yes", "no"):
        raise RoboVQADataError(f"{where}: a {kind} question's answer must be yes or no, got {answer!r}")
    return {"question_type": kind, "tag": tag, "question": question, "answer": answer}


def read_frames16(root: Path, problems: DatasetProblems, allow_outside: bool, kind: str) -> list[dict]:
    """A doc per line of ``<root>/qa.jsonl``, the frames' paths of question type ``kind``'s resolved and checked
    (present, an image that is not cut short; the others', which the caller drops, None: each type's task checks its
    own, not the whole file's 64,000 seven times); a line's problem joins ``problems``."""
    path = root / "qa.jsonl"
    if not path.is_file():
        raise RoboVQADataError(f"RoboVQA: no qa.jsonl in {root} (the 16-frame copy's question file); check "
                               f"{setting_name(ENV_PREFIX, 'root')}")
    docs = []
    records = list(read_jsonl(path, RoboVQADataError))
    if not records:
        raise RoboVQADataError(f"RoboVQA file {path} holds no question (it is empty); {_FETCH_AGAIN}")
    for line, record in records:
        where = f"RoboVQA file {path}, line {line}"
        with problems.collected():
            tag = re.search(r"<task[:\w]*>", str(record.get("question_idx", "")))
            question_kind = tag and question_type(tag.group(0))
            if not question_kind:
                raise RoboVQADataError(f"{where}: field question_idx must hold an official <task:...> tag of a "
                                       f"question type, got {record.get('question_idx')!r}")
            paths = record.get("frame_paths")
            if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
                raise RoboVQADataError(f"{where}: field frame_paths must be a non-empty list of paths, got {paths!r}")
            frames = [str(_inside(root / frame, root, f"{where}: field frame_paths", allow_outside))
                      for frame in paths] if kind == question_kind else None
            for field in ("question", "answer"):  # a list or a number would be shown, or scored, as its repr
                if not isinstance(record.get(field, ""), str):
                    raise RoboVQADataError(f"{where}: field {field} must be text, got {record.get(field)!r}")
            question = _question(question_kind, tag.group(0), record.get("question") or "",
                                 answer_text(record.get("answer") or ""), where)
            docs.append({"item_id": f"qa.jsonl/{record.get('id', line)}", **question,
                         "media": {"kind": FRAMES16, "frames": frames}})
    return docs


def frames16_problems(doc: dict) -> list[str]:
    return [problem for frame in doc["media"]["frames"] if (problem := image_file_problem(frame))]


def read_tianli(root: Path, problems: DatasetProblems, allow_outside: bool) -> list[dict]:
    """A doc per question of every validation row (parquet or JSON lines files named ``*validation*`` under
    ``root``), its video found by name under ``root``."""
    files = sorted(path for path in root.rglob("*validation*") if path.suffix in (".parquet", ".jsonl"))
    if not files:
        raise RoboVQADataError(f"RoboVQA: no validation file (*validation*.parquet or .jsonl) under {root}, the "
                               f"Tianli/robovqa copy; check {setting_name(ENV_PREFIX, 'root')}")
    videos: dict[str, Path] = {}
    for video in root.rglob("*.mp4"):
        videos.setdefault(video.name, video)
    docs = []
    for path in files:
        rows = list(_rows(path))
        if not rows:
            problems.add(f"RoboVQA file {path} holds no row (it is empty); {_FETCH_AGAIN}")
        for position, row in rows:
            where = f"RoboVQA file {path}, row #{position}"
            with problems.collected():
                name, text = row.get("video"), row.get("text")
                if not isinstance(name, str) or not name.strip():
                    raise RoboVQADataError(f"{where}: field video must name the row's video file, got {name!r}")
                if not isinstance(text, str):
                    raise RoboVQADataError(f"{where}: field text must be the tagged text, got {text!r}")
                video = videos.get(Path(name).name, root / name)
                video = _inside(video, root, f"{where}: field video", allow_outside)
                for number, question in enumerate(typed_questions(text, where)):
                    docs.append({"item_id": f"{row.get('uid') or name}/{number}", **question,
                                 "media": {"kind": TIANLI, "video": str(video)}})
    return docs


_FETCH_AGAIN = f"fetch it again into the folder {setting_name(ENV_PREFIX, 'root')} names"


def _rows(path: Path) -> Iterator[tuple[int, dict]]:
    if path.suffix == ".jsonl":
        yield from ((line - 1, record) for line, record in read_jsonl(path, RoboVQADataError))
        return
    yield from enumerate(parquet_rows(path, RoboVQADataError, _FETCH_AGAIN))


def read_tfrecord(root: Path, problems: DatasetProblems) -> list[dict]:
    """A doc per question of every record of the official validation shards (``val*`` under ``root``): each
    record's place in its shard kept (offset and length) for ``tfrecord_frames``."""
    shards = sorted(path for path in root.rglob("val*") if path.is_file())
    if not shards:
        raise RoboVQADataError(f"RoboVQA: no official validation shard (val*) under {root}; check "
                               f"{setting_name(ENV_PREFIX, 'root')}")
    docs = []
    for shard in shards:
        with problems.collected():
            if not shard.stat().st_size:  # the reader reads nothing from it, silently
                raise RoboVQADataError(f"RoboVQA shard {shard} holds no record (it is empty); {_FETCH_AGAIN}")
            for number, (offset, example) in enumerate(_records(shard)):
                where = f"RoboVQA shard {shard}, record #{number}"
                with problems.collected():
                    frames, text = _checked_example(example, where)
                    for k, question in enumerate(typed_questions(text, where)):
                        docs.append({"item_id": f"{shard.name}/{number}/{k}", **question,
                                     "media": {"kind": TFRECORD, "shard": str(shard), "offset": offset,
                                               "length": len(example), "frames": frames}})
    return docs


def _records(shard: Path) -> Iterator[tuple[int, bytes]]:
    """Each record of a TFRecord file with the offset of its frame (the ``tfrecord`` package's reader; a record is
    8 bytes of length, 4 of its CRC, the data, 4 of the data's CRC)."""
    from tfrecord.reader import tfrecord_iterator

    offset, number = 0, 0
    try:
        for record in tfrecord_iterator(str(shard)):
            yield offset, bytes(record)
            offset += 16 + len(record)
            number += 1
    # the reader's "Failed to read the record." for data cut short; a length read from text or another format can
    # exceed any buffer
    except (RuntimeError, OverflowError, MemoryError, ValueError) as error:
        raise RoboVQADataError(f"RoboVQA shard {shard}, record #{number} (byte {offset}): {error} (the file is cut "
                               f"short or not a TFRecord file); fetch it again") from None


def _checked_example(data: bytes, where: str) -> tuple[int, str]:
    """The frame count and the text of a serialized SequenceExample, checked as the notebook reads it: feature list
    ``images`` of JPEG bytes (each starting and ending as a JPEG does), ``texts``' first value UTF-8."""
    example = _sequence_example(data, where)
    lists = example.feature_lists.feature_list
    images = [feature.bytes_list.value[0] if feature.bytes_list.value else b"" for feature in lists["images"].feature] \
        if "images" in lists else []
    if not images:
        raise RoboVQADataError(f"{where}: feature list images is absent or empty")
    for index, image in enumerate(images):
        if not (image.startswith(b"\xff\xd8") and image.rstrip(b"\x00").endswith(b"\xff\xd9")):
            raise RoboVQADataError(f"{where}: feature list images, frame #{index} is not a whole JPEG image")
    texts = lists["texts"].feature if "texts" in lists else []
    if not texts or not texts[0].bytes_list.value:
        raise RoboVQADataError(f"{where}: feature list texts is absent or empty")
    try:
        return len(images), texts[0].bytes_list.value[0].decode("utf-8")
    except UnicodeDecodeError as error:
        raise RoboVQADataError(f"{where}: feature list texts is not UTF-8 text ({error})") from None


def _sequence_example(data: bytes, where: str):
    from google.protobuf.message import DecodeError
    from tfrecord import example_pb2

    example = example_pb2.SequenceExample()
    try:
        example.ParseFromString(data)
    except DecodeError as error:
        raise RoboVQADataError(f"{where}: not a SequenceExample ({error})") from None
    return example


def tfrecord_frames(media: dict, indices: list[int]) -> list[bytes]:
    """The JPEG bytes of frames ``indices`` of a doc's record, read at its offset."""
    with open(media["shard"], "rb") as file:
        file.seek(media["offset"])
        (length,) = struct.unpack("<Q", file.read(8))
        file.seek(4, io.SEEK_CUR)
        data = file.read(length)
    if length != media["length"] or len(data) != length:
        raise MediaError(f"RoboVQA shard {media['shard']} changed since it was read (record at byte "
                         f"{media['offset']})", media["shard"])
    example = _sequence_example(data, f"RoboVQA shard {media['shard']} at byte {media['offset']}")
    images = example.feature_lists.feature_list["images"].feature
    return [images[index].bytes_list.value[0] for index in indices]


def _inside(path: Path, root: Path, where: str, allow_outside: bool) -> Path:
    return inside_root(path, root, where=where, setting=setting_name(ENV_PREFIX, "allow_paths_outside_root"),
                       allow=allow_outside, error_class=RoboVQADataError)


# =============================================================================================
# A question type's questions, checked
# =============================================================================================


def load_type(settings: Any, kind: str) -> LoadedSamples:
    """The docs of one question type from the chosen layout, their media checked: every record's problem named
    together; media missing or unusable listed in one error, or with ``skip_missing`` left out and counted."""
    if kind not in QUESTION_TYPES:
        raise SettingsError(f"RoboVQA: no question type {kind!r} (known: {', '.join(QUESTION_TYPES)})")
    if not settings.root:
        raise SettingsError(f"RoboVQA: set {setting_name(ENV_PREFIX, 'root')} to the folder of the data "
                            f"({setting_name(ENV_PREFIX, 'data_source')}: {settings.data_source})")
    root = Path(settings.root).expanduser()
    problems = DatasetProblems("the RoboVQA data", RoboVQADataError)
    docs = all_docs(settings.data_source, root, problems, settings.allow_paths_outside_root, kind)
    problems.raise_if_any()
    docs = [doc for doc in docs if doc["question_type"] == kind]
    skipped = [MissingMedia(doc["item_id"], str(doc["media"]), f"{problem}; check "
                            f"{setting_name(ENV_PREFIX, 'root')}") for doc in docs for problem in media_problems(doc)]
    left_out = problems.unusable_media(skipped, skip=settings.skip_missing, label="RoboVQA", media="frames",
                                       skip_setting=setting_name(ENV_PREFIX, "skip_missing"))
    kept = [doc for doc in docs if doc["item_id"] not in left_out]
    if not kept:
        raise RoboVQADataError(f"RoboVQA {kind}: not run: none of its {len(docs)} questions has usable frames under "
                               f"{root}" if docs else f"RoboVQA {kind}: no question of this type under {root}")
    return LoadedSamples(kept, skipped)


def all_docs(source: str, root: Path, problems: DatasetProblems, allow_outside: bool, kind: str) -> list[dict]:
    """Every question of the data, those of type ``kind`` whole (the others' media may be left unresolved)."""
    if source == FRAMES16:
        docs = read_frames16(root, problems, allow_outside, kind)
    elif source == TIANLI:
        docs = read_tianli(root, problems, allow_outside)
    else:
        docs = read_tfrecord(root, problems)
    return problems.without_repeats(docs, lambda doc: doc["item_id"], where=f"RoboVQA data under {root}",
                                    field="question id", why="a repeated question would be scored twice")


def media_problems(doc: dict) -> list[str]:
    media = doc["media"]
    if media["kind"] == FRAMES16:
        return frames16_problems(doc)
    if media["kind"] == TIANLI:
        return [problem for _, problem in video_problems(media["video"], [doc], last_declared_frame)]
    return []  # a shard's records are checked whole as they are read
