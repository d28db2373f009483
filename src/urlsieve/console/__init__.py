"""The gateway's face: the block page family and the admin console (``urlsieve serve``).

:mod:`urlsieve.console.stream` (the decision stream: helpers and the service append, the
console tails) needs only the standard library; the pages (:mod:`urlsieve.service.console`)
need Jinja2 (the ``service`` extra).
"""
