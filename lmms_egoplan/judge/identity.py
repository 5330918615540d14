"""What judged a run, whole: ``JudgeIdentity``.

A judge is more than its model name: the revision of its weights, the snapshot the server says
answered (its served model name, OpenAI's ``system_fingerprint``), the judge prompt and the rubric
that reads its answers. The identity is recorded in the results' metadata (``metadata``: ``judge_*``
keys beside the judge settings), in each judged sample's item and in each audit line (``record``),
and read back from either (``from_record``) by the report and ``rejudge``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from lmms_egoplan.judge.protocol import Completion
from lmms_egoplan.judge.rubrics import Rubric
from lmms_egoplan.judge.settings import JudgeSettings


@dataclass(frozen=True)
class JudgeIdentity:
    backend: str
    model: str  # what the settings asked for
    revision: str | None = None  # the weights' revision (judge_revision)
    rubric: str | None = None  # the rubric's name (what judged items carry)
    rubric_version: str | None = None
    prompt_hash: str | None = None
    served_model: str | None = None  # the model the server said answered (the preflight's answer)
    system_fingerprint: str | None = None  # the server's configuration that answered, where it says

    @classmethod
    def of(cls, settings: JudgeSettings, name: str, rubric: Rubric,
           snapshot: Completion | None = None) -> "JudgeIdentity":
        """The judge of ``settings`` reading answers with ``rubric``, named ``name`` (what its judged items carry);
        ``snapshot``: an answer of the server (the preflight's), for what it says answered."""
        return cls(settings.judge_backend, settings.judge_model, settings.judge_revision, name, rubric.version,
                   rubric.prompt_hash, snapshot.model if snapshot else None, snapshot.fingerprint if snapshot else None)

    def record(self) -> dict[str, Any]:
        """What a judged item and an audit line carry."""
        return asdict(self)

    def metadata(self) -> dict[str, Any]:
        """The results' metadata keys of the identity that are not judge settings (backend, model and revision are)."""
        return {"judge_rubric": self.rubric, "judge_rubric_version": self.rubric_version,
                "judge_prompt_hash": self.prompt_hash, "judge_served_model": self.served_model,
                "judge_system_fingerprint": self.system_fingerprint}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "JudgeIdentity | None":
        """The identity a ``record`` or a task's metadata (``judge_*`` keys) holds; None without a judge model."""
        if "judge_model" in record:
            record = {name: record.get(f"judge_{name}") for name in ("backend", "model", "revision", "rubric",
                                                                     "rubric_version", "prompt_hash",
                                                                     "served_model", "system_fingerprint")}
        values = {f.name: _text(record.get(f.name)) for f in fields(cls)}
        if not values["model"]:
            return None
        return cls(**{**values, "backend": values["backend"] or "openai"})

    def text(self) -> str:
        """The judge in a report's cell: ``openai:Qwen/Qwen3-30B-A3B-Instruct-2507@0d7cf23 (served as ...,
        fingerprint ...); rubric <name> v1, prompt 1a2b3c4d5e6f7a8b``."""
        model = f"{self.backend}:{self.model}" + (f"@{self.revision[:7]}" if self.revision else "")
        served = [f"served as {self.served_model}"] if self.served_model and self.served_model != self.model else []
        served += [f"fingerprint {self.system_fingerprint}"] if self.system_fingerprint else []
        rubric = (f"; rubric {self.rubric} v{self.rubric_version or '?'}, prompt {self.prompt_hash}"
                  if self.rubric else "")
        return model + (f" ({', '.join(served)})" if served else "") + rubric


def _text(value: Any) -> str | None:
    """A recorded value as text; None for none (the report reads metadata values as JSON text: "null")."""
    return None if value in (None, "", "null") else str(value)
