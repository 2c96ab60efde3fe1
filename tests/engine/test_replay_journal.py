"""The resume journal (engine/replay_journal.py): exactly the events a client did not
receive, in order, or a refusal when that cannot be exact; bounded in events and in
characters."""

from __future__ import annotations

from engine.replay_journal import CannotReplay, Missed, ReplayJournal


def filled(n: int, **bounds: int) -> ReplayJournal:
    journal = ReplayJournal(**bounds)
    for i in range(1, n + 1):
        journal.add(f"event_{i}", f'{{"n": {i}}}')
    return journal


def ids(answer: Missed | CannotReplay) -> list[str]:
    assert isinstance(answer, Missed), answer
    return [e.event_id for e in answer.events]


def test_a_client_gets_every_event_after_the_last_it_processed_in_order() -> None:
    journal = filled(5)
    assert ids(journal.after("event_3")) == ["event_4", "event_5"]
    assert ids(journal.after("event_5")) == []  # it missed nothing
    assert ids(journal.after(None)) == [f"event_{i}" for i in range(1, 6)]
    after_first = journal.after("event_1")
    assert isinstance(after_first, Missed) and [e.seq for e in after_first.events] == [2, 3, 4, 5]


def test_an_id_this_session_never_sent_is_refused() -> None:
    assert filled(3).after("event_99") == CannotReplay("unknown_event")


def test_events_let_go_make_an_exact_replay_impossible() -> None:
    journal = filled(10, max_events=4)
    assert len(journal) == 4  # events 7 to 10 kept
    assert journal.after("event_2") == CannotReplay("events_lost")
    assert journal.after(None) == CannotReplay("events_lost")
    # The newest event let go is the edge: after it, nothing is missing.
    assert ids(journal.after("event_6")) == ["event_7", "event_8", "event_9", "event_10"]
    assert journal.after("event_5") == CannotReplay("events_lost")


def test_the_journal_is_bounded_in_characters_too() -> None:
    journal = ReplayJournal(max_events=1000, max_chars=100)
    for i in range(50):
        journal.add(f"event_{i}", "x" * 30)
    assert journal.chars <= 100 and len(journal) == 3
    assert ids(journal.after("event_46")) == ["event_47", "event_48", "event_49"]


def test_a_long_session_keeps_its_bookkeeping_bounded() -> None:
    journal = filled(20_000, max_events=8)
    assert len(journal._seq_of) <= 9  # the kept ones and the edge


def test_a_token_announcement_names_every_event_before_it() -> None:
    journal = filled(3)
    journal.alias("event_token_1")  # sent after event_3, not kept
    journal.add("event_4", "{}")
    assert ids(journal.after("event_token_1")) == ["event_4"]
    for n in range(20):  # a session that reconnects often keeps only its last few
        journal.alias(f"event_token_{n + 2}")
    assert journal.after("event_token_1") == CannotReplay("unknown_event")
    assert ids(journal.after("event_token_21")) == []
