"""Internal: what a holder takes of one frame of DataRequests, on each of its ways in (the data address, the local
socket, the relay link). Our fetchers ask one id a request; a frame asking for thousands would only make a holder
answer "not found" for a second or more while its heartbeats wait, until it is taken for dead."""

from __future__ import annotations

from typing import List, Tuple

from scaler.protocol import DataRequest, ProtocolError

MAX_IDS_PER_FRAME = 1024  # beyond this a frame of requests is malformed
IDS_PER_TURN = 4096  # answered per call of a server; then the holder's loop runs once before it reads on


def data_requests(messages: list) -> Tuple[List[DataRequest], int]:
    """The DataRequests among a frame's messages, and how many ids they ask for together; ProtocolError if more than
    MAX_IDS_PER_FRAME."""
    requests = [message for message in messages if type(message) is DataRequest]
    asked = sum(len(request.object_ids) for request in requests)
    if asked > MAX_IDS_PER_FRAME:
        raise ProtocolError(f"requests for {asked} results in one frame, more than {MAX_IDS_PER_FRAME}")
    return requests, asked
