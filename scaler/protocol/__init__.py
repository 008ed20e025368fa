"""The Scaler wire protocol: message classes, enums, PROTOCOL_VERSION and the codec.

Everything outside scaler/protocol and scaler/fastpath imports the protocol from here and only from here. The schema
(scaler.capnp, next to this file) is the single source of truth; the classes and their codec are generated from it
into scaler/fastpath/_messages.py, a pure-Python implementation that runs on CPython and PyPy without pycapnp.

    frame = encode(Task(task_id=b"...", function_id=b"..."))
    for message in decode_frame(frame):      # raises ProtocolError, and only that, on bad input
        if message.WHICH == Task.WHICH: ...  # or isinstance(message, Task); message.raw is its encoded bytes
"""

from scaler.fastpath._messages import *  # noqa: F403  (every message class, enum, PROTOCOL_VERSION, MESSAGE_TYPES)
from scaler.fastpath._messages import __all__ as _generated_names
from scaler.fastpath.codec import Encoded, decode_frame, decode_frame_for_routing, encode, encode_many
from scaler.fastpath.templates import Builder, Template, make_template, worth_a_template
from scaler.fastpath.wire import ProtocolError
from scaler.protocol import heartbeat_flags

__all__ = [
    *_generated_names,
    "Builder",
    "Encoded",
    "ProtocolError",
    "Template",
    "decode_frame",
    "decode_frame_for_routing",
    "encode",
    "encode_many",
    "heartbeat_flags",
    "make_template",
    "worth_a_template",
]
