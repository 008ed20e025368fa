"""The protocol codec: encode and decode cost per message, on CPython and PyPy."""
