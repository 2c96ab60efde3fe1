"""Where the first spoken chunk of a reply ends: at its first clause, not its first
sentence, so the first sound comes as soon as a natural phrase has been written.

Measured on the 2-core CPU host (bench/tts_first_audio.py, bench/results/
tts_first_audio.json): Piper takes about 22 ms + 15 ms per word and speaks about
285 ms of audio per word (real-time factor 0.05-0.09); Flite 15 ms + 4 ms per word.
Synthesis is cheap; what the first chunk waits for is the language model writing it
(SmolLM2-135M: about 70 ms per word on that host). So the first chunk is cut as early
as it can still sound like a phrase: FIRST_MIN_WORDS words give about 1.1 s of audio,
during which the model writes some 15 more words and Piper speaks them in 0.2 s, so
the next chunk is ready before the first has played. With no clause mark, the chunk
is forced out at FIRST_MAX_WORDS (about 2.3 s of audio, 0.13 s of Piper), at the
phrase boundary nearest its end.
"""

from __future__ import annotations

import re

FIRST_MIN_WORDS = 4
FIRST_MAX_WORDS = 8

CLAUSE_MARKS = ",;:"
DASHES = ("\u2014", "\u2013", "-", "--")  # em dash, en dash, spaced hyphen
CLOSERS = "\"')]}\u201d\u2019\u00bb"
# Words that open a clause: a cut before them falls where a speaker would pause.
# ("and", "or", "so" also join words and phrases, "salt and pepper": only a forced
# cut uses them.)
CLAUSE_CONJUNCTIONS = frozenset("but because although though whereas unless while when if".split())
FORCED_CONJUNCTIONS = CLAUSE_CONJUNCTIONS | frozenset("and or so then which".split())
# Words that open a phrase; a forced cut before one keeps the phrase whole.
PHRASE_OPENERS = frozenset(
    "with for in on at from to about into over under after before by during".split()
)
# Words that never end a chunk: an article, a preposition or a possessive leaves the
# phrase hanging ("Set a timer for | ten minutes").
HANGING = (
    PHRASE_OPENERS
    | FORCED_CONJUNCTIONS
    | frozenset(
        "a an the of my your his her its our their this that these those is are was were".split()
    )
)
_WORD = re.compile(r"\S+")


def _bare(word: str) -> str:
    return word.strip("\"'()[]{}\u201c\u201d\u2018\u2019\u00ab\u00bb").lower()


def _ends_clause(word: str) -> bool:
    """Whether a clause ends after `word` (a whole word, with its punctuation)."""
    if word in DASHES or word.endswith(("\u2014", "\u2013", "--")):
        return True
    core = word.rstrip(CLOSERS)
    if not core or core[-1] not in CLAUSE_MARKS:
        return False
    before = core[:-1]
    # "e.g.," and "etc.," end an abbreviation, not a clause: the phrase goes on.
    return not before.endswith(".")


def first_clause_end(piece: str) -> int | None:
    """Where the first chunk ends in `piece`, the reply's first words so far up to a
    word boundary (whitespace follows it in the stream): an index into `piece`, the
    chunk being `piece[:index]`; None to wait for more words.

    Cut after a clause mark (, ; : or a dash) once the chunk has FIRST_MIN_WORDS
    words, or before a clause-opening conjunction ("but", "because") with that many
    words before it. A chunk reaching FIRST_MAX_WORDS with neither is cut at the
    latest boundary with at least FIRST_MIN_WORDS words before it that is, in order
    of preference: before a conjunction, before a phrase opener ("with", "for"),
    after a word that does not leave a phrase hanging; else after all its words.
    """
    spans = [m.span() for m in _WORD.finditer(piece)]
    n = len(spans)
    if n == 0:
        return None
    last = piece[spans[-1][0] : spans[-1][1]]
    if n >= FIRST_MIN_WORDS and _ends_clause(last):
        return len(piece)
    if n - 1 >= FIRST_MIN_WORDS and _bare(last) in CLAUSE_CONJUNCTIONS:
        return spans[-1][0]
    if n < FIRST_MAX_WORDS:
        return None
    words = [_bare(piece[a:b]) for a, b in spans]
    inner = range(n - 1, FIRST_MIN_WORDS - 1, -1)  # cut before word k, latest first
    for k in inner:
        if words[k] in FORCED_CONJUNCTIONS and words[k - 1] not in HANGING:
            return spans[k][0]
    for k in inner:
        if words[k] in PHRASE_OPENERS and words[k - 1] not in HANGING:
            return spans[k][0]
    for k in range(n, FIRST_MIN_WORDS - 1, -1):  # cut after word k - 1
        if words[k - 1] not in HANGING:
            return spans[k][0] if k < n else len(piece)
    return len(piece)
