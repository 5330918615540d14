"""Cosmos-Reason1's questions and their clips, in the layout the official reader finds them
(``nvidia-cosmos/cosmos-reason1`` @3e7f1cb ``examples/benchmark/tools/eval/evaluate.py`` ``make_all_tasks`` and
``tools/eval/utils/input.py``), every record and clip checked before a run (docs hold paths, never decoded media).

* ``<root>/<source>/<source>_benchmark_qa_pairs.json``: a JSON list of items, each a ``video`` ("clips/<id>.mp4")
  and its ``qa_pairs`` (a list, or one QA pair as a dict); a QA pair is a ``question``, its options ``index2ans``
  (letter -> text, in the release's order) and its ``answer`` (``correct_answer`` where there is none, as
  ``InputStructure.from_dict``). The clip is ``<root>/<source>/<video>``; for AV, whose clips the Hub names by
  camera, ``clips/<id>.camera_front_wide_120fov.mp4`` is tried only where that one is absent (``get_video_path``).
* The common-sense categories (which the official code gives no layout: its Hub dataset holds the six sources) are
  read in the same shape, ``<root>/<category>/<category>_benchmark_qa_pairs.json`` and ``clips/``.

* ``data_source: paibench_u``: the PAI-Bench-U Hub layout, ``<paibench_u_root>/data/*.parquet`` (a row per question:
  ``question``, ``index2ans``, ``answer``, ``video_path``, the part in ``subcategory``) and the clips at
  ``<paibench_u_root>/<video_path>`` (or ``videos/<video_path>``, as lmms-eval's ``paibench_u`` opens them). An
  answer instruction embedded in a row's question is removed as lmms-eval's ``physical_ai_understanding`` removes it.

Every QA pair is a question: the official reader keys its QA pairs by clip, so an item sharing its clip with a later
one is overwritten (RoboVQA: 101 of 110 run); ``official_reader_keeps`` marks the ones it keeps. A QA pair repeated
whole (the same clip, question, options and answer) is refused, naming both records, and a clip outside the data
folder (an absolute path, ``..``, a symbolic link out of it) is refused unless ``allow_paths_outside_root``
(``core.files.inside_root``, as the other benchmarks read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmms_egoplan.catalogue import entry
from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import inside_root, parquet_rows, read_json_list
from lmms_egoplan.core.media import LoadedSamples, MissingMedia, last_declared_frame, video_problems
from lmms_egoplan.core.settings import SettingsError, setting_name

ENV_PREFIX = entry("cosmos_reason1").env_prefix  # settings are overridden by COSMOS_REASON1_<SETTING>

# The release's questions per source and category (the Hub dataset's files; the paper's 610 + 604 = 1,214).
ER_SOURCES = {"av": 100, "agibot": 100, "bridgev2": 100, "holoassist": 100, "robofail": 100, "robovqa": 110}
CS_CATEGORIES = {"space": 80, "time": 298, "other_physics": 226}
RELEASE_COUNTS = {**ER_SOURCES, **CS_CATEGORIES}
OFFICIAL_ROBOVQA = 101  # what the official reader runs of RoboVQA's 110 (the rest overwritten by clip)
AV_CAMERA_SUFFIX = ".camera_front_wide_120fov"  # input.py get_video_path
ROBOVQA_ITEMS = ("all", "official_101")
DATA_SOURCES = ("official", "paibench_u")
# PAI-Bench-U's subcategory labels (lower case, "_" for the rest) that name a part other than by its own name
# ("Physical World" is how Physical AI Bench tables head the other-physics column).
# lmms-eval 0.7.3 tasks/physical_ai_understanding/utils.py REPLACE_PROMPT, verbatim: an answer instruction some
# PAI-Bench-U rows carry inside their question, which that reader removes; removed here too, so that the official
# prompt holds the question alone (its own letter instruction follows the options).
PAIBENCH_U_EMBEDDED_INSTRUCTION = "Please answer directly with only the letter of the correct option and nothing else."
PAIBENCH_U_ALIASES = {"physics": "other_physics", "physical_world": "other_physics", "bridgedata_v2": "bridgev2",
                      "bridge": "bridgev2"}


class CosmosReason1DataError(InputError):
    """A record or its clip cannot be used; the message names the file, the record and the field or setting."""


def part_folder(root: str | Path, part: str) -> Path:
    return Path(root).expanduser() / part


def qa_file(root: str | Path, part: str) -> Path:
    """``<root>/<part>/<part>_benchmark_qa_pairs.json`` (evaluate.py make_all_tasks)."""
    return part_folder(root, part) / f"{part}_benchmark_qa_pairs.json"


def clip_id(video: str) -> str | None:
    """The clip id the official reader keys an item by: the file name without extension of a ``video`` that starts
    with "clips/" and has an extension; None for any other (the official reader drops such an item)."""
    if video.startswith("clips/") and "." in video:
        return video.split("/")[-1].rsplit(".", 1)[0]
    return None


def _qa_pairs(item: Any, where: str) -> list:
    if not isinstance(item, dict):
        raise CosmosReason1DataError(f"{where}: expected a JSON object, got {type(item).__name__}")
    pairs = item.get("qa_pairs")
    if isinstance(pairs, dict):
        return [pairs]
    if not isinstance(pairs, list) or not pairs:
        raise CosmosReason1DataError(f"{where}: qa_pairs must be a QA pair or a non-empty list of them, got {pairs!r}")
    return pairs


def question_of(pair: Any, where: str) -> dict:
    """The fields of a QA pair the protocol uses, checked: the question, the option letters and texts in the
    release's order, and the answer (``answer``, else ``correct_answer``), which must be one of the letters."""
    if not isinstance(pair, dict):
        raise CosmosReason1DataError(f"{where}: expected a JSON object, got {type(pair).__name__}")
    question, options = pair.get("question"), pair.get("index2ans")
    answer = pair.get("answer", pair.get("correct_answer"))
    if not isinstance(question, str) or not question.strip():
        raise CosmosReason1DataError(f"{where}: question must be a non-empty string, got {question!r}")
    if not isinstance(options, dict) or len(options) < 2 or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in options.items()):
        raise CosmosReason1DataError(f"{where}: index2ans must map two or more letters to option texts, "
                                     f"got {options!r}")
    if not all(len(key) == 1 and "A" <= key <= "Z" for key in options):  # the parsers read one capital letter
        raise CosmosReason1DataError(f"{where}: index2ans's keys must be the option letters, one capital letter each "
                                     f"(A, B, ...), got {', '.join(map(repr, options))}")
    if not isinstance(answer, str) or answer.upper() not in {key.upper() for key in options}:
        raise CosmosReason1DataError(f"{where}: answer (or correct_answer) must be one of the letters "
                                     f"{', '.join(options)}, got {answer!r}")
    return {"question": question, "letters": list(options), "options": list(options.values()), "answer": answer}


def read_part(root: str | Path, part: str, problems: DatasetProblems, allow_outside: bool = False) -> list[dict]:
    """A doc per QA pair of one source or category, in the file's order, the clip's path resolved (not checked
    but for staying inside ``root``); each record's problem joins ``problems``."""
    path = qa_file(root, part)
    items = read_json_list(path, CosmosReason1DataError, what="Cosmos-Reason1 QA file",
                           folder_setting=setting_name(ENV_PREFIX, "root"), file_setting=None)
    kept_by_official = {}  # clip id -> the last item's position: the official reader's dict keeps that one
    for position, item in enumerate(items):
        if isinstance(item, dict) and isinstance(item.get("video"), str) and clip_id(item["video"]):
            kept_by_official[clip_id(item["video"])] = position
    docs = []
    for position, item in enumerate(items):
        where = f"Cosmos-Reason1 QA file {path}, item #{position}"
        with problems.collected():
            video = item.get("video") if isinstance(item, dict) else None
            if not isinstance(video, str) or not video.strip():
                raise CosmosReason1DataError(f"{where}: video must name the clip (clips/<id>.mp4), got {video!r}")
            clip = _inside(clip_path(root, part, video), root, f"{where}: field video", allow_outside)
            for number, pair in enumerate(_qa_pairs(item, where)):
                question = question_of(pair, f"{where}, QA pair #{number}")
                docs.append({"source": part, "item_id": f"{part}/{position}/{number}", "video_name": video,
                             "video": str(clip), **question, "where": f"{where}, QA pair #{number}",
                             "official_reader_keeps": kept_by_official.get(clip_id(video)) == position})
    return _without_repeated_questions(docs, problems)


def _inside(path: Path, root: str | Path, where: str, allow_outside: bool) -> Path:
    return inside_root(path, root, where=where, setting=setting_name(ENV_PREFIX, "allow_paths_outside_root"),
                       allow=allow_outside, error_class=CosmosReason1DataError)


def _without_repeated_questions(docs: list[dict], problems: DatasetProblems) -> list[dict]:
    """``docs`` less the records that repeat an earlier one whole (the same clip, question, options and answer),
    each a problem naming both (a repeated record would be scored twice); the records' ``where`` dropped."""
    first: dict[tuple, str] = {}
    kept = []
    for doc in docs:
        where = doc.pop("where")
        key = (doc["video"], doc["question"], tuple(doc["letters"]), tuple(doc["options"]), doc["answer"])
        if key in first:
            problems.add(f"{where} repeats {first[key]} (the same clip, question, options and answer): keep one")
        else:
            first[key] = where
            kept.append(doc)
    return kept


def paibench_u_part(label: Any) -> str | None:
    """The part a PAI-Bench-U ``subcategory`` names, or None."""
    if not isinstance(label, str):
        return None
    name = "_".join("".join(c if c.isalnum() else " " for c in label.lower()).split())
    name = PAIBENCH_U_ALIASES.get(name, name)
    return name if name in RELEASE_COUNTS else None


def read_paibench_u(root: str | Path, problems: DatasetProblems, allow_outside: bool = False) -> list[dict]:
    """A doc per row of the PAI-Bench-U parquet files (``<root>/data/*.parquet``), its part from ``subcategory``;
    each row's problem (a field, an unknown subcategory) joins ``problems``."""
    if not root:
        raise SettingsError(f"Cosmos-Reason1: {setting_name(ENV_PREFIX, 'data_source')} is paibench_u but "
                            f"{setting_name(ENV_PREFIX, 'paibench_u_root')} (the Hub dataset's folder) is not set")
    files = paibench_u_files(root)
    if not files:
        raise CosmosReason1DataError(f"no PAI-Bench-U parquet files under {Path(root).expanduser() / 'data'}; check "
                                     f"{setting_name(ENV_PREFIX, 'paibench_u_root')}")
    docs = []
    advice = f"fetch it again into the folder {setting_name(ENV_PREFIX, 'paibench_u_root')} names"
    for path in files:
        for position, row in enumerate(parquet_rows(path, CosmosReason1DataError, advice)):
            where = f"PAI-Bench-U file {path}, row #{position}"
            with problems.collected():
                part = paibench_u_part(row.get("subcategory"))
                if part is None:
                    raise CosmosReason1DataError(f"{where}: subcategory {row.get('subcategory')!r} names none of "
                                                 f"{', '.join(RELEASE_COUNTS)}")
                options = row.get("index2ans")  # the Hub's struct: a letter per column, None where absent
                options = {key: text for key, text in options.items() if text is not None} \
                    if isinstance(options, dict) else options  # anything else: question_of names it
                asked = row.get("question")
                if isinstance(asked, str):
                    asked = asked.replace(PAIBENCH_U_EMBEDDED_INSTRUCTION, "").strip()
                question = question_of({**row, "question": asked, "index2ans": options}, where)
                video = str(row.get("video_path") or "")
                named = Path(root).expanduser() / video
                path_of = named if named.is_file() else Path(root).expanduser() / "videos" / video
                path_of = _inside(path_of, root, f"{where}: field video_path", allow_outside)
                docs.append({"source": part, "item_id": f"{part}/{path.stem}/{position}", "video_name": video,
                             "video": str(path_of), **question, "official_reader_keeps": True, "where": where})
    return _without_repeated_questions(docs, problems)


def clip_path(root: str | Path, part: str, video: str) -> Path:
    """The clip as the item's ``video`` names it; for AV, the camera-suffixed name where that one is absent."""
    named = part_folder(root, part) / video
    if part == "av" and not named.exists() and clip_id(video):
        suffixed = named.with_name(f"{clip_id(video)}{AV_CAMERA_SUFFIX}{named.suffix}")
        if suffixed.exists():
            return suffixed
    return named


def load_part(settings, part: str) -> LoadedSamples:
    """The docs of one source or category with their clips checked (each opened, its first frame's data read).
    A part whose clips are all absent is not run (an error saying so, never a score of 0); clips missing or
    unusable are listed in one error, or with ``skip_missing`` left out and counted. The error of a part of the
    official layout also names the problems of the layout's other parts that are there (their QA file and clips
    folder), so that a run of the group, which stops at its first part with problems, names them all at once."""
    try:
        return _load_part(settings, part)
    except CosmosReason1DataError as error:
        raise _with_other_parts_problems(error, settings, part) from None


def _with_other_parts_problems(error: CosmosReason1DataError, settings, part: str) -> CosmosReason1DataError:
    """``error`` of ``part``, followed by the problems of the official layout's other parts present; its
    ``problems`` (what ``check-data``, which checks every part, lists of it) stay ``part``'s."""
    if settings.data_source != "official":
        return error  # PAI-Bench-U's rows of every part are read, and their problems named, together already
    others = []
    for other in RELEASE_COUNTS:
        if other == part or not (qa_file(settings.root, other).is_file()
                                 and (part_folder(settings.root, other) / "clips").is_dir()):
            continue
        try:
            _load_part(settings, other)
        except CosmosReason1DataError as found:
            others += [f"{other}: {problem}" for problem in getattr(found, "problems", (str(found),))]
    if not others:
        return error
    combined = CosmosReason1DataError(f"{error}\nThe other parts under {settings.root} have problems too (named "
                                      f"now, so that one run names them all):\n  " + ";\n  ".join(others))
    combined.problems = getattr(error, "problems", (str(error),))
    return combined


def _load_part(settings, part: str) -> LoadedSamples:
    if part not in RELEASE_COUNTS:
        raise SettingsError(f"Cosmos-Reason1: no source or category {part!r} (known: {', '.join(RELEASE_COUNTS)})")
    problems = DatasetProblems("the Cosmos-Reason1 data", CosmosReason1DataError)
    docs, where = _part_docs(settings, part, problems)
    if part == "robovqa" and settings.robovqa_items == "official_101":
        docs = [doc for doc in docs if doc["official_reader_keeps"]]
    check = f"check {where}"
    skipped = [MissingMedia(doc["item_id"], doc["video"], f"{problem}; {check}")
               for doc in docs for _, problem in video_problems(doc["video"], [doc], last_declared_frame)]
    left_out = problems.unusable_media(skipped, skip=settings.skip_missing, label="Cosmos-Reason1", media="clips",
                                       skip_setting=setting_name(ENV_PREFIX, "skip_missing"))
    kept = [{**doc, **_media_settings(settings)} for doc in docs if doc["item_id"] not in left_out]
    if not kept:
        raise CosmosReason1DataError(f"Cosmos-Reason1 {part}: not run: none of its {len(docs)} clips is usable; "
                                     f"{check}")
    return LoadedSamples(kept, skipped)


def _part_docs(settings, part: str, problems: DatasetProblems) -> tuple[list[dict], str]:
    """The part's docs from the chosen layout (clips not checked), and the setting that points at them; a part
    whose clips are all absent is not run."""
    if settings.data_source == "paibench_u":
        if settings.robovqa_items != "all":
            raise SettingsError(f"Cosmos-Reason1: {setting_name(ENV_PREFIX, 'robovqa_items')} official_101 needs "
                                f"the official layout, whose items say which questions share a clip")
        docs = [doc for doc in read_paibench_u(settings.paibench_u_root, problems, settings.allow_paths_outside_root)
                if doc["source"] == part]
        problems.raise_if_any()
        where = setting_name(ENV_PREFIX, "paibench_u_root")
        if not any(Path(doc["video"]).is_file() for doc in docs):
            raise CosmosReason1DataError(f"Cosmos-Reason1 {part}: not run: none of its {len(docs)} clips is under "
                                         f"{settings.paibench_u_root}; check {where}")
        return docs, where
    if not settings.root:
        raise SettingsError(f"Cosmos-Reason1: set {setting_name(ENV_PREFIX, 'root')} to the folder holding "
                            f"<source>/<source>_benchmark_qa_pairs.json and <source>/clips/")
    docs = read_part(settings.root, part, problems, settings.allow_paths_outside_root)
    problems.raise_if_any()
    where, clips = setting_name(ENV_PREFIX, "root"), part_folder(settings.root, part) / "clips"
    if not clips.is_dir():
        raise CosmosReason1DataError(f"Cosmos-Reason1 {part}: not run: its clips folder {clips} is absent "
                                     f"({_where_clips_come_from(part)}); check {where}")
    return docs, where


def files_read(settings, part: str) -> list[str]:
    """The files a part's questions are read from, as a run records them (its data's identity): the part's QA file,
    or under ``data_source: paibench_u`` the PAI-Bench-U parquet files."""
    if settings.data_source == "paibench_u":
        return [str(path) for path in paibench_u_files(settings.paibench_u_root)]
    return [str(qa_file(settings.root, part))]


def paibench_u_files(root: str | Path) -> list[Path]:
    """The PAI-Bench-U Hub dataset's parquet files (``<root>/data/*.parquet``), in name order."""
    return sorted((Path(root).expanduser() / "data").glob("*.parquet"))


def _where_clips_come_from(part: str) -> str:
    if part in ("av", "robovqa"):
        return "the Hub dataset nvidia/Cosmos-Reason1-Benchmark holds them as clips.tar.gz: unpack it in place"
    if part == "robofail":
        return "the official code neither holds nor rebuilds them (process_raw_data.py has no RoboFail path); " \
               "PAI-Bench-U publishes them (data_source: paibench_u)"
    if part in ER_SOURCES:
        return "the official examples/benchmark/tools/eval/process_raw_data.py rebuilds them from the source dataset"
    return "the common-sense clips are published with PAI-Bench-U (videos/<subset>/<id>.mp4)"


def _media_settings(settings) -> dict:
    return {"fps": settings.fps, "max_frames": settings.max_frames, "max_side": settings.max_side,
            "frame_timing": settings.frame_timing, "frame_pixels": settings.frame_pixels}


def shortfall(part: str, found: int, settings) -> str | None:
    """A sentence naming how many questions of the release's a part lacks (None when it has them all)."""
    expected = OFFICIAL_ROBOVQA if part == "robovqa" and settings.robovqa_items == "official_101" \
        else RELEASE_COUNTS[part]
    if found >= expected:
        return None
    return f"{found} of the release's {expected} questions ({expected - found} short)"

