"""A tokenizer's chat template rendered within bounds of time and size.

A chat template is a Jinja program shipped in a model or tokenizer folder (``tokenizer_config.json``,
``chat_template.jinja``): transformers renders it in Jinja's sandbox, which stops unsafe calls but not a long one,
so a template with nested loops renders for hours (``mutualrl eval`` stood at "loading tokenizer" forever). Every
render of ours (eval's prompts, the launch's prompt lengths) goes through :func:`bounded_render`: a template over
:data:`TEMPLATE_MAX_CHARS`, a render past :data:`RENDER_SECONDS` or a rendered prompt over
:data:`RENDERED_MAX_CHARS` is one :class:`~mutualrl.errors.DataError` naming the tokenizer. The time bound is a
timer signal, so it holds where the render runs on the main thread (the CLI's commands); elsewhere the size bounds
still hold.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from mutualrl.errors import DataError

RENDER_SECONDS = 10.0
"""Longest one prompt's render may take: real templates render in milliseconds."""
TEMPLATE_MAX_CHARS = 1_000_000
"""Largest chat template taken (the largest shipped ones are tens of kilobytes)."""
RENDERED_MAX_CHARS = 4_000_000
"""Longest rendered prompt taken: far beyond any model's context."""

T = TypeVar("T")


class _RenderTimeout(BaseException):
    """Raised inside the render by the timer signal (a BaseException: Jinja's constant folding catches Exception)."""


def _refuse_powers(template: str, what: str) -> None:
    """A template that raises to a power (``**``) is refused before it renders: one such operation runs in C, where
    the timer signal cannot stop it (``{{ 9 ** 9 ** 9 }}``), and no chat template needs one."""
    import jinja2
    from jinja2 import nodes

    try:
        tree = jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError:
        return  # transformers reports the syntax error itself
    if next(tree.find_all(nodes.Pow), None) is not None:
        raise DataError(f"{what}: its chat template raises a number to a power (**), which a render cannot be "
                        "stopped in; fix the tokenizer's chat_template")


def bounded_render(tokenizer: Any, render: Callable[[], T], what: str) -> T:
    """``render()`` (a call of ``tokenizer.apply_chat_template``) within the bounds; ``what`` names the tokenizer
    in the error."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and len(template) > TEMPLATE_MAX_CHARS:
        raise DataError(f"{what}: its chat template is {len(template):,} characters, over the "
                        f"{TEMPLATE_MAX_CHARS:,} a template may have; fix the tokenizer's chat_template")
    if isinstance(template, str):
        _refuse_powers(template, what)
    try:
        with _time_limit(RENDER_SECONDS):
            out = render()
    except _RenderTimeout:
        raise DataError(f"{what}: its chat template did not render one prompt in {RENDER_SECONDS:g} s (a loop "
                        "without end in the template?); fix the tokenizer's chat_template or evaluate without "
                        "it (--no-chat-template)") from None
    if isinstance(out, str) and len(out) > RENDERED_MAX_CHARS:
        raise DataError(f"{what}: its chat template rendered a prompt of {len(out):,} characters, over the "
                        f"{RENDERED_MAX_CHARS:,} taken; fix the tokenizer's chat_template")
    return out


def tokenizer_name(tokenizer: Any) -> str:
    """How an error names a tokenizer: its folder or hub id."""
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)[:200]


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_RenderTimeout` in the block after ``seconds`` (main thread only; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _RenderTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
