"""Images: ImageDecoder.

Decoding goes through Pillow, an optional extra (``pip install onnxflow[image]``), imported only
when an ImageDecoder node runs.
"""

from __future__ import annotations

import io

import numpy as np

from onnxflow.ops.registry import op

_PIXEL_FORMATS = ("RGB", "BGR", "Grayscale")


@op("ImageDecoder", 20)
def image_decoder(encoded: np.ndarray, *, pixel_format: str = "RGB") -> np.ndarray:
    """Decode an encoded image (BMP, JPEG, JPEG2000, TIFF, PNG, WebP, PNM) to uint8 [H, W, C].

    ``pixel_format`` selects RGB or BGR (3 channels) or Grayscale (1 channel). A stream that
    cannot be decoded gives an empty [0, 0, C] tensor, as the spec asks.
    """
    if pixel_format not in _PIXEL_FORMATS:
        raise ValueError(
            f"ImageDecoder pixel_format must be one of {list(_PIXEL_FORMATS)}, "
            f"found {pixel_format!r}"
        )
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as exc:
        raise ImportError(
            "ImageDecoder needs Pillow, an optional extra: pip install onnxflow[image]"
        ) from exc
    channels = 1 if pixel_format == "Grayscale" else 3
    try:
        with Image.open(io.BytesIO(np.asarray(encoded, dtype=np.uint8).tobytes())) as image:
            pixels = np.asarray(image.convert("L" if channels == 1 else "RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError):
        return np.zeros((0, 0, channels), dtype=np.uint8)
    if channels == 1:
        return pixels[:, :, None]
    return np.ascontiguousarray(pixels[:, :, ::-1]) if pixel_format == "BGR" else pixels
