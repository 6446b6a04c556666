"""The fixed payloads the MCP conformance suite expects: a 1x1 PNG and a tiny WAV, in base64.

Shared by the tools, resources and prompts of this plugin; nothing here talks MCP.
"""

from __future__ import annotations

PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
