"""The admission webhook server: the aiohttp app, the pure review handler, serving state, TLS, watch, reload, metrics and the decision log."""
