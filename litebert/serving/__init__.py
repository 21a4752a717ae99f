"""Serving: pipelines that take raw text, and the HTTP server (`litebert serve`) built on them."""
