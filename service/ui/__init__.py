"""The lab dashboard at /ui/ and the offline API docs at /docs and /redoc (docs/dashboard.md).

The page is static files shipped in the package (service/ui/static); it reads and writes
only through the public /v1 API with the key the browser holds, so it sees exactly what
that key may see.
"""
