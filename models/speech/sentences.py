"""Cutting a reply streaming from a language model into the pieces handed to a
synthesizer: the first clause (first_clause.py), then sentence by sentence, so the
first words are spoken while the model writes the rest."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable

from models.speech.first_clause import first_clause_end

# A clause break (, ; :) ends a piece only once it is this long, so a long sentence
# starts sounding early while short ones keep their natural phrasing.
CLAUSE_MIN_CHARS = 60
# A piece with no break at all (a run-on reply, a degenerate model repeating a token)
# is cut at its last space once it is this long, else right there: each synthesis
# call stays short (flite needs ~7 s for 1,600 words) and the buffer stays bounded.
SENTENCE_MAX_CHARS = 240
TERMINATORS = ".!?"
CLAUSE_BREAKS = ",;:"
CLOSERS = "\"')]}\u201d\u2019\u00bb"  # and curly quotes, guillemets
OPENERS = "\"'([{\u201c\u2018\u00ab"  # and curly quotes, guillemets
# Words that end in a period without ending the sentence (compared lowercased).
ABBREVIATIONS = frozenset(
    "mr mrs ms mx dr prof sr jr st mt vs etc approx dept est fig inc ltd co no".split()
)


def is_abbreviation(before: str) -> bool:
    """Whether a period after `before` (the sentence so far) is not a sentence end."""
    words = before.split()
    if not words:
        return False
    word = words[-1].lstrip(OPENERS)
    if word.lower() in ABBREVIATIONS:
        return True
    if len(word) == 1 and word.isalpha() and word != "I":
        return True  # an initial: "J. R. R. Tolkien" ("so do I." does end)
    if "." in word and all(len(p) <= 2 and p.isalpha() for p in word.split(".")):
        return True  # "e.g", "i.e", "U.S", "a.m" (but not "example.com")
    return len(words) == 1 and word.isdigit()  # a list item: "1. First"


def split_speakable(buffer: str, *, first: bool) -> tuple[list[str], str]:
    """Speakable pieces at the start of `buffer`, and the rest: as split_sentences,
    but while `first` (nothing of the reply has been cut yet) the first piece ends
    as soon as first_clause_end finds its first clause complete."""
    return _split(buffer, first)


def split_sentences(buffer: str) -> tuple[list[str], str]:
    """Complete sentences at the start of `buffer`, and the rest.

    `buffer` is the streamed reply so far (the previous remainder plus new text).
    A sentence ends at . ! or ? followed by whitespace (after any closing quotes or
    brackets), at a newline, or at , ; : followed by whitespace once it is at least
    CLAUSE_MIN_CHARS long. The whitespace is required so "3.5" and "example.com" stay
    whole; hence "Done." at the very end waits for more text, and the caller speaks
    the remainder when the stream ends. A piece that reaches SENTENCE_MAX_CHARS with
    none of these is cut at its last space (or there, if it has none), so the rest is
    never longer. Sentences are stripped and never empty.
    """
    return _split(buffer, False)


def _split(buffer: str, first: bool) -> tuple[list[str], str]:
    sentences: list[str] = []
    start = i = 0
    n = len(buffer)

    def cut(end: int, resume: int) -> None:
        nonlocal start, first
        if piece := buffer[start:end].strip():
            sentences.append(piece)
            first = False
        start = resume

    while i < n:
        while start < i and buffer[start].isspace():
            start += 1  # measure from the first character the piece will keep
        if i - start >= SENTENCE_MAX_CHARS:
            space = max(buffer.rfind(" ", start, i), buffer.rfind("\t", start, i))
            if space > start:
                cut(space, space + 1)
            else:
                cut(i, i)
            i = start  # rescan the new piece from its start, as the next call would
            continue
        ch = buffer[i]
        if first and ch.isspace() and i > start and not buffer[i - 1].isspace():
            end = first_clause_end(buffer[start:i])  # a word just ended
            if end is not None:
                cut(start + end, start + end)
                i = start  # the rest is scanned anew, as a sentence
                continue
        if ch == "\n":
            cut(i, i + 1)
            i += 1
        elif ch in TERMINATORS:
            end, limit = i + 1, min(n, start + SENTENCE_MAX_CHARS)
            while end < limit and buffer[end] in TERMINATORS:
                end += 1
            while end < limit and buffer[end] in CLOSERS:
                end += 1
            if end == start + SENTENCE_MAX_CHARS:
                i = end
                continue  # a run of marks up to the cap: cut above
            if end == n:
                break  # whether it ends a sentence depends on the next character
            if buffer[end].isspace() and not (ch == "." and is_abbreviation(buffer[start:i])):
                cut(end, end)
            i = end
        elif (
            ch in CLAUSE_BREAKS
            and i + 1 < n
            and buffer[i + 1].isspace()
            and len(buffer[start : i + 1].strip()) >= CLAUSE_MIN_CHARS
        ):
            cut(i + 1, i + 1)
            i += 1
        else:
            i += 1
    return sentences, buffer[start:].lstrip()


async def sentences_of(pieces: AsyncIterable[str]) -> AsyncGenerator[str, None]:
    """The first clause of a streamed reply, then its sentences, each as soon as it
    is complete; then what is left once the stream ended."""
    rest, first = "", True
    async for piece in pieces:
        sentences, rest = split_speakable(rest + piece, first=first)
        first = first and not sentences
        for sentence in sentences:
            yield sentence
    if rest := rest.strip():
        yield rest
