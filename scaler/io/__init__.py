"""Internal: the edge: ZeroMQ sockets and peer identities. Nothing here knows about scheduling."""
