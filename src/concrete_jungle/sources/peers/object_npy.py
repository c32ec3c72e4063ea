"""A ``.npy`` file of Python objects (what ``numpy.save`` writes for a list of dicts), read as plain Python values
without NumPy.

NumPy stores such an array as a pickle of the array: its dtype, built from a state the pickle gives, then the list
of its items. NumPy takes a dtype's state as given (a ``V8`` dtype with an object field and its flags cleared makes
8 bytes of the file an object pointer), so no byte of the file may reach NumPy's constructors. The header is
parsed here, and the pickle is read by an unpickler whose only classes are the stand-ins below: they accept the
exact states ``numpy.save`` writes for an object array (and NumPy's integer, float and bool scalars among its
items, decoded here from their bytes) and refuse every other one. What comes out is lists, dicts, strings and
numbers; anything else is a `SourceError` naming the file.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
from pathlib import Path

from ...images import NpyHeaderError, npy_header
from ..base import SourceError

MAX_DIMS = 32  # NumPy's limit on an array's dimensions
MAX_DEPTH = 100  # nesting of lists and dicts inside one item
OBJECT = "O8"
OBJECT_FLAGS = 63  # the flags NumPy gives the object dtype (it holds references): any other value is refused
# NumPy's scalar types among the items (an ``image_id`` read as numpy.int64): name -> struct code
SCALARS = {f"{kind}{size}": code for kind, codes in (("i", "bhiq"), ("u", "BHIQ")) for size, code in
           zip((1, 2, 4, 8), codes)} | {"f2": "e", "f4": "f", "f8": "d", "b1": "?"}
BYTE_ORDERS = {"<": "<", ">": ">", "|": "<", "=": "="}
_SAVED_AS = ((0,), b"b")  # the arguments numpy's pickle gives _reconstruct


class Refused(ValueError):
    """A part of the pickle that is not what ``numpy.save`` writes for an array of Python objects."""


class _ArrayType:
    """Stands for ``numpy.ndarray`` in the pickle: only ever passed to `_reconstruct`."""


class _Dtype:
    """Stands for ``numpy.dtype``: the object dtype or one of `SCALARS`, with the one state NumPy writes for it."""

    name: str | None = None
    order: str | None = None

    def __init__(self, name, align=False, copy=True):
        if name != OBJECT and name not in SCALARS:
            raise Refused(f"dtype {name!r} (only Python objects and NumPy's number scalars are read)")
        if align is not False or copy is not True:
            raise Refused(f"dtype {name!r} with align={align!r}, copy={copy!r}")
        self.name = name

    def __setstate__(self, state):
        flags = OBJECT_FLAGS if self.name == OBJECT else 0
        if self.name is None or self.order is not None or not isinstance(state, tuple) or len(state) != 8:
            raise Refused(f"a dtype state {_short(state)}")
        version, order, *rest = state
        if version != 3 or order not in BYTE_ORDERS or rest != [None, None, None, -1, -1, flags]:
            raise Refused(f"dtype {self.name!r} with the state {_short(state)} (fields, subarrays, sizes or flags "
                          "of its own)")
        self.order = order


class _Array:
    """Stands for a NumPy array of Python objects: its shape and its items in C order."""

    def __init__(self):
        self.shape: tuple | None = None
        self.items: list | None = None

    def __setstate__(self, state):
        if self.items is not None or not isinstance(state, tuple) or len(state) != 5:
            raise Refused(f"an array state {_short(state)}")
        version, shape, dtype, fortran, items = state
        if version != 1 or not isinstance(dtype, _Dtype) or dtype.order is None:
            raise Refused(f"an array state {_short(state)}")
        if dtype.name != OBJECT:
            raise Refused(f"an array of dtype {dtype.name!r} (only arrays of Python objects are read)")
        check_shape(shape)
        if not isinstance(items, list) or len(items) != math.prod(shape):
            raise Refused(f"an array of shape {shape} whose pickle holds "
                          f"{len(items) if isinstance(items, list) else _short(items)} items")
        if fortran is not False and sum(n > 1 for n in shape) > 1:
            raise Refused("a Fortran-ordered array")
        self.shape, self.items = shape, items


def _reconstruct(array_type, shape, typecode):
    if array_type is not _ArrayType or (shape, typecode) != _SAVED_AS:
        raise Refused("an array made otherwise than numpy.save makes one")
    return _Array()


def _scalar(dtype, data):
    """A NumPy scalar among the items, as Python's own number."""
    if not isinstance(dtype, _Dtype) or dtype.name not in SCALARS or dtype.order is None:
        raise Refused(f"a scalar of {_short(dtype)}")
    code = SCALARS[dtype.name]
    if not isinstance(data, bytes) or len(data) != struct.calcsize(code):
        raise Refused(f"a {dtype.name} scalar of {_short(data)}")
    return struct.unpack(BYTE_ORDERS[dtype.order] + code, data)[0]


STAND_INS = {("numpy", "ndarray"): _ArrayType, ("numpy", "dtype"): _Dtype}
for _module in ("numpy.core.multiarray", "numpy._core.multiarray"):  # NumPy 2 moved numpy.core to numpy._core
    STAND_INS |= {(_module, "_reconstruct"): _reconstruct, (_module, "scalar"): _scalar}


class _StandIns(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in STAND_INS:
            raise Refused(f"{module}.{name}, which is not a NumPy array's part")
        return STAND_INS[module, name]


def check_shape(shape) -> None:
    if (not isinstance(shape, tuple) or len(shape) > MAX_DIMS
            or not all(type(n) is int and n >= 0 for n in shape)):
        raise Refused(f"the shape {_short(shape)} (a tuple of at most {MAX_DIMS} sizes >= 0)")


def read_header(f, path: Path) -> tuple:
    """The array's shape from the header of a ``.npy`` of Python objects (`images.npy_header`)."""
    try:
        header = npy_header(f)
    except NpyHeaderError as e:
        raise SourceError(f"{path}: {e}; CE-CLIP's records are processed_dataset*.npy files or JSON") from None
    if header["descr"] != "|O":
        raise SourceError(f"{path} holds a {header['descr']!r} array, not CE-CLIP's records (Python objects)")
    if type(header["fortran_order"]) is not bool:
        raise SourceError(f"{path}: its .npy header's fortran_order {header['fortran_order']!r} is not a bool")
    try:
        check_shape(header["shape"])
    except Refused as e:
        raise SourceError(f"{path}: its .npy header gives {e}") from None
    return header["shape"]


def load_object_array(path: Path) -> list:
    """The items of a ``.npy`` file of Python objects in C order, as plain Python values, read without NumPy and
    without running code from the file."""
    with open(path, "rb") as f:
        shape = read_header(f, path)
        stream = f.read()
    try:
        array = _StandIns(io.BytesIO(stream)).load()
    except Refused as e:
        raise SourceError(f"{path} is refused: its pickle holds {e}; only NumPy arrays of plain Python values "
                          "(CE-CLIP's processed_dataset*.npy) are read") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError, IndexError,
            struct.error, MemoryError, RecursionError) as e:
        raise SourceError(f"{path} is not read: its pickle is damaged or not an array's "
                          f"({type(e).__name__}: {_short(e)}); only NumPy arrays of plain Python values (CE-CLIP's "
                          "processed_dataset*.npy) are read") from None
    if not isinstance(array, _Array) or array.items is None:
        raise SourceError(f"{path} does not hold a NumPy array (its pickle gives a {type(array).__name__})")
    if array.shape != shape:
        raise SourceError(f"{path}: its header gives the shape {shape}, its pickle {array.shape}; the file is "
                          "damaged")
    budget = [len(stream) + 1]  # values visited: a pickle that shares one list many times cannot make this long
    try:
        return [plain(item, budget, MAX_DEPTH) for item in array.items]
    except Refused as e:
        raise SourceError(f"{path} is refused: an item holds {e}; CE-CLIP's records are dicts of strings, "
                          "numbers and lists") from None


def plain(value, budget: list[int], depth: int):
    """``value`` with its tuples made lists, checked to hold only dicts, lists, strings, numbers, bools and None,
    no cycle and nothing deeper than `MAX_DEPTH`."""
    budget[0] -= 1
    if budget[0] < 0:
        raise Refused("more values than its bytes can hold (one list shared many times)")
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, _Array):
        raise Refused("a NumPy array (an array inside an item is not read)")
    if not isinstance(value, (dict, list, tuple)):
        raise Refused(f"a {type(value).__name__.lstrip('_')} ({_short(value)})")
    if depth == 0:
        raise Refused(f"lists or dicts nested over {MAX_DEPTH} deep")
    if isinstance(value, dict):
        keys = [k for k in value if not (k is None or isinstance(k, (str, int, float)))]
        if keys:
            raise Refused(f"a dict key {_short(keys[0])}")
        return {k: plain(v, budget, depth - 1) for k, v in value.items()}
    return [plain(v, budget, depth - 1) for v in value]


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
