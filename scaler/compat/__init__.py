"""APIs of other engines on Scaler, so that code written for them runs with only its imports changed.

`scaler.compat.ray` is Ray's core API (`import scaler.compat.ray as ray`): see the docs, "Coming from Ray".
"""
