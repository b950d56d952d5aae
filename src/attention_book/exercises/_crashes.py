"""A shape error in the student's code, mapped back to the line that raised it: which transpose, axis or
unsqueeze to write (issue 45), for the exercises of every chapter.

:func:`shape_fix` reads the student's line (the deepest frame outside the package and torch), finds the
product or the element-wise operation on it that fails, evaluates its two operands in that frame (only
operands made of names, indexing and the shape methods below, which have no side effects), and tries the
usual repairs on their shapes: the last two axes swapped on one operand (``K.transpose(-2, -1)``, where
``K.T`` reversed every axis of a batched tensor), a transpose moved to the other operand, or each operand
given its own axis to pair every row of one with every row of the other (``q[:, None, :] + k[None, :, :]``).
It returns one sentence naming the operand and the repair, or ``None`` when nothing fits.
"""

from __future__ import annotations

import ast
import re
from types import FrameType

import torch

# Methods an operand may call to be evaluated again: they only look at or reshape a tensor.
_SAFE_METHODS = {
    *("T", "mT", "t", "transpose", "permute", "unsqueeze", "squeeze", "reshape", "view", "contiguous", "expand"),
    *("amax", "amin", "max", "min", "sum", "mean", "argmax", "argmin", "norm", "std", "var", "cumsum", "flip"),
    *("abs", "exp", "log", "sqrt", "tanh", "relu", "softmax", "float", "double", "clone", "detach", "expand_as"),
}
_SAFE_FUNCTIONS = {"transpose", "permute", "unsqueeze", "squeeze", "softmax", "tanh", "exp", "sqrt", "matmul", "sum"}
_BROADCAST = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")
_SHAPE_ERROR = (
    "must match the size of tensor",
    "cannot be multiplied",
    "dimensions of batch2 tensor",
    "size mismatch",
    "inconsistent tensor size",
    "t() expects a tensor with <= 2 dimensions",
    "doesn't match the broadcast shape",
)


def _student_frame(error: BaseException, is_library) -> FrameType | None:
    """The deepest frame of the traceback in the student's code (``is_library(filename)`` is false)."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        if not is_library(tb.tb_frame.f_code.co_filename):
            found = tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next
    return found


def _safe(node: ast.AST) -> bool:
    """Whether an operand is names, constants, indexing, attributes and the shape methods only."""
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            function = child.func
            if isinstance(function, ast.Attribute) and function.attr in _SAFE_METHODS:
                continue
            if (
                isinstance(function, ast.Attribute)
                and isinstance(function.value, ast.Name)
                and function.value.id == "torch"
                and function.attr in _SAFE_FUNCTIONS
            ):
                continue
            return False
        if isinstance(child, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
    return True


def _operations(line: str) -> list[tuple[str, ast.expr, ast.expr]]:
    """The binary products and element-wise operations on a line: (kind, left, right)."""
    text = line.strip()
    for prefix in ("return ", "yield "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    if text.startswith("if ") or text.startswith("elif ") or text.startswith("while "):
        text = text.split(" ", 1)[1].rstrip(":")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            kind = "@" if isinstance(node.op, ast.MatMult) else "elementwise"
            found.append((kind, node.left, node.right))
        elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
            found.append(("elementwise", node.left, node.comparators[0]))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"matmul", "bmm", "mm"}
            and len(node.args) == 2
        ):
            found.append(("@", node.args[0], node.args[1]))
    return found


def _value(node: ast.expr, frame: FrameType):
    if not _safe(node):
        return None
    try:
        value = eval(compile(ast.Expression(node), "<operand>", "eval"), frame.f_globals, dict(frame.f_locals))
    except Exception:
        return None
    return value if isinstance(value, torch.Tensor) else None


def _works(kind: str, left: torch.Tensor, right: torch.Tensor) -> bool:
    """Whether the product (``"@"``) or an element-wise operation of the two runs (torch.broadcast_shapes is not
    used: its first call imports sympy, a second)."""
    if kind != "@":
        return all(a == b or 1 in (a, b) for a, b in zip(reversed(left.shape), reversed(right.shape)))
    try:
        torch.matmul(left, right)
    except Exception:
        return False
    return True


def _shape(tensor: torch.Tensor, names) -> str:
    sizes = [names(size) for size in tensor.shape]
    return "(" + ", ".join(sizes) + ")"


def _without_transpose(node: ast.expr) -> ast.expr | None:
    """The operand with its own transpose taken off (``K.T`` -> ``K``), or None if it has none."""
    if isinstance(node, ast.Attribute) and node.attr in {"T", "mT"}:
        return node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"transpose", "t", "permute"}
    ):
        return node.func.value
    return None


def _batched_transpose(kind: str, node: ast.expr, frame: FrameType, *, other, on_right: bool, names) -> str | None:
    """``X.T`` or ``X.transpose(0, 1)`` on a tensor with more than two axes, where the last two were meant."""
    inner = _without_transpose(node)
    if inner is None or other is None:
        return None
    base, written_value = _value(inner, frame), _value(node, frame)
    if base is None or written_value is None or base.dim() < 3:
        return None
    repaired = base.transpose(-2, -1)
    if written_value.shape == repaired.shape:
        return None
    if not (_works(kind, other, repaired) if on_right else _works(kind, repaired, other)):
        return None
    name = ast.unparse(inner)
    return (
        f"`{ast.unparse(node)}` turns {name} {_shape(base, names)} into {_shape(written_value, names)}: on a tensor with a "
        f"batch axis it moves more than the last two axes. Write {name}.transpose(-2, -1) (or {name}.mT) to swap only "
        "the last two and leave the batch axes alone"
    )


def _matmul_fix(left_node, right_node, frame, names) -> str | None:
    left, right = _value(left_node, frame), _value(right_node, frame)
    if left is None or right is None or left.dim() == 0 or right.dim() == 0 or _works("@", left, right):
        return None  # not this product: it works
    for node, other, on_right in ((right_node, left, True), (left_node, right, False)):
        story = _batched_transpose("@", node, frame, other=other, on_right=on_right, names=names)
        if story:
            return story
    L, R = ast.unparse(left_node), ast.unparse(right_node)
    where = f"`{L} @ {R}` multiplies {L} {_shape(left, names)} by {R} {_shape(right, names)}"
    inner_right = right.shape[-2] if right.dim() > 1 else right.shape[0]
    inner = f"the inner sizes {names(left.shape[-1])} and {names(inner_right)} differ"
    bare_left, bare_right = _without_transpose(left_node), _without_transpose(right_node)
    plain_left = _value(bare_left, frame) if bare_left is not None else None
    plain_right = _value(bare_right, frame) if bare_right is not None else None
    mT = lambda tensor: tensor.transpose(-2, -1) if tensor is not None and tensor.dim() >= 2 else None
    candidates = [
        (
            left,
            plain_right,
            bare_right is not None,
            f"drop the transpose on {_text(bare_right)}: {L} @ {_text(bare_right)}",
        ),
        (
            plain_left,
            mT(right),
            bare_left is not None,
            f"the transpose belongs on {R}, not on {_text(bare_left)}: {_text(bare_left)} @ {R}.transpose(-2, -1)",
        ),
        (
            left,
            mT(right),
            bare_right is None,
            f"transpose {R}: {L} @ {R}.transpose(-2, -1)" + (f" (or {L} @ {R}.T)" if right.dim() == 2 else ""),
        ),
        (
            plain_left,
            right,
            bare_left is not None,
            f"drop the transpose on {_text(bare_left)}: {_text(bare_left)} @ {R}",
        ),
        (
            mT(left),
            right,
            bare_left is None,
            f"{L} holds its last two axes the other way round (its last axis should hold {names(inner_right)}): "
            "transpose it, or build it with its axes in the order the product needs",
        ),
        (right, left, True, f"swap the operands: {R} @ {L}"),
    ]
    for first, second, applies, fix in candidates:
        if applies and first is not None and second is not None and _works("@", first, second):
            return f"{where}: {inner}; {fix}"
    return None


def _text(node: ast.expr | None) -> str:
    return ast.unparse(node) if node is not None else ""


def _pairing_fix(left_node, right_node, frame, names) -> str | None:
    """Two tensors of the same rank that differ on one leading axis: each needs its own axis to pair them."""
    left, right = _value(left_node, frame), _value(right_node, frame)
    if left is None or right is None or _works("elementwise", left, right):
        return None  # not this operation: it works
    L, R = ast.unparse(left_node), ast.unparse(right_node)
    for node, other, on_right in ((right_node, left, True), (left_node, right, False)):
        story = _batched_transpose("elementwise", node, frame, other=other, on_right=on_right, names=names)
        if story:
            return story
    for node, tensor, other, other_text in ((left_node, left, right, R), (right_node, right, left, L)):
        if "argmax(" in ast.unparse(node) and tensor.dim() == 1 and other.dim() == 1 and len(tensor) != len(other):
            return (
                f"`{ast.unparse(node)}` has {names(len(tensor))} entries where `{other_text}` has {names(len(other))}: the "
                "argmax runs over the wrong axis; take it over the classes, the last axis (argmax(dim=-1)), so that "
                "every example gets one prediction"
            )
    for reduced, full, text in ((right, left, R), (left, right, L)):
        if reduced.dim() == full.dim() - 1 and full.dim() >= 2 and tuple(reduced.shape) == tuple(full.shape[:-1]):
            return (
                f"`{text}` {_shape(reduced, names)} has no last axis to line up with {_shape(full, names)}: add it, "
                f"{text}[..., None] (or .unsqueeze(-1)); if it comes from a reduction (sum, amax, ...), reduce with "
                "keepdim=True"
            )
    if left.dim() == right.dim() and left.dim() >= 2:
        differing = [
            axis
            for axis in range(left.dim())
            if left.shape[axis] != right.shape[axis] and 1 not in (left.shape[axis], right.shape[axis])
        ]
        if len(differing) == 1 and 1 in (*left.shape, *right.shape):  # an axis added, in the wrong place
            axis = differing[0]
            return (
                f"`{L}` {_shape(left, names)} and `{R}` {_shape(right, names)} hold different things on axis {axis} "
                f"({names(left.shape[axis])} against {names(right.shape[axis])}): line the axes up so that each holds "
                "the same thing in both, adding a size-1 axis only where the other tensor has an axis this one lacks"
            )
        if len(differing) == 1 and differing[0] < left.dim() - 1:
            axis = differing[0]
            before = ", ".join([":"] * axis)
            lead = f"{before}, " if before else ""
            left_index = f"[{lead}:, None]" if axis == left.dim() - 2 else f"[{lead}:, None, ...]"
            right_index = f"[{lead}None, :]" if axis == left.dim() - 2 else f"[{lead}None, :, ...]"
            if left.dim() - axis == 2:
                left_index, right_index = f"[{lead}:, None, :]", f"[{lead}None, :, :]"
            return (
                f"`{L}` {_shape(left, names)} and `{R}` {_shape(right, names)} hold different things on axis {axis}: if "
                f"every one of the {names(left.shape[axis])} should meet every one of the {names(right.shape[axis])}, give "
                f"each its own axis: {L}{left_index} and {R}{right_index}; if they are one and the same axis, one of them "
                "has the wrong length"
            )
    match_last = left.dim() >= 2 and right.dim() >= 2 and sorted(left.shape[-2:]) == sorted(right.shape[-2:])
    if match_last and _works("elementwise", left, right.transpose(-2, -1)):
        return (
            f"`{L}` {_shape(left, names)} and `{R}` {_shape(right, names)} hold the same axes in the other order: "
            f"transpose one of them ({R}.transpose(-2, -1))"
        )
    return None


def shape_fix(error: BaseException, is_library, names) -> str | None:
    """Which transpose, axis or operand order the student's failing line needs, or None.

    ``is_library(filename)`` tells the package's, torch's and the standard library's files apart from the
    student's; ``names(size)`` names a size (``"5 (= T_k)"``).
    """
    text = str(error).lower()
    if not isinstance(error, (RuntimeError, ValueError, IndexError)) or not any(key in text for key in _SHAPE_ERROR):
        return None
    found = _student_frame(error, is_library)
    if found is None:
        return None
    frame, lineno = found
    try:
        import linecache

        line = linecache.getline(frame.f_code.co_filename, lineno, frame.f_globals)
    except Exception:
        return None
    if not line.strip():
        return None
    for kind, left, right in _operations(line):
        try:
            fix = (_matmul_fix if kind == "@" else _pairing_fix)(left, right, frame, names=names)
        except Exception:
            fix = None
        if fix:
            return fix
    axis = re.search(r"\.argmax\((?:dim\s*=\s*)?(\d+)\)", line)
    match = _BROADCAST.search(text)
    if axis and match:
        return (
            f"`argmax({axis.group(1)})` takes the argmax over axis {axis.group(1)}, so the predictions hold "
            f"{names(int(match.group(1)))} entries against {names(int(match.group(2)))}: take it over the classes, the last "
            "axis (argmax(dim=-1)), so that every example gets one prediction"
        )
    if "t() expects a tensor with <= 2 dimensions" in text:
        return "t() only transposes a matrix; on a tensor with a batch axis write .transpose(-2, -1) to swap the last two axes"
    return None
