"""``<checkpoint>/edits/``: DELETE / UPDATE requests of keyed state waiting for the writer that
holds the checkpoint's lease, and their answers.

An edit is never applied by its caller behind a running query's back: the caller queues a
request (``<id>.request.json``, created once) and whoever holds the lease applies the pending
requests, in order, at a batch boundary — a running query between two batches, else the caller
itself once it takes the lease. The writer records the request's id in the commit that applies
it (so a request is applied once, whatever crashes), then answers (``<id>.answer.json``: the
audit, or the error that refused it). The caller reads the answer and removes both files.

A request holds its predicate, which may name the keys to erase: it lives only while pending.
An answer holds counts only, or the refusal's message, which may quote the predicate: refusals
nobody collected (their caller gone) are removed after ten minutes, other answers after a day;
a request file left unreadable (its caller killed while writing it) after ten minutes."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

from .faults import crash_point
from .filesystems import filesystem
from .fs import FSError, join

__all__ = ["EDITS_DIR", "EditAnswer", "EditQueue", "EditRequest"]

log = logging.getLogger(__name__)

EDITS_DIR = "edits"
_REQUEST = ".request.json"
_ANSWER = ".answer.json"
_ANSWER_KEPT_MS = 24 * 3600 * 1000  # an answer nobody collected
_REFUSAL_KEPT_MS = 10 * 60 * 1000  # a refusal nobody collected (its message may quote the predicate)
_UNREADABLE_KEPT_MS = 10 * 60 * 1000  # a request created but never written (its caller killed)


@dataclass(frozen=True)
class EditRequest:
    id: str  # sortable: the time it was made, then a random part
    kind: str  # "delete" | "update"
    function: str
    where: str
    assignments: tuple[tuple[str, str], ...]
    requested_ms: int
    by: str  # host and process of the caller

    @classmethod
    def new(cls, kind: str, function: str, where: str, assignments: tuple[tuple[str, str], ...]) -> EditRequest:
        now = int(time.time() * 1000)
        return cls(
            f"{now:013d}-{uuid.uuid4().hex[:8]}",
            kind,
            function,
            where,
            tuple(assignments),
            now,
            f"process {os.getpid()} on {socket.gethostname()}",
        )

    @property
    def verb(self) -> str:
        return self.kind.upper()

    def to_json(self) -> str:
        d = {k: getattr(self, k) for k in ("id", "kind", "function", "where", "requested_ms", "by")}
        return json.dumps(d | {"assignments": [list(a) for a in self.assignments]}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EditRequest:
        d = json.loads(text)
        return cls(
            str(d["id"]),
            str(d["kind"]),
            str(d["function"]),
            str(d["where"]),
            tuple((str(c), str(e)) for c, e in d.get("assignments") or ()),
            int(d["requested_ms"]),
            str(d.get("by") or "?"),
        )


@dataclass(frozen=True)
class EditAnswer:
    """What the writer that applied (or refused) a request answers: the audit, or the error."""

    audit: dict[str, Any] | None
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps({"audit": self.audit, "error": self.error}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EditAnswer:
        d = json.loads(text)
        return cls(d.get("audit"), d.get("error"))


class EditQueue:
    def __init__(self, checkpoint: str, spark: Any = None):
        self.checkpoint = checkpoint
        self.fs = filesystem(spark)
        self.dir = join(checkpoint, EDITS_DIR)

    def request_path(self, request_id: str) -> str:
        return join(self.dir, request_id + _REQUEST)

    def answer_path(self, request_id: str) -> str:
        return join(self.dir, request_id + _ANSWER)

    # ------------------------------------------------------------------ the caller's side
    def submit(self, request: EditRequest) -> str:
        self.fs.mkdirs(self.dir)
        path = self.request_path(request.id)
        self.fs.create_text(path, request.to_json())
        self.sweep_refusals()  # on an idle checkpoint too
        return path

    def answer(self, request_id: str) -> EditAnswer | None:
        try:
            text = self.fs.read_text(self.answer_path(request_id))
        except FileNotFoundError:
            return None
        try:
            return EditAnswer.from_json(text)
        except (ValueError, TypeError):
            return None  # being written (an object store's PUT is whole; a local write may be seen torn)

    def is_pending(self, request_id: str) -> bool:
        return self.fs.exists(self.request_path(request_id))

    def collect(self, request_id: str) -> None:
        """The caller has its answer: the request (if its writer had not removed it yet) and the
        answer go. Best effort: the writer may be removing the request at the same moment (on
        Spark Connect the server's listing then fails on the vanishing file), and what is left
        is swept later."""
        for path in (self.request_path(request_id), self.answer_path(request_id)):
            try:
                self.fs.delete(path, recursive=False)
            except FSError as exc:
                log.debug("%s not removed now (%s); swept later", path, exc)

    # ------------------------------------------------------------------ the writer's side
    def pending(self) -> list[EditRequest]:
        """The requests not yet answered, oldest first (one listing when there are none)."""
        if not self.fs.is_dir(self.dir):
            return []
        names = sorted(self.fs.list(self.dir))
        answered = {n[: -len(_ANSWER)] for n in names if n.endswith(_ANSWER)}
        out = []
        for name in names:
            if not name.endswith(_REQUEST):
                continue
            if name[: -len(_REQUEST)] in answered:  # answered, not yet removed (a crash between): its predicate goes
                self.fs.delete(join(self.dir, name), recursive=False)
                continue
            try:
                out.append(EditRequest.from_json(self.fs.read_text(join(self.dir, name))))
            except FileNotFoundError:
                continue  # withdrawn meanwhile
            except (ValueError, TypeError, KeyError) as exc:
                # created but not yet written (local file systems), or not a request: passed over,
                # and removed once old (its caller was killed while writing it)
                path = join(self.dir, name)
                if self._older_than(path, _UNREADABLE_KEPT_MS):
                    self.fs.delete(path, recursive=False)
                    log.warning("checkpoint %s: edit request %s unreadable for long; removed", self.checkpoint, name)
                else:
                    log.warning(
                        "checkpoint %s: edit request %s unreadable, passed over (%s)", self.checkpoint, name, exc
                    )
        self._sweep(names)
        return out

    def answer_with(self, request: EditRequest, answer: EditAnswer) -> None:
        """Answer ``request`` (once its edit is committed, or refused), then remove it."""
        self.fs.create_text(self.answer_path(request.id), answer.to_json(), overwrite=True)
        crash_point("edit_answered")
        self.fs.delete(self.request_path(request.id), recursive=False)

    def sweep_refusals(self) -> None:
        """Refusals older than ten minutes, and other answers older than a day, whose caller
        never came for them."""
        if self.fs.is_dir(self.dir):
            self._sweep(self.fs.list(self.dir))

    def _sweep(self, names: list[str]) -> None:
        for name in names:
            if not name.endswith(_ANSWER):
                continue
            path = join(self.dir, name)
            if self._older_than(path, _REFUSAL_KEPT_MS) and (
                self._older_than(path, _ANSWER_KEPT_MS) or self._is_refusal(path)
            ):
                self.fs.delete(path, recursive=False)

    def _is_refusal(self, path: str) -> bool:
        try:
            return EditAnswer.from_json(self.fs.read_text(path)).error is not None
        except (FileNotFoundError, ValueError, TypeError):
            return False

    def _older_than(self, path: str, ms: int) -> bool:
        try:
            return int(time.time() * 1000) - self.fs.modified_ms(path) > ms
        except FileNotFoundError:
            return False
