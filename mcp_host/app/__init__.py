"""The composition root and the process: wiring the parts (`wiring`), the order they start and
stop in (`lifespan`), the ASGI app (`asgi`), `/healthz` and `/readyz`, the host file, and the
`mcp-host` command. Nothing imports it but `owner_facade`'s tests.
"""

__all__: list[str] = []
