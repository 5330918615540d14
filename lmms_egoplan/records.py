"""JSON-lines record files (one JSON object per line), read one way across the suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from lmms_egoplan.errors import InputError


def read_jsonl(path: str | Path, error_class: type[InputError] = InputError) -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` for every non-blank line of ``path``, as the file is read.

    A missing file raises FileNotFoundError; a line that is not a JSON object raises
    ``error_class`` naming the file and the line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise error_class(f"{path}:{number}: not JSON ({error})") from None
            if not isinstance(record, dict):
                raise error_class(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            yield number, record
