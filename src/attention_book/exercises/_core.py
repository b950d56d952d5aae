"""The exercise registry: every exercise has an id, a title, a checker, the ideas it practises
(properties, each with a probe) and known mistakes.

Chapters 1-7 call :func:`check` and :func:`summary` from here; the checkers live in
``exercises/chapterNN.py``, one module per chapter.

How an answer is judged (:func:`check`), in this order:

1. **Properties.** Each exercise names the ideas it practises, each as a :class:`Property`:
   the idea in the chapter's words and a *probe*, a function ``probe(answer) -> str | None``
   that builds an input on which that one idea decides the output (a future token changed, the
   positions permuted, d_k doubled, a row of scores whose softmax axis shows, a scripted model
   that says something other than EOS after EOS, ...) and returns ``None`` when the answer
   keeps the idea, or one sentence with the probe's numbers when it breaks it. The first
   property that breaks is the hint: ``"<property name>: <sentence>"``. A probe that cannot
   tell (the answer crashed, or returned the wrong type or shape) is inconclusive: it raises
   (anything, e.g. :class:`Inconclusive`), and the checker below reports the crash or the shape.
2. **The checker**, ``checker(answer) -> None``: compares the answer with the reference on fresh
   seeded random inputs and raises :class:`ExerciseFailure`. It explains a wrong shape from the
   shapes (which axis holds what; see :func:`require_tensor_like` with ``axes=`` and
   :func:`name_sizes`), and, as a fallback only, names the registered wrong variant the answer
   equals or is nearest to (:func:`diagnose` with ``known_mistakes``). The checker runs only when
   no property broke, so its registered variants are the fallback for what no probe names.

:func:`check` turns all this into exactly one printed line.

The most specific diagnosis wins (issue 45). A probe that recognises a usual slip exactly (the answer computes
what the slip computes on the probe's inputs: a sparsemax sorted the wrong way, a decoder layer whose
cross-attention reads its own states, a causal mask of the opposite convention) comes before the probes of
the ideas it would otherwise break, and names the slip; a probe of what is returned (``_probes.output_pair_probe``:
(A, H), the weights returned as the output) and of randomness (``_probes.determinism_probe``: dropout or sampling
left on) come first of all. A probe never blames a part the answer got right:
``tests/unit/test_exercises_catalogue.py`` feeds every registered mistake and a catalogue of 342 more wrong
answers and checks that no other mistake's hint is given. A crash in the student's code is mapped back to the
line that raised it and the repair it needs (``_crashes.shape_fix``: which transpose, axis, operand or
``keepdim``); :func:`crash_probe` runs an answer on shapes the checker's first case does not use, so that a
transpose that fits only square matrices is told so. Checks run on one thread (:func:`evaluate`): their tensors
are tiny, and several threads spin on a busy machine.

Adding an exercise::

    def _causality(answer):                       # a probe: None, or what broke, with numbers
        x = torch.randn(1, 5, 4)
        changed = x.clone(); changed[0, 3:] += 1.0  # change the future of position 2
        moved = (answer(changed)[0, :3] - answer(x)[0, :3]).abs().max().item()
        return None if moved < 1e-5 else f"changing tokens 3-4 moved the outputs at 0-2 by {moved:.3g}"

    register("N.M", "Title", _check_it, answer="my_function", solution=_solution,
             mistakes=[Mistake(...), Mistake(...)], properties=[Property("causality (no position sees a later token)", _causality)])

Properties can also be added after ``register`` with :func:`add_properties` (a block at the end of a
chapter's module). Probe helpers: :func:`probe_tensor` (the answer's output as float64 of a required
shape, or inconclusive), :func:`probe_pair` (the two parts of a returned pair), :func:`probe_from_check`
(a probe from a checker's own case function, for exercises whose checker already tests the idea), and
:func:`worst_row_sum`; ``_probes.attention_properties`` gives the softmax axis, the softmax and the
scale for any answer adapted to ``weights_of(answer, Q, K)``. A probe builds its own
inputs so that the idea it tests changes the output (a scripted model that does not share the
mistake's behaviour), names sizes that differ from each other, and never fails the solution or a
correct alternative. Every property needs a row in ``tests/unit/test_exercises_properties.py``: a
wrong answer that breaks it and gets its hint.

Each exercise also registers a correct ``solution`` and a list of :class:`Mistake` objects
(typical wrong answers together with the hint the checker gives them when no property names them);
the test suite runs every one of them through :func:`check` (``tests/helpers.expected_hint``).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import pkgutil
import re
import sysconfig
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

# Plain marks from DejaVu Sans (U+2713 CHECK MARK, U+2717 BALLOT X): they render without an
# emoji font, where ✅ and ❌ show as empty boxes (Chromium on Linux).
PASS_MARK = "✓"
FAIL_MARK = "✗"
NOT_IMPLEMENTED = "not implemented yet"
# What the last resort of :func:`diagnose` says; a named mistake never contains it.
GENERIC = "differs from the reference"


class ExerciseFailure(Exception):
    """Raised by a checker: the message says what is wrong and how to fix it."""


class Inconclusive(Exception):
    """Raised by a probe that cannot tell (the answer's output has the wrong type or shape)."""


@dataclass(frozen=True)
class Property:
    """An idea an exercise practises, in the chapter's words, and a probe for it alone.

    ``probe(answer)`` returns ``None`` when the answer keeps the idea, or one sentence (with the
    probe's numbers) saying how it breaks it; it may raise to say it cannot tell.
    """

    name: str
    probe: Callable[[Any], str | None]


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer and a fragment of the hint it must receive."""

    name: str
    answer: Any
    hint: str


@dataclass
class Exercise:
    """One exercise. ``answer`` names what the student defines and the check cell passes: one name
    (``"attention"``) or several, passed as a tuple (``("split_heads", "merge_heads")``); the grader
    (``attention_book.grade``) looks the answer up by these names. ``points`` is what the exercise is
    worth in a gradebook: 1 unless registered otherwise (the one place points are set)."""

    id: str
    title: str
    checker: Callable[[Any], None]
    solution: Any = None
    mistakes: list[Mistake] = field(default_factory=list)
    properties: list[Property] = field(default_factory=list)
    answer: str | tuple[str, ...] = ""
    points: int = 1

    @property
    def chapter(self) -> str:
        return self.id.split(".")[0]

    @property
    def answer_names(self) -> tuple[str, ...]:
        return (self.answer,) if isinstance(self.answer, str) else tuple(self.answer)

    @property
    def answer_expression(self) -> str:
        """The answer as its check cell writes it: ``attention`` or ``(split_heads, merge_heads)``."""
        names = self.answer_names
        return names[0] if isinstance(self.answer, str) else f"({', '.join(names)})"


REGISTRY: dict[str, Exercise] = {}
# Outcome of the latest check of each exercise in this kernel: True (passed) or False.
RESULTS: dict[str, bool] = {}


def register(
    exercise_id: str,
    title: str,
    checker: Callable[[Any], None],
    answer: str | tuple[str, ...],
    solution: Any,
    mistakes: list[Mistake],
    properties: list[Property] | tuple[Property, ...] = (),
    points: int = 1,
) -> Exercise:
    """Add an exercise; ids look like ``"1.2"`` (chapter.number). ``properties`` are probed in order.

    ``answer`` is the name the student's notebook defines (or a tuple of names), ``points`` what the
    exercise is worth when graded (see :class:`Exercise`)."""
    if exercise_id in REGISTRY:
        raise ValueError(f"exercise {exercise_id!r} is registered twice")
    if len(mistakes) < 2:
        raise ValueError(f"exercise {exercise_id!r} needs at least two known mistakes, got {len(mistakes)}")
    names = (answer,) if isinstance(answer, str) else tuple(answer)
    if not names or not all(isinstance(name, str) and name.isidentifier() for name in names):
        raise ValueError(f"exercise {exercise_id!r}: answer must name what the student defines, got {answer!r}")
    if not isinstance(points, int) or isinstance(points, bool) or points < 1:
        raise ValueError(f"exercise {exercise_id!r}: points must be a whole number of at least 1, got {points!r}")
    exercise = Exercise(
        exercise_id,
        title,
        checker,
        solution=solution,
        mistakes=list(mistakes),
        properties=list(properties),
        answer=answer,
        points=points,
    )
    REGISTRY[exercise_id] = exercise
    return exercise


def add_properties(exercise_id: str, properties: list[Property] | tuple[Property, ...]) -> None:
    """Append properties to an exercise registered earlier (e.g. at the end of a chapter's module)."""
    REGISTRY[exercise_id].properties.extend(properties)


def broken_property(exercise: Exercise, answer: Any) -> tuple[Property, str] | None:
    """The first of the exercise's properties that ``answer`` breaks, with its probe's sentence.

    Probes run on their own inputs with the global random state restored afterwards; a probe that
    raises (the answer crashed, or gave the wrong type or shape) cannot tell and is skipped.
    """
    for prop in exercise.properties:
        try:
            with torch.random.fork_rng(devices=[]), warnings_silenced():
                sentence = prop.probe(answer)
        except Exception:  # inconclusive: the checker reports crashes and shapes
            continue
        finally:
            _VIEW_FALLBACKS.clear()
        if sentence:
            return prop, sentence
    return None


@contextlib.contextmanager
def warnings_silenced():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


_loaded = False


def load_all() -> None:
    """Import every ``chapterNN`` module of this package, registering its exercises (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    package = __name__.rsplit(".", 1)[0]  # attention_book.exercises
    for module in sorted(pkgutil.iter_modules(importlib.import_module(package).__path__), key=lambda m: m.name):
        if module.name.startswith("chapter") or module.name.startswith("sample"):
            importlib.import_module(f"{package}.{module.name}")


def get(exercise_id: str) -> Exercise:
    load_all()
    key = str(exercise_id)
    if key not in REGISTRY:
        raise KeyError(f"no exercise {key!r}; known exercises: {', '.join(sorted(REGISTRY, key=_sort_key))}")
    return REGISTRY[key]


def _sort_key(exercise_id: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in exercise_id.split("."))


class CheckResult:
    """What :func:`check` returns: true when the exercise passed, and invisible in a notebook.

    A plain ``True`` would be displayed under the check line as the cell's result.
    """

    __slots__ = ("passed",)

    def __init__(self, passed: bool):
        self.passed = bool(passed)

    def __bool__(self) -> bool:
        return self.passed

    def __eq__(self, other: object) -> bool:
        return bool(self) == other if isinstance(other, bool) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.passed)

    def __repr__(self) -> str:
        return f"CheckResult(passed={self.passed})"

    def _ipython_display_(self) -> None:
        """Display nothing: check() has printed its line."""


@dataclass(frozen=True)
class Outcome:
    """What checking one answer gave: ``status`` is ``"passed"``, ``"failed"`` or ``"not attempted"``
    (the answer still raises ``NotImplementedError``); ``line`` is the one line :func:`check` prints and
    ``hint`` that line without its mark and the exercise's label (a gradebook's feedback)."""

    exercise_id: str
    status: str
    line: str
    hint: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def evaluate(exercise_id: str, answer: Any) -> Outcome:
    """Judge ``answer`` for an exercise without printing: what :func:`check` and the grader share.

    Never raises for a wrong answer: an answer that crashes gets a hint naming the student's line
    that raised and the likely cause. An unknown exercise id raises ``KeyError``.
    """
    exercise = get(exercise_id)
    label = f"Exercise {exercise.id} ({exercise.title})"
    _VIEW_FALLBACKS.clear()
    _SIZE_NAMES.clear()
    grad_enabled = torch.is_grad_enabled()  # an answer that leaves autograd off must not switch it off for the notebook
    # The checks work on tensors of a few dozen numbers: one thread is fastest, and on a busy machine several threads
    # spin (a 4-d softmax took 10 ms a call with two threads on a loaded 2-core machine, 10 us with one).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    status, hint, crashed = "failed", "", False
    try:
        if callable(answer) or isinstance(answer, (tuple, list)):
            broken = broken_property(exercise, answer)
            if broken is not None:
                raise ExerciseFailure(_property_message(exercise, answer, *broken))
        with torch.random.fork_rng(devices=[]):
            exercise.checker(answer)
        if _VIEW_FALLBACKS:
            raise ExerciseFailure(_VIEW_FALLBACKS[0] + " With reshape your answer is right: " + VIEW_HINT)
        status, hint = "passed", "passed."
    except ExerciseFailure as failure:
        hint = str(failure)
        if _VIEW_FALLBACKS and "With reshape your answer is right" not in hint:
            hint = f"{_VIEW_FALLBACKS[0]} Run with reshape instead, {hint}"
    except NotImplementedError:
        status, hint = "not attempted", f"{NOT_IMPLEMENTED}. Replace the `raise NotImplementedError` with your code."
    except Exception as error:  # the student's code crashed: name its line and the likely cause, never raise
        hint, crashed = describe_exception(error), True
    finally:
        _VIEW_FALLBACKS.clear()
        _SIZE_NAMES.clear()
        torch.set_grad_enabled(grad_enabled)
        torch.set_num_threads(threads)
    RESULTS[exercise.id] = status == "passed"
    mark = PASS_MARK if status == "passed" else FAIL_MARK
    line = _one_line(f"{mark} {label}: {hint}")
    if crashed:
        line = line[:1000]
    return Outcome(exercise.id, status, line, hint=line[len(f"{mark} {label}: ") :])


def check(exercise_id: str, answer: Any) -> CheckResult:
    """Check ``answer`` for an exercise; print one line saying whether it passed and why not.

    Never raises: an answer that crashes gets a line naming the student's line that raised and
    the likely cause. Returns a :class:`CheckResult`, true when the answer passed; a notebook
    shows nothing for it (the printed line says it all), so a check cell shows exactly one line.
    """
    try:
        outcome = evaluate(exercise_id, answer)
    except KeyError as error:
        print(f"{FAIL_MARK} {error.args[0]}")
        return CheckResult(False)
    print(outcome.line)
    return CheckResult(outcome.passed)


def _property_message(exercise: Exercise, answer: Any, prop: Property, sentence: str) -> str:
    """The hint for a broken property: its name, then the probe's sentence.

    The registered wrong variant that the answer matches is not added: two mistakes can give the same numbers
    (forgetting W_V or W_O gives the same count), so it could name a mistake the answer did not make.
    """
    return f"{prop.name}: {sentence}"


# ---------------------------------------------------------------------------------
# Exceptions from the student's code: one line, the student's line, the likely cause

_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])  # .../attention_book
_LIBRARY_DIRS = tuple(
    str(Path(path).resolve())
    for path in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
) + (str(Path(torch.__file__).resolve().parent),)

# (what the error message contains, the likely cause): the first match wins.
LIKELY_CAUSES: list[tuple[str, str]] = [
    (
        "view size is not compatible",
        "view() needs the numbers in memory order; after transpose/permute/chunk use "
        "reshape() (or .contiguous().view())",
    ),
    (
        "cannot be multiplied",
        "a matrix product whose inner sizes do not match: check which operand needs .T "
        "(or .transpose(-2, -1)) and the shapes of the weight matrices",
    ),
    (
        "dimensions of batch2 tensor",
        "a (batched) matrix product whose inner sizes do not match: check which operand "
        "needs .transpose(-2, -1) (K, not K^T, has the keys as rows)",
    ),
    (
        "must match the size of tensor",
        "two tensors whose shapes do not broadcast: line up their axes "
        "(add one with [:, None] or unsqueeze, or transpose)",
    ),
    (
        "is invalid for input of size",
        "a reshape/view to a shape with a different number of elements: "
        "check the sizes you pass (e.g. d_model // num_heads)",
    ),
    (
        "dimension out of range",
        "an axis that this tensor does not have: count its dimensions (x.dim()) "
        "and use negative axes (-1 = last) where the batch axes vary",
    ),
    (
        "boolean value of tensor with more than one value is ambiguous",
        "a tensor used as True/False (`if mask:`, `and`, `or`): to ask whether an optional argument was given, "
        "write `if mask is not None:`; to ask about its entries, use .any() or .all()",
    ),
    (
        "grad can be implicitly created only for scalar outputs",
        "autograd differentiates one number: backpropagate from a sum (state.sum()), not from a vector",
    ),
    (
        "t() expects a tensor with <= 2 dimensions",
        "t() only transposes a matrix; on a tensor with a batch axis write .transpose(-2, -1) to swap the last two axes",
    ),
    (
        "tuple of ints",
        "a size computed with / is a float (12 / 3 = 4.0): use // for sizes, e.g. d_model // num_heads",
    ),
    (
        "cannot assign module before module.__init__() call",
        "an nn.Module's __init__ must call super().__init__() first, before it assigns any layer or parameter",
    ),
    (
        "examples but",
        "the features and the labels disagree on the number of examples: index the axis you mean (features of "
        "shape (examples, layers, d): one layer's features are features[:, layer])",
    ),
    ("expected scalar type", "two tensors of different dtypes: convert with .to(other.dtype) or .float()"),
    (
        "does not support bool",
        "an operation that does not take a boolean tensor (argmax, for one): convert the mask first, .long() or .int()",
    ),
    ("dtype", "a tensor of the wrong dtype: masks are torch.bool, token ids torch.long, the rest float"),
    ("does not require grad", "a tensor cut off from autograd (.detach(), .item(), numpy, torch.no_grad())"),
    (
        "positional argument",
        "your function takes other arguments than the exercise asks for: compare its "
        "signature with the one in the task",
    ),
    (
        "unexpected keyword argument",
        "your function takes other arguments than the exercise asks for: compare its "
        "signature with the one in the task",
    ),
    ("not callable", "a value used as a function: did you overwrite a function's name with a tensor?"),
    (
        "index",
        "an index past the end of an axis: check the ranges of your loops and slices (positions run from 0 to T - 1)",
    ),
    ("out of bounds", "an index past the end of an axis: check the ranges of your loops and slices"),
    ("is not defined", "a name that does not exist in your function: a typo, or a variable from another cell"),
    ("has no attribute", "an attribute that this object does not have: check its type (print(type(x)))"),
    ("division by zero", "a division by zero: a count that can be 0 (e.g. a row with no real tokens)"),
]


def _student_frame(error: BaseException):
    """The deepest traceback frame in the student's code: not in this package, torch or the stdlib."""
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        filename = str(Path(frame.filename).resolve()) if not frame.filename.startswith("<") else frame.filename
        if filename.startswith(_PACKAGE_DIR) or filename.startswith(_LIBRARY_DIRS):
            continue
        return frame
    return None


def _where(frame) -> str:
    if frame is None:
        return "inside a library call (no line of your code is on the stack)"
    filename = frame.filename
    in_cell = "ipykernel" in filename or filename.startswith("<ipython-input") or filename.startswith("<cell")
    place = "of your cell" if in_cell else f"of {Path(filename).name}"
    code = f" `{frame.line.strip()[:80]}`" if frame.line and frame.line.strip() else ""
    return f"in {frame.name}(), line {frame.lineno} {place}{code}"


# What the sizes of the checker's current inputs mean ({5: "T (positions)"}): set with name_sizes()
# before calling the answer, so a broadcasting or product error is explained from the shapes.
_SIZE_NAMES: dict[int, str] = {}


def name_sizes(**sizes: int) -> None:
    """Say what each size of the next inputs means, e.g. ``name_sizes(batch=2, T=5, d_model=16)``:
    a broadcasting or matrix-product error in the answer is then explained axis by axis."""
    for name, size in sizes.items():
        size = int(size)
        if size in _SIZE_NAMES and name not in _SIZE_NAMES[size].split(" or "):
            _SIZE_NAMES[size] += f" or {name}"
        else:
            _SIZE_NAMES.setdefault(size, name)


def _size(size: int) -> str:
    name = _SIZE_NAMES.get(int(size))
    return f"{size} (= {name})" if name and size != 1 else str(size)


def _shapes_explained(text: str) -> str | None:
    """A broadcasting or product error explained with the names of its sizes (None if unnamed)."""
    if not _SIZE_NAMES:
        return None
    match = re.search(
        r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)", text
    )
    if match:
        a, b, dim = (int(group) for group in match.groups())
        return (
            f"two tensors do not broadcast: on axis {dim} of the result one holds {_size(a)} and the other {_size(b)}, "
            "so the same axis holds different things in the two. Line up the axes so that each holds the same "
            "thing in both (batch, position, feature), adding a size-1 axis ([:, None] or unsqueeze) or transposing"
        )
    match = re.search(r"shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", text)
    if match:
        rows, inner_a, inner_b, cols = (int(group) for group in match.groups())
        return (
            f"a matrix product (rows {_size(rows)}) x (inner {_size(inner_a)}) times (inner {_size(inner_b)}) x "
            f"(columns {_size(cols)}): the inner sizes must be equal, so one operand has its axes the other way "
            "round (use .T or .transpose(-2, -1), or swap the operands)"
        )
    return None


def _is_library(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    resolved = str(Path(filename).resolve())
    return resolved.startswith(_PACKAGE_DIR) or resolved.startswith(_LIBRARY_DIRS)


def likely_cause(error: BaseException) -> str | None:
    """The likely cause of an exception from the student's code, from its type and message: first the
    repair its line needs (:func:`._crashes.shape_fix`: which transpose, axis or operand), then the
    shapes explained, then the message's usual cause."""
    from ._crashes import shape_fix

    text = str(error).lower()
    fix = shape_fix(error, _is_library, _size)
    if fix:
        return fix
    explained = _shapes_explained(text)
    if explained:
        return explained
    for fragment, cause in LIKELY_CAUSES:
        if fragment in text:
            return cause
    if isinstance(error, ZeroDivisionError):
        return "a division by zero: a count that can be 0 (e.g. a row with no real tokens)"
    if isinstance(error, (IndexError, KeyError)):
        return "an index or key that does not exist: check the ranges of your loops and slices"
    return None


def describe_exception(error: BaseException) -> str:
    """One line: the error, the student's line that raised it, and its likely cause."""
    message = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    line = f"your code raised {type(error).__name__} {_where(_student_frame(error))}"
    if message:
        line += f": {message}"
    cause = likely_cause(error)
    return f"{line}. Likely cause: {cause}" if cause else line


def _one_line(text: str) -> str:
    """``text`` on one line: check() promises exactly one printed line."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def summary(chapter: int | str | None = None) -> None:
    """Print a table of exercises (of one chapter, or all) and whether they pass in this session.

    Without a chapter, every chapter of the book is listed except the sample chapter 0
    (``tests/sample_exercises``), which only demonstrates the mechanism; ``summary(0)``
    lists it.
    """
    load_all()
    wanted = None if chapter is None else (str(int(chapter)) if str(chapter).isdigit() else str(chapter))
    chosen = [
        exercise
        for key, exercise in sorted(REGISTRY.items(), key=lambda item: _sort_key(item[0]))
        if (exercise.chapter != "0" if wanted is None else exercise.chapter == wanted)
    ]
    if not chosen:
        print(f"No exercises registered for chapter {chapter}.")
        return
    width = max(len(exercise.title) for exercise in chosen)
    print(f"{'exercise':<9} {'title':<{width}}  status")
    for exercise in chosen:
        state = RESULTS.get(exercise.id)
        status = "passed" if state else ("not yet passing" if state is False else "not checked yet")
        print(f"{exercise.id:<9} {exercise.title:<{width}}  {status}")
    passed = sum(1 for exercise in chosen if RESULTS.get(exercise.id))
    print(f"{passed} of {len(chosen)} exercises pass.")


# ---------------------------------------------------------------------------------
# Helpers for writing checkers


def diagnose_weights(weights, expected, what: str, known_mistakes: dict) -> None:
    """:func:`diagnose` for attention weights: a generic difference whose rows do not sum to 1
    is reported as that, the clearer hint (chapters 1 and 2)."""
    try:
        diagnose(weights, expected, what, known_mistakes=known_mistakes)
    except ExerciseFailure as failure:
        if GENERIC in str(failure):
            sums = torch.as_tensor(weights).detach().to(expected.dtype).sum(dim=-1)
            if torch.isfinite(sums).all() and not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
                raise ExerciseFailure(
                    f"{what} is wrong: its rows should each sum to 1 (a softmax over the last axis, the keys), "
                    f"but one sums to {sums.flatten()[(sums - 1).abs().flatten().argmax()]:.3f}"
                ) from None
        raise


def probe_tensor(got: Any, shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
    """A probe's view of an answer's output: float64, detached, of exactly ``shape``; otherwise
    :class:`Inconclusive` (the checker then explains the type or shape)."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(shape) or got.is_complex():
        raise Inconclusive(f"expected a tensor of shape {tuple(shape)}")
    return got.detach().to(torch.float64)


def probe_from_check(check_case: Callable[..., None], *args: Any) -> Callable[[Any], str | None]:
    """A probe from a checker's own case function ``check_case(answer, *args)`` that raises
    :class:`ExerciseFailure` naming the property (for exercises whose checker already tests the
    idea itself, such as a designed head or a chosen temperature): its message is the sentence."""

    def probe(answer: Any) -> str | None:
        try:
            check_case(answer, *args)
        except ExerciseFailure as failure:
            return str(failure)
        return None

    return probe


def crash_probe(run: Callable[[Any], Any], **sizes: int) -> Callable[[Any], str | None]:
    """A probe that runs the answer on inputs of other shapes than the checker's first case (``run(answer)``,
    with ``sizes`` naming their sizes): an answer that crashes there (a transpose that only fits square matrices,
    an element-wise product that only fits equal lengths) is told its line and the repair it needs
    (:func:`describe_exception`), where the checker's square case would only see wrong numbers."""

    def probe(answer: Any) -> str | None:
        saved = dict(_SIZE_NAMES)
        _SIZE_NAMES.clear()
        name_sizes(**sizes)
        try:
            run(answer)
        except NotImplementedError:
            raise
        except Exception as error:  # the student's code crashed on these shapes
            if _student_frame(error) is None:
                raise Inconclusive("no line of the student's code to point at") from error
            return describe_exception(error)
        finally:
            _SIZE_NAMES.clear()
            _SIZE_NAMES.update(saved)
        return None

    return probe


def probe_pair(got: Any) -> tuple[Any, Any]:
    """The two parts of an answer that returns a pair (e.g. (H, A)); otherwise :class:`Inconclusive`."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Inconclusive("expected a pair")
    return got[0], got[1]


def worst_row_sum(weights: torch.Tensor) -> float:
    """The sum over the last axis (the keys) that is farthest from 1 (nan counts as far)."""
    sums = weights.sum(dim=-1).flatten()
    if torch.isnan(sums).any():
        return float("nan")
    return float(sums[(sums - 1).abs().argmax()]) if sums.numel() else 1.0


def random_generator(seed: int | None = None) -> torch.Generator:
    """A fresh generator; without a seed, a new one each call so answers cannot be memorised."""
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


# A student's view() that fails on a non-contiguous tensor is re-run with reshape in its place,
# so that the mistake behind it (a missing transpose, say) gets the hint a reshape version gets.
_VIEW_FALLBACKS: list[str] = []
VIEW_HINT = (
    "view() only works when the numbers already lie in memory in the new order; after transpose, permute or "
    "chunk use reshape() (or .contiguous().view())"
)


@contextlib.contextmanager
def _view_as_reshape():
    original = torch.Tensor.view

    def view(self, *shape, **kwargs):
        if kwargs or (len(shape) == 1 and isinstance(shape[0], torch.dtype)):
            return original(self, *shape, **kwargs)
        return self.reshape(*shape)

    torch.Tensor.view = view
    try:
        yield
    finally:
        torch.Tensor.view = original


def call(answer: Callable, *args, what: str = "your function", **kwargs):
    """Call the student's answer; a NotImplementedError passes through, other errors reach check().

    A ``view()`` that fails because its tensor is not contiguous is run again with ``reshape`` in
    its place (the failure is remembered and reported by :func:`check`), so the checker can still
    name the mistake behind it.
    """
    if not callable(answer):
        raise ExerciseFailure(f"expected a function or class, but got {type(answer).__name__}")
    try:
        return answer(*args, **kwargs)
    except RuntimeError as error:
        if "view size is not compatible" not in str(error):
            raise
        frame = _student_frame(error)
        note = f"view() raised RuntimeError {_where(frame)} (the tensor is not contiguous)."
        with _view_as_reshape():
            result = answer(*args, **kwargs)
        if note not in _VIEW_FALLBACKS:
            _VIEW_FALLBACKS.append(note)
        return result


def _describe_type(got: Any) -> str:
    if type(got).__module__ == "torch.return_types":
        return (
            f"the (values, indices) pair that torch.{type(got).__name__} returns: take its .values (with keepdim=True "
            "to compare it with the scores) and build the tensor the exercise asks for"
        )
    if isinstance(got, (tuple, list)):
        inner = ", ".join(
            f"a tensor of shape {tuple(item.shape)}" if isinstance(item, torch.Tensor) else type(item).__name__
            for item in got[:4]
        )
        return f"a {type(got).__name__} of {len(got)} ({inner})"
    if type(got).__module__ == "numpy":
        return f"a numpy {type(got).__name__} (use torch operations, or torch.from_numpy)"
    return f"a {type(got).__name__}"


def require_tensor_like(
    got: Any, expected: torch.Tensor, what: str, known_mistakes: dict | None = None, axes: tuple[str, ...] | None = None
) -> torch.Tensor:
    """Check ``got`` is a tensor with the expected shape; returns it detached, in the expected dtype.

    A wrong shape is explained: by a known mistake of that shape, or from the shapes: with ``axes``
    (a name per expected axis, e.g. ``("batch", "position", "feature")``) the hint says what each of
    the answer's axes holds against what the exercise wants, and which axis is wrong; without, by
    how the shapes relate (axes swapped, an axis too many or too few, one axis of the wrong size).
    """
    if not isinstance(got, torch.Tensor):
        raise ExerciseFailure(
            f"{what} should be a torch.Tensor of shape {tuple(expected.shape)}, but is {_describe_type(got)}"
        )
    if tuple(got.shape) != tuple(expected.shape):
        for hint, wrong in (known_mistakes or {}).items():
            if (
                isinstance(wrong, torch.Tensor)
                and wrong.shape == got.shape
                and _close(got, wrong, atol=1e-5, rtol=1e-4)
            ):
                raise ExerciseFailure(f"{what} is wrong: {hint}")
        if (
            not got.is_floating_point()
            and got.dtype != torch.bool
            and expected.is_floating_point()
            and got.dim() < expected.dim()
        ):
            raise ExerciseFailure(
                f"{what} should be a tensor of shape {tuple(expected.shape)}, but you returned whole numbers of shape "
                f"{tuple(got.shape)}: an index (from argmax?), the position of the largest value, where a value for "
                "every position belongs"
            )
        story = _axes_story(tuple(got.shape), tuple(expected.shape), axes) if axes else ""
        raise ExerciseFailure(
            f"{what} has shape {tuple(got.shape)} but should have shape {tuple(expected.shape)}"
            + (story or _shape_hint(tuple(got.shape), tuple(expected.shape)))
        )
    if got.is_complex() and not expected.is_complex():
        raise ExerciseFailure(f"{what} has the complex dtype {got.dtype}; it should be real ({expected.dtype})")
    return got.detach().to(expected.dtype)


def _axes_story(got: tuple[int, ...], expected: tuple[int, ...], axes: tuple[str, ...]) -> str:
    """What each axis of ``got`` holds, from its size, against the named axes of ``expected``."""
    if len(axes) != len(expected):
        return ""
    wanted = [f"{name} {size}" for name, size in zip(axes, expected)]

    def holds(size: int) -> str:
        names = [name for name, wanted_size in zip(axes, expected) if wanted_size == size]
        if len(names) == 1:
            return f"{names[0]} {size}"
        for start in range(len(expected)):  # a product of neighbouring axes: two axes merged
            product = 1
            for stop in range(start, len(expected)):
                product *= expected[stop]
                if product == size and stop > start:
                    return f"{' x '.join(axes[start : stop + 1])} merged ({size})"
        if len(names) > 1:
            return f"{' or '.join(names)} {size}"
        named = _SIZE_NAMES.get(size)
        if named:
            return f"{named} {size}"
        return (
            "1 (an axis of size 1, which only broadcasts)"
            if size == 1
            else f"{size} (no axis the exercise wants has this size)"
        )

    described = [holds(size) for size in got]
    missing = [name for name, size in zip(axes, expected) if not any(name in item for item in described)]
    story = f": its axes hold ({', '.join(described)}) where the exercise wants ({', '.join(wanted)})"
    if len(got) == len(expected):
        wrong = [index for index, (g, e) in enumerate(zip(got, expected)) if g != e]
        if sorted(got) == sorted(expected):
            story += f"; axes {' and '.join(str(index) for index in wrong)} are swapped (transpose or permute them)"
        elif len(wrong) == 1:
            story += f"; axis {wrong[0]} should hold {axes[wrong[0]]} ({expected[wrong[0]]}) but has {got[wrong[0]]}"
    elif any("merged" in item for item in described):
        story += "; two of its axes are merged into one: keep them apart (reshape back, or do not flatten)"
    elif missing:
        story += f"; {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
        story += " (summed or averaged away, or merged into another axis?)" if len(got) < len(expected) else ""
    elif len(got) > len(expected):
        story += "; an axis too many"
    return story


def _shape_hint(got: tuple[int, ...], expected: tuple[int, ...]) -> str:
    """Why two shapes differ, in words a student can act on ('' when nothing specific fits)."""
    if sorted(got) == sorted(expected) and len(got) == len(expected):
        return ": the same sizes in another order, so some axes are swapped (transpose or permute them)"
    if len(got) == len(expected) + 1 and 1 in got:
        return ": an extra axis of size 1 (squeeze it, or use keepdim=False)"
    if len(got) + 1 == len(expected) and 1 in expected:
        return ": an axis of size 1 is missing (unsqueeze it, or keepdim=True)"
    if len(got) + 1 == len(expected):
        missing = [size for size in expected if list(expected).count(size) != list(got).count(size)]
        return f": an axis{f' (size {missing[0]})' if missing else ''} is missing; did you sum or average over an axis that should stay?"
    if len(got) == len(expected):
        wrong = [index for index, (g, e) in enumerate(zip(got, expected)) if g != e]
        if len(wrong) == 1:
            axis = wrong[0]
            return f": axis {axis} has size {_size(got[axis])} instead of {_size(expected[axis])}" + (
                "; sizes that appear elsewhere in the inputs hint at the wrong axis in a sum, mean or product"
                if got[axis] in expected
                else ""
            )
    return ""


def _close(got: torch.Tensor, wanted: torch.Tensor, *, atol: float, rtol: float) -> bool:
    wanted = wanted.to(got.dtype) if wanted.dtype != got.dtype else wanted
    return bool(torch.allclose(got, wanted, atol=atol, rtol=rtol, equal_nan=True))


def _distance(got: torch.Tensor, wanted: torch.Tensor) -> float:
    """Largest difference relative to the size of ``wanted`` (inf where one is nan and the other not)."""
    wanted = wanted.to(got.dtype)
    if (torch.isnan(got) != torch.isnan(wanted)).any():
        return math.inf
    difference = (got - wanted).nan_to_num(0.0, posinf=0.0, neginf=0.0).abs().max().item() if got.numel() else 0.0
    return difference / (wanted.nan_to_num(0.0, posinf=0.0, neginf=0.0).abs().max().item() + 1e-6)


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def _factor_name(factor: float) -> str:
    """'2.83 = sqrt(8)' style names for a constant factor between an answer and the reference."""
    for candidate, name in ((factor, ""), (1.0 / factor if factor else 0.0, "1/")):
        if candidate <= 0:
            continue
        for n in range(2, 1025):
            if abs(candidate - math.sqrt(n)) < 1e-3 * math.sqrt(n) and not float(math.sqrt(n)).is_integer():
                return f"{factor:.4g} = {name}sqrt({n})"
            if abs(candidate - n) < 1e-4 * n:
                return f"{factor:.4g} = {name}{n}"
    return f"{factor:.4g}"


def diagnose(
    got: Any,
    expected: torch.Tensor,
    what: str,
    known_mistakes: dict[str, torch.Tensor | None] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    axes: tuple[str, ...] | None = None,
) -> None:
    """Pass if ``got`` matches ``expected``; otherwise say what is wrong, as specifically as possible.

    In order: a wrong type or shape (explained, see :func:`require_tensor_like`); nan or inf where
    the reference is finite; a known mistake that ``got`` equals (``known_mistakes`` maps a hint to
    what that mistake produces on the same inputs); a known mistake ``got`` is far closer to than to
    the reference (a variant computed a little differently, e.g. -1e9 instead of -inf); generic
    relations (transposed, negated, a constant factor, the right numbers in the wrong places); and
    last, where and how much it differs (the first differing index, expected against got).
    """
    known = {hint: wrong for hint, wrong in (known_mistakes or {}).items() if isinstance(wrong, torch.Tensor)}
    original_dtype = got.dtype if isinstance(got, torch.Tensor) else None
    if (
        isinstance(got, torch.Tensor)
        and got.dim() >= 2
        and expected.dim() >= 2
        and got.shape != expected.shape
        and got.shape == expected.transpose(-2, -1).shape
        and not any(
            isinstance(w, torch.Tensor)
            and w.shape == got.shape
            and _close(got.detach().to(w.dtype), w, atol=atol, rtol=rtol)
            for w in known.values()
        )
        and _close(got.detach().to(expected.dtype), expected.transpose(-2, -1), atol=atol, rtol=rtol)
        and not _close(got.detach().to(expected.dtype), expected.reshape(got.shape), atol=atol, rtol=rtol)
    ):
        raise ExerciseFailure(
            f"{what} holds the right numbers with its last two axes swapped (shape {tuple(got.shape)}, not "
            f"{tuple(expected.shape)}): swap them back (transpose(-2, -1)) or build it with its axes in the order "
            "asked; if a product makes it, write its operands the other way round (as in H = A @ V)"
        )
    got = require_tensor_like(got, expected, what, known_mistakes=known, axes=axes)
    if _close(got, expected, atol=atol, rtol=rtol):
        return
    for hint, wrong in known.items():
        if wrong.shape == got.shape and _close(got, wrong, atol=atol, rtol=rtol):
            raise ExerciseFailure(f"{what} is wrong: {hint}")
    finite = torch.isfinite(expected)
    if (~torch.isfinite(got) & finite).any():
        bad = int((~torch.isfinite(got) & finite).flatten().nonzero()[0])
        kind = "nan" if torch.isnan(got.flatten()[bad]) else "inf"
        raise ExerciseFailure(
            f"{what} contains {kind} (first at index {_index(bad, tuple(got.shape))}) where the reference is finite: "
            "exp() of large scores overflows (subtract each row's maximum before exp, or use torch.softmax), "
            "and a row whose every score is -inf gives 0/0"
        )
    reference_distance = _distance(got, expected)
    distances = {hint: _distance(got, wrong) for hint, wrong in known.items() if wrong.shape == got.shape}
    if distances:
        hint, nearest = min(distances.items(), key=lambda item: item[1])
        if nearest < 0.05 and nearest < 0.1 * reference_distance:
            raise ExerciseFailure(f"{what} is wrong: {hint}")
    raise ExerciseFailure(_generic_difference(got, expected, what, original_dtype=original_dtype, atol=atol, rtol=rtol))


def _generic_difference(got, expected, what, *, original_dtype, atol, rtol) -> str:
    """The last resort: how ``got`` relates to ``expected``, or where and how much it differs."""
    shape = tuple(got.shape)
    if (
        got.dim() >= 2
        and got.shape[-1] == got.shape[-2]
        and _close(got, expected.transpose(-2, -1), atol=atol, rtol=rtol)
    ):
        return f"{what} is the reference transposed (its last two axes swapped): swap the order of your product, or transpose"
    if _close(got, -expected, atol=atol, rtol=rtol):
        return f"{what} has the right size but the opposite sign everywhere: a minus sign too many (or too few)"
    mask = expected.abs() > 1e-3
    if mask.sum() >= 2:
        ratios = got[mask] / expected[mask]
        factor = ratios.median().item()
        if math.isfinite(factor) and abs(factor - 1) > 1e-3 and _close(got, factor * expected, atol=atol, rtol=rtol):
            return (
                f"{what} is the reference times {_factor_name(factor)} everywhere: a scale factor is missing, "
                "applied twice or the wrong one"
            )
    for axis in range(got.dim()):
        if got.shape[axis] > 1 and _close(
            got.sort(dim=axis).values, expected.sort(dim=axis).values, atol=atol, rtol=rtol
        ):
            return (
                f"{what} holds the right numbers in the wrong places along axis {axis} (size {got.shape[axis]}): "
                "an index, a shift or an order is off"
            )
    difference = (got - expected).abs()
    wrong = difference > atol + rtol * expected.abs()
    count = int(wrong.sum())
    first = int(wrong.flatten().nonzero()[0]) if count else int(difference.flatten().argmax())
    worst = int(difference.flatten().argmax())
    dtype_note = (
        f"; your dtype {original_dtype} also differs from {expected.dtype}"
        if original_dtype not in (None, expected.dtype)
        else ""
    )
    return (
        f"{what} {GENERIC}: the shape {shape} is right but {count} of {got.numel()} values differ; the first at "
        f"index {_index(first, shape)}: expected {expected.flatten()[first].item():.4g}, got {got.flatten()[first].item():.4g} "
        f"(largest difference {difference.flatten()[worst].item():.3g} at {_index(worst, shape)}){dtype_note}. "
        "Compare your steps with the equations above the exercise"
    )


# ---------------------------------------------------------------------------------
# Families of plausible wrong answers, computed from the reference on the same inputs

WRONG_AXIS = "softmax over the wrong axis: each row (one query) must sum to 1 over the keys, so use dim=-1"
UNSCALED = "you forgot to divide the scores by sqrt(d_k)"
SCALED_BY_D_K = "divide the scores by sqrt(d_k), not by d_k"
SCALED_BY_SQRT_T = "divide the scores by sqrt(d_k), the size of a query and key, not by sqrt(T), the number of keys"
SCALE_MULTIPLIED = "you multiplied the scores by sqrt(d_k); divide them by it"
SCORES_AS_WEIGHTS = "these are the scores, not the weights: return A = softmax(S) (each row sums to 1)"
WEIGHTS_AS_OUTPUT = "you returned the weights A where the output H = A V belongs"
KEYS_AS_VALUES = "you averaged the keys: the output is A times the VALUES, H = A V"
MASK_IGNORED = "the mask is ignored: set the scores where the mask is False to -inf BEFORE the softmax"
MASK_INVERTED = "the mask is inverted: True means 'may attend', so fill the scores where the mask is False"
MASK_AFTER_SOFTMAX = (
    "the mask was applied after the softmax: the remaining weights no longer sum to 1. "
    "Fill the scores with -inf before the softmax instead"
)
MASK_TRANSPOSED = (
    "the mask is transposed (for a causal mask: the upper triangle instead of the lower): row i is query i "
    "and may look at the keys j where mask[i, j] is True"
)
MASK_NO_DIAGONAL = "the diagonal is excluded from the mask: a token may attend to itself (j = i), so keep the diagonal"


def attention_variants(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None = None
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Plausible wrong versions of ``softmax(Q K^T / sqrt(d_k)) V``: hint -> (H, A) on these inputs.

    Computed in float64 from the inputs (a row left with nothing to attend to is nan, as a plain
    masked softmax makes it), so a checker can name the mistake an answer made: the
    wrong softmax axis, a wrong scale (none, d_k, sqrt(T), multiplied), scores returned as weights,
    the keys averaged, and (with a mask) the mask ignored, inverted, applied after the softmax,
    transposed or without its diagonal. Variants that coincide with the right answer on these
    inputs are left out.
    """
    Q64, K64, V64 = Q.double(), K.double(), V.double()
    d_k, T_k = Q.shape[-1], K.shape[-2]
    raw = Q64 @ K64.transpose(-2, -1)  # (..., T_q, T_k)

    def attend(divisor=math.sqrt(d_k), dim=-1, keep=mask, after=False, values=V64):
        S = raw / divisor
        if keep is not None and not after:
            S = S.masked_fill(~keep, float("-inf"))
        A = torch.softmax(S, dim=dim)  # a row with nothing allowed gives nan, as a plain softmax does
        if keep is not None and after:
            A = A.masked_fill(~keep, 0.0)
        return A @ values, A

    H, A = attend()
    variants = {
        WRONG_AXIS: attend(dim=-2),
        UNSCALED: attend(divisor=1.0),
        SCALED_BY_D_K: attend(divisor=float(d_k)),
        SCALED_BY_SQRT_T: attend(divisor=math.sqrt(T_k)),
        SCALE_MULTIPLIED: attend(divisor=1.0 / math.sqrt(d_k)),
    }
    S = raw / math.sqrt(d_k)
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    variants[SCORES_AS_WEIGHTS] = (H, S)
    if K.shape[-1] == V.shape[-1]:
        variants[KEYS_AS_VALUES] = attend(values=K64)
    if mask is not None:
        full = mask.expand(A.shape)
        variants[MASK_IGNORED] = attend(keep=None)
        variants[MASK_INVERTED] = attend(keep=~full)
        variants[MASK_AFTER_SOFTMAX] = attend(after=True)
        if full.shape[-1] == full.shape[-2]:
            variants[MASK_TRANSPOSED] = attend(keep=full.transpose(-2, -1))
            eye = torch.eye(full.shape[-1], dtype=torch.bool)
            if (full & eye).any():
                variants[MASK_NO_DIAGONAL] = attend(keep=full & ~eye)
    return {
        hint: (h.to(Q.dtype), a.to(Q.dtype))
        for hint, (h, a) in variants.items()
        if not (torch.allclose(a, A, atol=1e-5, equal_nan=True) and torch.allclose(h, H, atol=1e-5))
    }
