"""docs/security.md's claims about forged status are each a tested row.

The "Status is a claim" table says, per field the operator reads back, the most a forgery can
do; tests/planner/test_status_claims.py proves each row. This keeps the two naming the same
rows, so a claim without a proof (or a proof of a claim no longer made) fails here.
"""

from __future__ import annotations

from planner.test_status_claims import ROWS

from support.docs import DOCS, tables_with


def test_every_status_claim_row_of_the_security_docs_is_proven_by_a_test() -> None:
    (table,) = tables_with(DOCS / "security.md", "field", "a forgery can at most")
    documented = table.column("field")
    assert sorted(documented) == sorted(ROWS)
