"""One safe way to open an image file named by a data file: what a hostile or broken file cannot do to a job.

Only a regular file is read (a FIFO would block forever, a device such as ``/dev/zero`` read until memory runs
out); its size, its pixel count (a decompression bomb: 30000 x 30000 in a few kB) and its aspect ratio (1 x 60000
costs gigabytes once resized to the model's square) are checked from the header, before any pixel is decoded;
the whole image is then decoded, so a truncated file is found here and not in the middle of a run; 16-bit and
float images are scaled to 8 bits instead of being clipped to white. A file that fails is an `ImageRejected`
whose message is the reason, for the caller to skip and count, or to report.
"""

from __future__ import annotations

import ast
import io
import os
import stat
from pathlib import Path

import numpy as np
from PIL import Image

MAX_BYTES = 256 * 2**20
MAX_PIXELS = 64_000_000  # 8000 x 8000; COCO's are 0.3 M, SDXL's 1024 x 1024 1 M
MAX_ASPECT = 20.0


class ImageRejected(ValueError):
    """An image file that is not read, with the reason."""


def check_file(path: Path) -> int:
    """The file's size, if it is a regular file of at most `MAX_BYTES` (symbolic links are followed)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ImageRejected(f"missing image: {path}") from None
    except OSError as e:
        raise ImageRejected(f"unreadable image: {path} ({e.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device" if stat.S_ISCHR(info.st_mode) or \
            stat.S_ISBLK(info.st_mode) else "a folder" if stat.S_ISDIR(info.st_mode) else "not a file"
        raise ImageRejected(f"not a regular file: {path} is {kind}")
    if info.st_size > MAX_BYTES:
        raise ImageRejected(f"image too large: {path} has {info.st_size / 2**20:.0f} MiB (at most "
                            f"{MAX_BYTES // 2**20} MiB)")
    return info.st_size


def _open(source, where: str) -> Image.Image:
    """`PIL.Image.open` (header only) with its failures as `ImageRejected`."""
    try:
        return Image.open(source)
    except Image.DecompressionBombError as e:
        raise ImageRejected(f"image too large: {where} ({e})") from None
    except (OSError, ValueError, SyntaxError) as e:
        raise ImageRejected(f"unreadable image: {where} ({type(e).__name__})") from None


def check_header(image: Image.Image, where: str) -> None:
    """The pixel count (a decompression bomb) and the aspect ratio, read from the header."""
    check_size(*image.size, where)


def check_size(width: int, height: int, where: str) -> None:
    """`check_header` of a picture of ``width`` x ``height`` pixels."""
    if width * height > MAX_PIXELS:
        raise ImageRejected(f"image too large: {where} is {width} x {height} pixels (at most {MAX_PIXELS:,}; a "
                            "decompression bomb?)")
    if min(width, height) == 0 or max(width, height) / min(width, height) > MAX_ASPECT:
        raise ImageRejected(f"extreme aspect ratio: {where} is {width} x {height} pixels (at most "
                            f"{MAX_ASPECT:g}:1)")


def decode(image: Image.Image, where: str) -> Image.Image:
    """``image`` checked from its header, then decoded whole; high-bit depths scaled to 8 bits."""
    check_header(image, where)
    try:
        image.load()
    except Image.DecompressionBombError as e:
        raise ImageRejected(f"image too large: {where} ({e})") from None
    except (OSError, ValueError, SyntaxError) as e:
        raise ImageRejected(f"unreadable image: {where} ({type(e).__name__}: {e})") from None
    return to_8_bit(image)


def to_8_bit(image: Image.Image) -> Image.Image:
    """16-bit and 32-bit integer images shifted, float images scaled, to 8-bit grey; other modes as they are."""
    if image.mode.startswith("I;16") or image.mode == "I":
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if values.max(initial=0) <= 65535 else values.max()
        return Image.fromarray(np.clip(values * (255.0 / top), 0, 255).round().astype(np.uint8), "L")
    if image.mode == "F":
        values = np.nan_to_num(np.asarray(image, dtype=np.float64))
        top = 1.0 if values.max(initial=0) <= 1.0 else 255.0 if values.max() <= 255.0 else values.max()
        return Image.fromarray(np.clip(values * (255.0 / top), 0, 255).round().astype(np.uint8), "L")
    return image


def open_image(path: str | Path) -> Image.Image:
    """The image at ``path`` as opened (its own mode, high bit depths scaled), decoded and checked."""
    path = Path(path)
    check_file(path)
    return decode(_open(path, str(path)), str(path))


def read_image(path: str | Path) -> tuple[Image.Image, bytes]:
    """`open_image` that also returns the file's bytes (plant keeps a JPEG anchor's original bytes)."""
    path = Path(path)
    check_file(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ImageRejected(f"unreadable image: {path} ({e.strerror})") from None
    return image_from_bytes(data, str(path)), data


def image_from_bytes(data: bytes, where: str) -> Image.Image:
    """An image held in memory (a tar member), checked and decoded as `open_image` checks and decodes a file;
    ``where`` names it in the reason."""
    if len(data) > MAX_BYTES:
        raise ImageRejected(f"image too large: {where} has {len(data) / 2**20:.0f} MiB (at most "
                            f"{MAX_BYTES // 2**20} MiB)")
    return decode(_open(io.BytesIO(data), where), where)


def header_problem(path: str | Path) -> str | None:
    """Why `open_image` would refuse ``path``, from its file and header alone (no pixel decoded), or None: cheap
    enough to run over every image of a training set before it starts."""
    try:
        check_file(Path(path))
        with _open(path, str(path)) as image:
            check_header(image, str(path))
    except ImageRejected as e:
        return str(e)
    return None


NPY_MAGIC = b"\x93NUMPY"
NPY_MAX_HEADER = 10_000  # NumPy's own limit on the header a reader accepts


class NpyHeaderError(ValueError):
    """A ``.npy`` file's header that is not one; the message says what, after the file's name and a colon."""


def npy_header(f) -> dict:
    """The header of a ``.npy`` file (format versions 1 to 3: descr, fortran_order, shape) read from the open file
    ``f``, left just after it; parsed here as a Python literal, so no byte of the file reaches NumPy."""
    magic = f.read(8)
    if magic[:6] != NPY_MAGIC or magic[6:7] not in (b"\x01", b"\x02", b"\x03") or magic[7:8] != b"\x00":
        raise NpyHeaderError(f"not a .npy file (its first bytes are {magic!r})")
    width = 2 if magic[6] == 1 else 4
    size_bytes = f.read(width)
    size = int.from_bytes(size_bytes, "little")
    if len(size_bytes) != width or size > NPY_MAX_HEADER:
        raise NpyHeaderError(f"its .npy header is cut or over {NPY_MAX_HEADER} bytes")
    raw = f.read(size)
    try:
        header = ast.literal_eval(raw.decode("utf-8" if magic[6] == 3 else "latin-1"))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, UnicodeDecodeError):
        raise NpyHeaderError(f"its .npy header is not a Python literal ({raw[:80]!r})") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise NpyHeaderError(f"its .npy header {str(header)[:80]} is not a dict of descr, fortran_order and shape")
    return header


def npy_frame(path: str | Path) -> Image.Image:
    """A video frame released as a ``.npy`` array (height x width x 3, uint8, C order, channels in BGR order:
    EqBen's YouCook2 frames), as EqBen's official loader reads it (``Image.fromarray(np.load(path)[:, :, [2, 1, 0]],
    "RGB")``), decoded here from the header and the raw bytes: no byte of the file reaches NumPy; an
    `ImageRejected` naming the file when it holds no such array."""
    check_file(path)
    with open(path, "rb") as f:
        try:
            header = npy_header(f)
        except NpyHeaderError as e:
            raise ImageRejected(f"unreadable frame: {path}: {e}") from None
        shape = header["shape"]
        if (header["descr"] not in ("|u1", "<u1", ">u1") or header["fortran_order"] is not False
                or not isinstance(shape, tuple) or len(shape) != 3 or shape[2] != 3
                or not all(type(n) is int and n > 0 for n in shape[:2])):
            raise ImageRejected(f"unreadable frame: {path} holds {header['descr']} {shape}"
                                f"{' in Fortran order' if header['fortran_order'] is True else ''}, not a height x "
                                "width x 3 uint8 array in C order (BGR)")
        height, width = shape[:2]
        check_size(width, height, str(path))  # before the pixels are read
        data = f.read(height * width * 3 + 1)
    if len(data) != height * width * 3:
        raise ImageRejected(f"unreadable frame: {path} holds {len(data)} bytes of pixels, its header says "
                            f"{height * width * 3} ({height} x {width} x 3): the file is cut or damaged")
    blue, green, red = Image.frombytes("RGB", (width, height), data).split()
    return Image.merge("RGB", (red, green, blue))
