"""A user message's `input_image` content: checked (a data: URL of the type its
bytes are, within the bounds), kept and handed to an executor that sees; refused
whole, naming the part, by one that cannot; echoed in the SDK's shape."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from openai.types.realtime import RealtimeConversationItemUserMessage

from engine.images import ImageRefused, checked_image, sniff
from engine.limits import EngineLimits
from models.base import PromptImage
from models.scripted import ScriptedExecutor
from tests.support.harness import Harness

PNG = b"\x89PNG\r\n\x1a\n" + bytes(40)
JPEG = b"\xff\xd8\xff\xe0" + bytes(40)
WEBP = b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(40)
GIF = b"GIF89a" + bytes(40)


def data_url(raw: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


class SeeingExecutor(ScriptedExecutor):
    sees_images = True


def image(url: str | None = None, **fields: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "input_image", **fields}
    if url is not None:
        part["image_url"] = url
    return part


def message(*parts: dict[str, Any], item_id: str = "pic") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "user", "content": list(parts)}


def create(item: dict[str, Any], event_id: str = "e1") -> dict[str, Any]:
    return {"type": "conversation.item.create", "event_id": event_id, "item": item}


QUESTION = {"type": "input_text", "text": "What is this?"}


def only_error(h: Harness) -> tuple[str, str, str, str]:
    """The one error the session sent: its code, param, event_id and message."""
    (error,) = h.errors()
    return error["code"], error["param"], error["event_id"], error["message"]


@pytest.mark.parametrize(
    ("raw", "media_type"),
    [(PNG, "image/png"), (JPEG, "image/jpeg"), (WEBP, "image/webp"), (GIF, "image/gif")],
)
def test_each_media_type_is_taken_when_its_bytes_are_it(raw: bytes, media_type: str) -> None:
    assert sniff(raw) == media_type
    url = data_url(raw, media_type)
    assert checked_image(url, None, None, 1 << 20) == PromptImage(url, "auto")


def test_the_size_bound_counts_decoded_bytes() -> None:
    url = data_url(PNG)  # 48 bytes, 64 characters of base64
    assert checked_image(url, None, "high", len(PNG)).detail == "high"
    with pytest.raises(ImageRefused, match=f"at most {len(PNG) - 1} bytes"):
        checked_image(url, None, None, len(PNG) - 1)
    with pytest.raises(ImageRefused, match="at most 8 bytes"):  # refused before decoding
        checked_image(url, None, None, 8)


async def test_an_image_reaches_the_prompt_beside_the_text_and_is_echoed() -> None:
    url = data_url(PNG)
    async with Harness(SeeingExecutor()) as h:
        await h.send(create(message(QUESTION, image(url, detail="low"))))
        await h.send({"type": "conversation.item.retrieve", "item_id": "pic"})
        await h.send({"type": "response.create"})
        await h.settle()
        (prompt,) = h.scripted.prompts
        (item,) = prompt.items
        assert item.text == "What is this?"
        assert item.images == (PromptImage(url, "low"),)
    assert not h.errors()
    # added/done: the part and its detail, not the data the client sent again
    for kind in ("conversation.item.added", "conversation.item.done"):
        echo = h.of(kind)[0]  # then the answer's
        assert echo["item"]["content"] == [QUESTION, {"type": "input_image", "detail": "low"}]
    (retrieved,) = h.of("conversation.item.retrieved")
    whole = RealtimeConversationItemUserMessage.model_validate(retrieved["item"], strict=True)
    assert [(c.type, c.image_url, c.detail) for c in whole.content] == [
        ("input_text", None, None),
        ("input_image", url, "low"),
    ]


async def test_an_image_alone_and_beside_audio_reaches_the_prompt() -> None:
    audio = base64.b64encode(bytes(4800)).decode()
    jpeg = data_url(JPEG, "image/jpeg")
    async with Harness(SeeingExecutor()) as h:
        await h.send(create(message(image(jpeg), item_id="alone")))
        heard = message(image(data_url(GIF, "image/gif")), {"type": "input_audio", "audio": audio})
        await h.send(create({**heard, "id": "heard"}))
        await h.send({"type": "response.create"})
        await h.settle()
        (prompt,) = h.scripted.prompts
    assert not h.errors()
    alone, spoken = prompt.items
    assert alone.images == (PromptImage(jpeg, "auto"),) and alone.text is None
    assert spoken.images[0].data_url.startswith("data:image/gif;base64,")
    assert spoken.audio is not None and len(spoken.audio) == 2400


@pytest.mark.parametrize(
    ("part", "field", "says"),
    [
        (image("https://example.com/cat.png"), "image_url", "must be a data: URL"),
        (image("http://10.0.0.1/x.png"), "image_url", "does not fetch"),
        (image(file_id="file-abc"), "file_id", "no files API"),
        (image(data_url(PNG), file_id="file-abc"), "file_id", "no files API"),
        (image(), "image_url", "needs an image_url"),
        (image(data_url(PNG, "image/svg+xml")), "image_url", "not 'image/svg+xml'"),
        (image("data:image/png;base64,not base64!"), "image_url", "not valid base64"),
        (image(data_url(JPEG)), "image_url", "is image/jpeg, not the image/png"),
        (image(data_url(b"<svg/>")), "image_url", "is none of image/png"),
        (image(data_url(PNG + bytes(100))), "image_url", "at most 64 bytes"),
    ],
)
async def test_a_bad_image_refuses_its_item_naming_the_part(
    part: dict[str, Any], field: str, says: str
) -> None:
    limits = EngineLimits(max_image_bytes=64)
    async with Harness(SeeingExecutor(), limits=limits) as h:
        await h.send(create(message(QUESTION, part)))
        await h.send(create(message(QUESTION, item_id="after")))
        await h.settle()
        assert [i.id for i in h.session.conversation.items] == ["after"]  # it lives on
    code, param, event_id, says = only_error(h)
    assert (code, param, event_id) == ("invalid_value", f"item.content[1].{field}", "e1")
    assert says in says


async def test_an_item_shows_at_most_its_bound_of_images() -> None:
    limits = EngineLimits(max_images_per_item=2)
    url = data_url(PNG)
    async with Harness(SeeingExecutor(), limits=limits) as h:
        await h.send(create(message(QUESTION, image(url), image(url), image(url))))
        await h.send(create(message(image(url), image(url), item_id="two"), "e2"))
        await h.settle()
        assert [i.id for i in h.session.conversation.items] == ["two"]
    code, param, event_id, says = only_error(h)
    assert (code, param, event_id) == ("invalid_value", "item.content[3]", "e1")
    assert "at most 2 images" in says


async def test_the_conversation_holds_at_most_its_bound_of_images() -> None:
    limits = EngineLimits(max_history_images=3)
    url = data_url(PNG)
    async with Harness(SeeingExecutor(), limits=limits) as h:
        await h.send(create(message(image(url), image(url), item_id="a")))
        await h.send(create(message(QUESTION, image(url), image(url), item_id="b"), "e2"))
        await h.send(create(message(QUESTION, item_id="words"), "e3"))  # text still fits
        await h.settle()
        assert [i.id for i in h.session.conversation.items] == ["a", "words"]
        code, param, event_id, says = only_error(h)
        assert (code, param, event_id) == ("invalid_value", "item.content", "e2")
        assert "At most 3 images" in says and "2 are" in says
        # Deleting an item with images makes room.
        await h.send({"type": "conversation.item.delete", "item_id": "a"})
        await h.send(create(message(QUESTION, image(url), image(url), item_id="b"), "e4"))
        await h.settle()
        assert [i.id for i in h.session.conversation.items] == ["words", "b"]
    assert len(h.errors()) == 1


async def test_response_input_images_reach_the_prompt_within_the_bounds() -> None:
    limits = EngineLimits(max_history_images=2)
    url = data_url(PNG)

    def answer(*items: dict[str, Any], event_id: str) -> dict[str, Any]:
        response = {"conversation": "none", "output_modalities": ["text"], "input": list(items)}
        return {"type": "response.create", "event_id": event_id, "response": response}

    async with Harness(SeeingExecutor(), limits=limits) as h:
        await h.send(answer(message(QUESTION, image(url)), event_id="r1"))
        await h.settle()
        three = (message(image(url), image(url), item_id="x"), message(image(url), item_id="y"))
        await h.send(answer(*three, event_id="r2"))
        await h.send(answer(message(image("https://example.com/a.png")), event_id="r3"))
        await h.settle()
        (prompt,) = h.scripted.prompts
        assert prompt.items[0].images == (PromptImage(url, "auto"),)
        assert h.session.conversation.items == []  # out of band: nothing kept
    too_many, fetch = h.errors()
    assert (too_many["param"], too_many["event_id"]) == ("response.input", "r2")
    assert (fetch["param"], fetch["event_id"]) == ("response.input[0].content[0].image_url", "r3")


async def test_an_executor_that_cannot_see_refuses_any_image_naming_the_item() -> None:
    async with Harness(ScriptedExecutor()) as h:
        assert not h.executor.sees_images
        await h.send(create(message(QUESTION, image(data_url(PNG)), item_id="photo")))
        await h.send(create(message(QUESTION, item_id="after"), "e2"))
        await h.settle()
        assert [i.id for i in h.session.conversation.items] == ["after"]
    code, param, event_id, says = only_error(h)
    assert (code, param, event_id) == ("unsupported_content", "item.content[1]", "e1")
    assert "'photo'" in says and "cannot see images" in says
