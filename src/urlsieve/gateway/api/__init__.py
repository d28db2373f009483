"""The lookup service's endpoints, by job (the server is :mod:`urlsieve.gateway.service`).

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
