"""Internal: scaler_ui: the web monitor. Needs the `ui` extra (aiohttp): `pip install "scaler[ui]"`."""
