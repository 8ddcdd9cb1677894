"""pytest plugin for mutation runs: each property test runs a few fixed examples.

The suite's property tests ask for hundreds of random examples; a mutation run executes the
tests covering a function once per mutant, so it asks each for at most ``MAX_EXAMPLES``,
derandomized (the same examples on every run: a mutant's verdict never depends on luck),
without the example database (one mutant's failure must not be replayed against the next) and
without deadlines (the trampolines make every call slower; a slow mutant is not a killed one).
Loaded only by ``mutation/run.py`` with ``-p``; the normal test runs never see it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings

MAX_EXAMPLES = 10


def pytest_collection_modifyitems(items: list[Any]) -> None:
    for item in items:
        test = getattr(item, "obj", None)
        # Hypothesis reads this attribute of a @given test each time it runs (no public API
        # changes the settings of an already-decorated test).
        current = getattr(test, "_hypothesis_internal_use_settings", None)
        if current is None:
            continue
        test._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
            current,
            max_examples=min(current.max_examples, MAX_EXAMPLES),
            derandomize=True,
            database=None,
            deadline=None,
        )
