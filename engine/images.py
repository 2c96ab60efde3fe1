"""The images a user message may show (`input_image`), checked before anything of
its item is kept: only for an executor that sees, only inline as a `data:` URL of a
PNG, JPEG, WEBP or GIF whose bytes are what the URL says, within size and count
bounds (`EngineLimits`).

Never a URL to fetch, nor a `file_id` (there is no files API): a client holding an
ephemeral key is not trusted, and fetching where it points would make the server
call into the operator's network.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from engine.conversation import Item
from engine.limits import EngineLimits
from models.base import ImageDetail, PromptImage

MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
_DATA_URL = re.compile(r"data:([^;,]*);base64,(.*)", re.DOTALL)


class ImageRefused(ValueError):
    """Why an image is refused, and the field of its content part that is wrong."""

    def __init__(self, message: str, field: str = "image_url") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class ImageRules:
    """What a session accepts of images. The default sees none."""

    sees: bool = False  # the executor reads images (`Executor.sees_images`)
    max_bytes: int = EngineLimits.max_image_bytes
    max_per_item: int = EngineLimits.max_images_per_item
    max_held: int = EngineLimits.max_history_images

    @classmethod
    def of(cls, sees: bool, limits: EngineLimits) -> ImageRules:
        return cls(
            sees, limits.max_image_bytes, limits.max_images_per_item, limits.max_history_images
        )


NO_IMAGES = ImageRules()  # an executor that cannot see


def over_held(rules: ImageRules, held: int, adding: int) -> str | None:
    """Why `adding` images cannot join the `held` ones (None: they can)."""
    if adding and held + adding > rules.max_held:
        return f"At most {rules.max_held} images are held; {held} are and this adds {adding}."
    return None


def sniff(raw: bytes) -> str | None:
    """The media type the bytes' magic number says, among MEDIA_TYPES."""
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    if raw[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return None


def checked_image(
    image_url: str | None, file_id: str | None, detail: ImageDetail | None, max_bytes: int
) -> PromptImage:
    """The image a content part shows, or ImageRefused naming what is wrong."""
    if file_id is not None:
        raise ImageRefused(
            "Images by file_id are not supported (there is no files API): send the image "
            "inline as a data: URL in image_url.",
            "file_id",
        )
    if image_url is None:
        raise ImageRefused("An input_image needs an image_url.")
    match = _DATA_URL.fullmatch(image_url)
    if match is None:
        raise ImageRefused(
            "image_url must be a data: URL (data:image/png;base64,...); the server does "
            "not fetch images from URLs."
        )
    media_type, payload = match.groups()
    if media_type not in MEDIA_TYPES:
        raise ImageRefused(
            f"The image's media type must be one of {', '.join(MEDIA_TYPES)}, not '{media_type}'."
        )
    too_large = f"An image may hold at most {max_bytes} bytes."
    if len(payload) > 4 * math.ceil(max_bytes / 3):  # before decoding it
        raise ImageRefused(too_large)
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRefused("The image's data is not valid base64.") from None
    if len(raw) > max_bytes:
        raise ImageRefused(too_large)
    found = sniff(raw)
    if found != media_type:
        said = f"is {found}" if found is not None else "is none of " + ", ".join(MEDIA_TYPES)
        raise ImageRefused(f"The image's data {said}, not the {media_type} its URL says.")
    return PromptImage(image_url, detail or "auto")


def images_held(items: Iterable[Item]) -> int:
    """How many images `items` show between them."""
    return sum(len(item.images) for item in items)
