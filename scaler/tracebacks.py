"""Internal: the traceback of a failed task as its user reads it: its own frames, files and source lines.

Shared by the worker's processors, which format a task's exception with Scaler's own frames left out
(`task_traceback`), and the client, which fills in the source lines the worker could not read from its own files
(`fill_in_source`): a function that travels by value (defined in __main__, a notebook, a module registered by value)
was written on the client, and the worker may have no copy of its file. Both run on the failure path only.
"""

from __future__ import annotations

import copyreg
import linecache
import os
import pickle
import re
import traceback
from types import ModuleType
from typing import List, Optional, Set, Tuple

import cloudpickle


def _files_of(module: ModuleType, package: bool) -> Tuple[str, ...]:
    """The path prefix of a module's file, or of its package's directory; none for a module without a file."""
    if not module.__file__:
        return ()
    path = os.path.abspath(module.__file__)
    return (os.path.dirname(path) + os.sep,) if package else (path,)


# Where Scaler's own frames come from: the processor's loop, the runner, a nested client's future, the serializer.
# (This module is the package's own: its directory is the package's, without importing the package from below it.)
SCALER_FILES = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)
# For an error of the serializer, its machinery too: what the user can act on is their object and its __reduce__.
SERIALIZER_FILES = (
    *SCALER_FILES,
    *_files_of(cloudpickle, package=True),
    *_files_of(pickle, package=False),
    *_files_of(copyreg, package=False),
)

# A frame line of traceback.format_exception; within an exception group, behind a margin of spaces and | + -.
_FRAME = re.compile(r'(?P<margin>[ |+\-]*?)  File "(?P<file>[^"\n]+)", line (?P<line>\d+), in ')


def task_traceback(error: BaseException, left_out: Tuple[str, ...] = SCALER_FILES) -> str:
    """The text of `error`'s traceback, and of its causes and contexts, without the frames of files under the paths
    `left_out`. Source lines are read (here, on the worker) only for the frames kept."""
    exception = traceback.TracebackException(type(error), error, error.__traceback__, lookup_lines=False)
    _leave_out(exception, left_out)
    return "".join(exception.format())


def _leave_out(exception: traceback.TracebackException, left_out: Tuple[str, ...]) -> None:
    todo: List[Optional[traceback.TracebackException]] = [exception]
    seen: Set[int] = set()
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        kept = [frame for frame in current.stack if not frame.filename.startswith(left_out)]
        if len(kept) != len(current.stack):
            current.stack = traceback.StackSummary.from_list(kept)
        todo.append(current.__cause__)
        todo.append(current.__context__)
        todo.extend(getattr(current, "exceptions", None) or ())  # an exception group's members (3.11+)


def fill_in_source(text: str) -> str:
    """`text`, a traceback from a worker, with the source line of each frame that has none taken from this process's
    copy of its file (or what linecache holds for it: a notebook's cells), where there is one."""
    if '  File "' not in text:
        return text
    lines = text.split("\n")
    filled: List[str] = []
    checked: Set[str] = set()
    for index, line in enumerate(lines):
        filled.append(line)
        match = _FRAME.match(line)
        if match is None:
            continue
        margin = match.group("margin")
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if following.startswith(margin + "    ") and not _FRAME.match(following):
            continue  # the worker read it
        filename = match.group("file")
        if filename not in checked:
            checked.add(filename)
            linecache.checkcache(filename)  # as traceback does: a file edited since is read again
        source = linecache.getline(filename, int(match.group("line"))).strip()
        if source:
            filled.append(f"{margin}    {source}")
    return "\n".join(filled)


def add_note(exception: BaseException, note: str) -> None:
    """exception.add_note(note), which tracebacks show below the exception (Python 3.11+); before 3.11, the same
    __notes__ attribute, which the traceback module of those versions ignores."""
    add = getattr(exception, "add_note", None)
    if add is not None:
        add(note)
        return
    try:
        notes = exception.__dict__.setdefault("__notes__", [])
        notes.append(note)
    except AttributeError:
        pass  # an exception without a __dict__ (slots only) carries no note before 3.11


def note_unserializable_argument(exception: BaseException, which: object) -> None:
    """Say, on an argument's serialization error raised at submit, that it happened here on the client (unlike a
    result that could not be serialized on its worker: scaler.errors.ResultSerializationError)."""
    note = f"Scaler: could not serialize argument {which!r} here on the client; the task was not submitted"
    add_note(exception, note)
