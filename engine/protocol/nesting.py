"""A bound on how deep the free-form JSON a client sends may nest.

Tool `parameters` schemas and the like are kept as the client
sent them and later written back (session.updated, client secrets) and handed to
the model. Serializing stops at some depth (pydantic's at 255), so a schema nested
hundreds deep would fail far from where it came in. It is refused where it is
parsed instead, naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

# Levels of objects and arrays inside one free-form value (`{"a": {"b": 1}}` is 2).
# A JSON schema takes two per level of properties, so this allows 32 levels of
# properties: far beyond real tool schemas, far below what serializers refuse.
MAX_JSON_DEPTH = 64


def nesting_exceeds(value: object, limit: int) -> bool:
    """Whether `value` holds objects or arrays nested more than `limit` deep.
    Iterative, so no input can exhaust the stack."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _within_limit(value: dict[str, Any]) -> dict[str, Any]:
    if nesting_exceeds(value, MAX_JSON_DEPTH):
        raise PydanticCustomError(
            "json_too_deep",
            "nesting exceeds the limit of {limit} levels",
            {"limit": MAX_JSON_DEPTH},
        )
    return value


# A JSON object kept as sent, nested at most MAX_JSON_DEPTH deep.
JsonObject = Annotated[dict[str, Any], AfterValidator(_within_limit)]
