"""Checks shared by the report tests (a module name no other test folder uses)."""

from __future__ import annotations

import struct
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk; AssertionError when `data` is not a PNG."""
    assert data[:8] == PNG_SIGNATURE, f"not a PNG: starts with {data[:8]!r}"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13, f"the first chunk must be IHDR, but is {kind!r}"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def assert_plot(path: Path, min_bytes: int = 10_000) -> None:
    """A real figure: a PNG of at least 300 x 200 pixels and some content (an empty figure is a few KB)."""
    data = path.read_bytes()
    width, height = png_size(data)
    assert width >= 300 and height >= 200, f"{path.name} is {width}x{height}"
    assert len(data) >= min_bytes, f"{path.name} has only {len(data)} bytes"
