"""A workload's ``spec.selector`` (a metav1.LabelSelector) as a label selector query string.

The API server filters pods by ``?labelSelector=``, whose grammar is kubectl's: ``k=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``, joined by commas (AND). This renders exactly
the four ``matchExpressions`` operators metav1 defines, so the pods listed are the pods the
workload's controller owns by label. An empty selector would match every pod in the namespace:
it is refused rather than turned into a query that selects everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["InvalidSelector", "label_selector", "matches"]


class InvalidSelector(ValueError):
    """A LabelSelector that cannot be rendered (unknown operator, missing values, empty)."""


def label_selector(selector: Mapping[str, Any]) -> str:
    """``{"matchLabels": {...}, "matchExpressions": [...]}`` → ``"a=b,tier in (web),!old"``."""
    terms = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or ():
        terms.append(_expression(expression))
    if not terms:
        raise InvalidSelector("an empty selector matches every pod in the namespace")
    return ",".join(terms)


def _expression(expression: Mapping[str, Any]) -> str:
    key, operator = expression.get("key"), expression.get("operator")
    values = sorted(str(v) for v in expression.get("values") or ())
    if not key:
        raise InvalidSelector(f"a matchExpression without a key: {dict(expression)!r}")
    if operator in ("In", "NotIn"):
        if not values:
            raise InvalidSelector(f"{operator} on {key!r} needs at least one value")
        word = "in" if operator == "In" else "notin"
        return f"{key} {word} ({','.join(values)})"
    if operator == "Exists":
        return str(key)
    if operator == "DoesNotExist":
        return f"!{key}"
    raise InvalidSelector(f"unknown matchExpressions operator {operator!r} on {key!r}")


def matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """Whether ``labels`` satisfy a (valid) metav1.LabelSelector, as the API server judges it."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if key not in labels or str(labels[key]) != str(value):
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression["key"], expression["operator"]
        values = {str(v) for v in expression.get("values") or ()}
        present = key in labels
        if operator == "In" and not (present and str(labels[key]) in values):
            return False
        if operator == "NotIn" and present and str(labels[key]) in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True
