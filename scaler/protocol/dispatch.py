"""Internal: finding a decoded message's handler: a list indexed by its kind (`message.WHICH`), the one way the
scheduler, the worker and the client dispatch. It costs less than a dict keyed by class: 8 against 16 ns a message on
PyPy, 61 against 65 on CPython (`bench/micro/test_dispatch_micro.py`), and the scheduler does it for every message.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Tuple

from scaler.fastpath._messages import MESSAGE_TYPES

HandlerTable = List[Optional[Callable[..., Any]]]


def handler_table(handlers: Iterable[Tuple[Any, Callable[..., Any]]]) -> HandlerTable:
    """(message class, handler) pairs as a list indexed by WHICH; None for kinds without a handler."""
    table: HandlerTable = [None] * len(MESSAGE_TYPES)
    for message_type, handler in handlers:
        table[message_type.WHICH] = handler
    return table
