"""What the console (mounted in the same application) reuses of the service's request
handling, under public names: the state the endpoints share, who asks, and how a request's
parameters and body are read (whatever their bytes) — so the console's pages read a
request exactly as the API does, without reaching into the API modules' private names."""

from __future__ import annotations

from urlsieve.service.learn import _after_write as after_write
from urlsieve.service.reading import _count_param as count_param
from urlsieve.service.reading import _one_query as one_query
from urlsieve.service.reading import _peer as peer
from urlsieve.service.reading import _read_body as read_body
from urlsieve.service.reading import _url_param as url_param
from urlsieve.service.reading import _who as who
from urlsieve.service.state import _filter_of as filter_of
from urlsieve.service.state import _loaded as loaded
from urlsieve.service.state import _state as state_of

__all__ = [
    "after_write",
    "count_param",
    "filter_of",
    "loaded",
    "one_query",
    "peer",
    "read_body",
    "state_of",
    "url_param",
    "who",
]
