"""The turn-taking evaluation (`make eval-turns`): a seeded set of spoken turns streamed
at real time through a real server, scored per turn-detection mode."""
