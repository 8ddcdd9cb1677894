"""Structured logs: structlog everywhere, JSON when stderr is not a terminal.

One configuration for the operator's own lines and the standard-library loggers (kopf, httpx,
urllib3) alike, so a log collector sees one format. Logs go to stderr: stdout belongs to
commands' answers (``imagerefresh resolve`` prints the digest there).
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

__all__ = ["LogFormat", "configure_logging"]

LogFormat = Literal["auto", "json", "console"]


def configure_logging(level: str = "INFO", log_format: LogFormat = "auto") -> None:
    """Route structlog and stdlib logging through one renderer at ``level``."""
    as_json = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
