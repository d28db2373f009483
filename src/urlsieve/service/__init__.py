"""The HTTP lookup service (``urlsieve serve``; the ``service`` extra): an entry point
that builds what it runs in the assembly room (:mod:`urlsieve.config`) from the gateway's
parts, as the Squid helper and the command line do.

- :mod:`.app`: :func:`~.app.create_app` (the Starlette application, its lifespan: rules,
  reloads, stores), the middlewares
- :mod:`.server`: running it on uvicorn, with the caps uvicorn lacks
- :mod:`.console`: the admin console's pages (mounted by :func:`~.app.create_app`)

The endpoints, by job:

- :mod:`.check`: the verdicts (``/v1/check``, ``/v1/explain``) and what they hand on
- :mod:`.pages`: the pages a browser is sent to (``/v1/continue``, ``/v1/pending``)
- :mod:`.seen`: ``/v1/seen`` on the configured seen store
- :mod:`.learn`: the learned verdicts, reviewed and overridden (``/v1/learn/*``)
- :mod:`.ops`: running the service (``/metrics``, ``/healthz``, ``/v1/reload``)
- :mod:`.reading`: reading a request (query, body, who asks, token), whatever its bytes
- :mod:`.errors`: :class:`~.errors.ApiError` and the JSON error body
- :mod:`.state`: the limits, the state and the reloader the endpoints share
- :mod:`.openapi`: each endpoint's declaration, from which both the routes and the
  OpenAPI document are made, and the schemas the document shares
"""
