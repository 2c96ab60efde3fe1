"""Capacity and server-added latency under load, side by side with the floor.

Run from the repository root:  .venv/bin/python -m bench.load  (or `make bench`);
__main__ says what a run does and runs its stages in order. The modules:

- stages: each stage of a run, printing as it goes; search: the sweep, the
  bisection at each knee and the retries, within the budget;
- measure: one point, N load clients (client) against one server (servers), with
  the clip they send (clips); points: a point's figures and its verdict (stats);
- vad_cost: the VAD's CPU per second of audio; profile: py-spy at one point;
- table, report, plot: what is printed and written;
- mix: its own run (`python -m bench.load.mix`), the cost per message of a realistic
  mix of sessions beside the floor's, with the default settings.
"""
