"""``wan_core.i2v.load_image``: every image the CLI and the nodes read goes through it (issue 44): 16-bit and
float greyscale at their own range (not clipped to white), a decompression bomb refused in one line from its
header (no pixels decoded), a path with a NUL byte refused."""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import torch

from wan_core.i2v import load_image


def bomb_png(path, width=20000, height=20000):
    """A PNG whose header declares ``width x height`` pixels (400 Mpx) with almost no data behind it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))
    return path


@pytest.mark.parametrize("value", [0, 1000, 32768, 65535])
def test_16_bit_greyscale_png_keeps_its_range(tmp_path, value):
    from PIL import Image

    grey = np.full((6, 5), value, np.uint16)
    grey[0, 0] = 12345
    Image.fromarray(grey).save(tmp_path / "g16.png")
    img = load_image(tmp_path / "g16.png")
    assert img.shape == (1, 6, 5, 3) and img.dtype == torch.float32
    want = torch.from_numpy(grey.astype(np.float64) / 65535.0)
    for c in range(3):
        torch.testing.assert_close(img[0, :, :, c].double(), want, rtol=0, atol=1e-6)


def test_float_greyscale_tiff_is_read_as_is(tmp_path):
    from PIL import Image

    grey = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    Image.fromarray(grey, mode="F").save(tmp_path / "f.tiff")
    img = load_image(tmp_path / "f.tiff")
    torch.testing.assert_close(img[0, :, :, 1], torch.from_numpy(grey), rtol=0, atol=1e-6)


def test_8_bit_rgb_unchanged(tmp_path):
    from PIL import Image

    pixels = (np.arange(4 * 3 * 3) * 7 % 256).astype(np.uint8).reshape(4, 3, 3)
    Image.fromarray(pixels).save(tmp_path / "rgb.png")
    torch.testing.assert_close(load_image(tmp_path / "rgb.png")[0], torch.from_numpy(pixels).float() / 255)


def test_decompression_bomb_is_a_one_line_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"bomb\.png: image too large \(more than \d+ pixels"):
        load_image(bomb_png(tmp_path / "bomb.png"))


def test_image_just_over_the_limit_is_refused_too(tmp_path, monkeypatch):
    """Between the limit and twice it Pillow only warns and decodes everything: refused as well."""
    from PIL import Image

    Image.fromarray(np.zeros((10, 10, 3), np.uint8)).save(tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 60)
    with pytest.raises(ValueError, match="big.png: image too large"):
        load_image(tmp_path / "big.png")


def test_nul_in_path_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no such image file"):
        load_image(str(tmp_path / "a.png") + "\0.png")
