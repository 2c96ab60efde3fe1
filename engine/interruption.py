"""Qualified interruption: while the assistant is audible, speech must qualify before
it interrupts. Pure decisions; the state is held speech's (engine/held_speech.py), acted
on by the user's turns (engine/user_turns.py).

Speech that starts while a response streams, or while its audio still plays at the
client (by the clock of what was sent), is *held*: no `speech_started` (clients
flush their playback on it), no barge-in. From `min_speech_ms` on, the hearing
recognizer hears it, and hears it again every `HEAR_EVERY_MS` of further speech
(a hearing takes ~50 ms): it qualifies as soon as the recognizer is *sure* of words
that are not a backchannel, said by one voice (the waveform's kurtosis,
models/listening/crowd.py: several talkers at once are background talk). Laughter
is a reaction like a backchannel; once a hearing is laughter alone, the speech is heard
from near its end on, so that words after the laugh are heard. Words it is not
sure of (background talk, noise heard as words) qualify only once the held speech has
lasted `max_backchannel_ms`. Then
`speech_started` goes out with the true `audio_start_ms` and the barge-in happens.
Held speech that ends without qualifying (a cough, a knock, "mm-hm") is heard once
more whole, then dropped: no events, no turn, the answer goes on. Without a
recognizer, duration alone qualifies it (`min_speech_ms`). Outside assistant
speech nothing is held: turn start is as fast as ever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np
import numpy.typing as npt

from models.listening.hearing import Hearing

# Said to mean "go on": never an interruption on their own. Matched on whole words,
# case and punctuation aside.
DEFAULT_BACKCHANNELS: tuple[str, ...] = (
    "mm",
    "mhm",
    "mm hm",
    "mm hmm",
    "hmm",
    "uh huh",
    "uh",
    "um",
    "yeah",
    "yes",
    "yep",
    "yup",
    "ok",
    "okay",
    "right",
    "sure",
    "alright",
    "all right",
    "i see",
    "got it",
    "oh",
    "ah",
    "wow",
    "cool",
    "nice",
    "great",
    "true",
    "exactly",
)


# Words that alone are no evidence of an interruption: function words, what Whisper
# hears in a hum or a fragment of background talk ("mm-hm" as "them.", babble as "of
# the"), and its stock words for noise ("Thank you.", "you"). A hearing of nothing
# else is unsure, however sure the recognizer is; an interruption is heard by the
# word that carries it ("No", "wait", "stop", "hold on"), one hearing later at most.
WEAK_WORDS: frozenset[str] = frozenset(
    """a an the of to in on at for with from by as and or but so if then
    off up out over into onto down
    i you he she it we they me him her us them my your his its our their
    i'm you're it's is are was were be been am this that these those there here
    that's there's he's she's we're they're
    thank thanks bye""".split()
)

# A hearing of held speech shorter than this is not trusted alone, however sure: it
# hears a syllable or two. With the default min_speech_ms the first hearing is already
# this long: since Whisper is prompted with backchannels (models/listening/hearing.py) it
# hears them as such from there, where unprompted it heard a "right" as a sure "Run."
# and had to wait for a second hearing (p50 ~480 ms against ~330). Two hearings in a
# row that share a strong word are trusted at any length, sure or not.
SURE_ALONE_MS = 200

# Held speech is heard again once it has this much more speech than the last hearing.
HEAR_EVERY_MS = 100

# After a hearing of laughter alone, held speech is heard from this much before that
# hearing's end on, not from its onset: heard whole, Whisper writes the laugh on over
# the words that follow it ("Ha-ha-ha" for "ha-ha, desist immediately"), and heard
# from the laugh's last 200 ms it hears the words (docs/turn-taking.md, "Laughter and
# breaths").
AFTER_LAUGH_MS = 200


# How many voices held speech sounds like, by its kurtosis (models/listening/crowd.py),
# chosen on the interruption set replayed offline over seeds 15-24
# (`python -m bench.turns.crowd`): below CROWD_KURTOSIS it is background talk, whose
# words count only as unsure words; from there to ONE_VOICE_KURTOSIS it may be, and a
# sure hearing must be confirmed by the next one.
CROWD_KURTOSIS = 6.0
ONE_VOICE_KURTOSIS = 7.0
# Recorded voices measure a kurtosis of 3-6 (level compression, a far microphone), in
# the band of several talkers; their pitch is clear all the same. Held speech whose
# pitch clarity (models/listening/crowd.py) reaches this is one voice whatever its
# kurtosis, chosen by replaying the espeak and recorded sets offline
# (`python -m bench.turns.crowd`, docs/turn-taking.md): five espeak talkers at once
# stay below it (two bursts in twenty qualify, as with the kurtosis alone), recorded
# sentences qualify at 460/800 ms of speech (p50/p90) instead of 800/1984. It counts
# only over 400 ms of held speech or more (engine/held_speech.py, CLARITY_LEAST).
ONE_VOICE_CLARITY = 0.8
# A Gaussian's kurtosis. Speech is above it, and so is any sum of independent talkers
# and noise (the excess kurtosis of a sum is a weighted mean of its parts'): below it
# the sound is tonal, music or a hum, with no voice at all.
NO_VOICE_KURTOSIS = 3.0


@dataclass(frozen=True)
class InterruptionParams:
    """The `interruption` extension of `turn_detection` (OpenAI clients never send it)."""

    enabled: bool = True
    min_speech_ms: int = 200  # held speech shorter than this never interrupts
    # Held speech this long interrupts on words the recognizer is not sure of.
    max_backchannel_ms: int = 2000
    backchannels: tuple[str, ...] = DEFAULT_BACKCHANNELS
    crowd_kurtosis: float = CROWD_KURTOSIS  # 0: never background talk
    one_voice_kurtosis: float = ONE_VOICE_KURTOSIS  # 0: always one voice
    one_voice_clarity: float = ONE_VOICE_CLARITY  # 0: the kurtosis alone counts


class HearingRecognizer(Protocol):
    """Hears held speech (24 kHz pcm16 in): its transcript ("" when there are no
    words), None when it cannot tell. models/listening/hearing.py implements it."""

    async def transcribe(self, pcm: npt.NDArray[np.int16]) -> Hearing | None: ...


class Heard(Enum):
    """What a hearing made of held speech."""

    WORDS = "words"  # a real interruption
    UNSURE = "unsure"  # words, but the recognizer is not sure: talk in the background?
    BACKCHANNEL = "backchannel"
    NOISE = "noise"  # no words: a cough, a knock, the assistant's own echo


class Voices(Enum):
    """How many talkers held speech sounds like (`voices_of`)."""

    ONE = "one"  # a sure hearing qualifies it alone
    UNCLEAR = "unclear"  # maybe several: two hearings in a row must agree
    MANY = "many"  # background talk: its words are unsure words
    NONE = "none"  # tonal, no voice: what is heard in it is noise


def voices_of(kurtosis: float, params: InterruptionParams, clarity: float = 0.0) -> Voices:
    """The voices of held speech whose waveform has this kurtosis and pitch `clarity`
    (with the count off, `crowd_kurtosis` 0, never NONE nor MANY). Below a Gaussian's
    kurtosis it is tonal, however clear its pitch: music is clearer than any voice."""
    if kurtosis < min(params.crowd_kurtosis, NO_VOICE_KURTOSIS):
        return Voices.NONE
    if kurtosis >= params.one_voice_kurtosis or one_clear_voice(clarity, params):
        return Voices.ONE
    if kurtosis < params.crowd_kurtosis:
        return Voices.MANY
    return Voices.UNCLEAR


def one_clear_voice(clarity: float, params: InterruptionParams) -> bool:
    """Whether a pitch this clear is one voice (never, with `one_voice_clarity` 0)."""
    return 0.0 < params.one_voice_clarity <= clarity


def needs_clarity(kurtosis: float, params: InterruptionParams) -> bool:
    """Whether the pitch clarity could change what `voices_of` says for this kurtosis
    (it costs ~0.4 ms per second of held speech; the kurtosis ~0.05)."""
    return params.one_voice_clarity > 0.0 and voices_of(kurtosis, params) in (
        Voices.MANY,
        Voices.UNCLEAR,
    )


class Verdict(Enum):
    WAIT = "wait"  # keep holding
    CLASSIFY = "classify"  # hear the held speech so far
    INTERRUPT = "interrupt"  # release speech_started and barge in
    DROP = "drop"  # it ended without qualifying: no turn


def holds(params: InterruptionParams | None, assistant_audible: bool) -> bool:
    """Whether speech starting now is held."""
    return params is not None and params.enabled and assistant_audible


def held_verdict(
    params: InterruptionParams,
    speech_ms: int,
    *,
    ended: bool,
    heard: Heard | None,
    heard_ms: int,
    pending: bool,
    can_classify: bool,
) -> Verdict:
    """The next step for held speech `speech_ms` long (onset to now, or to its end
    when `ended`). `heard` is the latest hearing's answer, of the first `heard_ms`
    of speech; `pending`: a hearing is under way."""
    if heard is Heard.WORDS:
        return Verdict.INTERRUPT
    if speech_ms < params.min_speech_ms:
        return Verdict.DROP if ended else Verdict.WAIT
    if heard is Heard.UNSURE and speech_ms >= params.max_backchannel_ms:
        return Verdict.INTERRUPT  # too long a run of words for a backchannel
    if not can_classify:
        # Without a recognizer duration decides; with one, only what it heard.
        if heard is None:
            return Verdict.INTERRUPT  # never heard: do not swallow an interruption
        return Verdict.DROP if ended else Verdict.WAIT
    if pending:
        return Verdict.WAIT
    if ended:
        # Heard whole and not words: drop it; else hear the whole of it once more.
        return Verdict.DROP if heard is not None and heard_ms >= speech_ms else Verdict.CLASSIFY
    if heard is None or speech_ms - heard_ms >= HEAR_EVERY_MS:
        return Verdict.CLASSIFY
    return Verdict.WAIT


_NOT_WORD = re.compile(r"[^a-z' ]+")
# Whisper's notes of sounds that are not words: "(laughs)", "[LAUGHTER]", "*sighs*",
# "[BLANK_AUDIO]". They say no word was said.
_ANNOTATION = re.compile(r"\([^)]*\)|\[[^\]]*\]|\*[^*]*\*")


def normalize(text: str) -> str:
    """Lower case, annotations dropped, hyphens and punctuation to spaces, single
    spaces."""
    text = _ANNOTATION.sub(" ", text.lower()).replace("-", " ")
    return " ".join(_NOT_WORD.sub(" ", text).split())


# Hums and fillers however a recognizer spells them ("Mmm", "mm-hmm", "uh-uh", "hm",
# "eh", and "Ugh." or "Eeeee" that Whisper hears in a laugh or a gasp): backchannels
# whatever the list says.
_HUM = re.compile(r"^(?:h?m+(?:h+m+)*|u+h*|h+u+h+|a+h+|o+h+|e+h*|e+r+m*|u+m+|u+g+h+)$")
# Laughter as Whisper spells it ("Ha-ha.", "Hehehe.", "HAHA!", "heh", "ahaha"): a
# reaction like a hum, never an interruption by itself (docs/turn-taking.md,
# "Laughter and breaths"); laughter with words ("haha, no wait") interrupts by them.
_LAUGH = re.compile(r"^[aeo]*(?:h+[aeo]+h*)+$")


def laughed(text: str, backchannels: tuple[str, ...]) -> bool:
    """Whether a transcript is laughter with nothing else but hums or backchannels."""
    words = normalize(text).split()
    return any(_LAUGH.match(w) for w in words) and heard_of(text, backchannels) in (
        Heard.BACKCHANNEL,
        Heard.NOISE,
    )


def reaction(word: str) -> bool:
    """A hum, a filler or a laugh: a sound of listening, not a word."""
    return bool(_HUM.match(word) or _LAUGH.match(word))


def strong_words(text: str, backchannels: tuple[str, ...]) -> frozenset[str]:
    """The words of a transcript that can carry an interruption: not a WEAK_WORD, a
    single letter, a hum, a laugh or a one-word backchannel."""
    single = {normalize(b) for b in backchannels}
    return frozenset(
        w
        for w in normalize(text).split()
        if len(w) > 1 and w not in WEAK_WORDS and w not in single and not reaction(w)
    )


def agree(words: frozenset[str], previous: frozenset[str]) -> bool:
    """Two hearings in a row agree: they share a strong word."""
    return bool(words & previous)


def confirmed(
    heard: Heard, words: frozenset[str], previous: frozenset[str], speech_ms: int
) -> Heard:
    """A hearing (`heard`, its strong `words`, of the first `speech_ms` of held speech)
    weighed with the hearing before it (`previous`: its strong words): words the
    recognizer is unsure of count when both hearings share one (tiny is unsure of a
    Scottish "No." three times over); sure words count alone only from SURE_ALONE_MS
    of speech."""
    agreed = agree(words, previous)
    if heard is Heard.UNSURE and agreed:
        return Heard.WORDS
    if heard is Heard.WORDS and speech_ms < SURE_ALONE_MS and not agreed:
        return Heard.UNSURE
    return heard


@dataclass(frozen=True)
class Weighed:
    """A hearing of held speech weighed with the one before it (`weigh`)."""

    heard: Heard
    words: frozenset[str]  # its strong words
    agreed: bool  # they share one with the hearing before


def weigh(
    text: str,
    sure: bool,
    previous: frozenset[str],
    speech_ms: int,
    backchannels: tuple[str, ...],
) -> Weighed:
    """A hearing's transcript (`sure` or not, of the first `speech_ms` of held speech)
    weighed with the strong words of the hearing before it (`previous`)."""
    words = strong_words(text, backchannels)
    heard = confirmed(heard_of(text, backchannels, sure=sure), words, previous, speech_ms)
    return Weighed(heard, words, agree(words, previous))


def voices_decide(heard: Heard | None, speech_ms: int, params: InterruptionParams) -> bool:
    """Whether what held speech sounds like decides what its latest hearing counts as
    now (`counted`): for words, and for unsure words as long as `max_backchannel_ms`."""
    return heard is Heard.WORDS or (
        heard is Heard.UNSURE and speech_ms >= params.max_backchannel_ms
    )


def counted(heard: Heard, agreed: bool, voices: Voices) -> Heard:
    """What the latest hearing (`heard`, by `confirmed`; `agreed`: with the one before
    it) counts as while the held speech sounds like `voices`: words from one voice;
    from what may be several, only words two hearings agree on; from several at
    once, unsure words (background talk: tiny is sure of some of it, "No, even.", and
    hears one talker's "No" again and again); from no voice, noise (Whisper hears
    "Mm-hmm" in music, and webrtcvad calls it speech)."""
    if voices is Voices.NONE and heard in (Heard.WORDS, Heard.UNSURE):
        return Heard.NOISE
    if heard is not Heard.WORDS or voices is Voices.ONE:
        return heard
    if voices is Voices.UNCLEAR and agreed:
        return heard
    return Heard.UNSURE


def heard_of(text: str, backchannels: tuple[str, ...], *, sure: bool = True) -> Heard:
    """What a transcript of held speech is: no words is noise; nothing but
    backchannel phrases, hums and laughs ("yeah yeah", "okay, right", "Mmm, mmm",
    "Ha-ha.") is a backchannel; other words are words if the recognizer is `sure` of
    them and one of them is a strong word (`strong_words`). Lone letters are no
    words: Whisper spells a burst of breath or laughter as a stutter ("T-t-t",
    "P-s-s")."""
    words = normalize(text).split()
    phrases = {tuple(normalize(b).split()) for b in backchannels} - {()}
    longest = max((len(p) for p in phrases), default=0)
    i, reacted = 0, False
    while i < len(words):
        # The longest backchannel phrase starting here, else a hum or a laugh, else a
        # lone letter (skipped), else a real word.
        n = next(
            (
                n
                for n in range(min(longest, len(words) - i), 0, -1)
                if tuple(words[i : i + n]) in phrases
            ),
            1 if reaction(words[i]) else 0,
        )
        if n == 0 and len(words[i]) > 1:
            strong = strong_words(" ".join(words[i:]), backchannels)
            return Heard.WORDS if sure and strong else Heard.UNSURE
        reacted = reacted or n > 0
        i += max(n, 1)
    return Heard.BACKCHANNEL if reacted else Heard.NOISE
