"""The service's routes and its OpenAPI document, both made from one list of declarations.

Each handler is declared next to its code with the path, method, summary, parameters,
request body and responses of its operation (:class:`Endpoints`, a decorator); the
server (:func:`urlsieve.service.app.create_app`) turns the one list into Starlette's
routes (:meth:`Api.routes`) and serves the document made of the same list at
``/openapi.json`` (:meth:`Api.document`): a route cannot exist without its entry in the
document, nor an entry without its route. The schemas the operations share (``Verdict``,
``Error``, …) are here, in :data:`COMPONENTS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from urlsieve import __version__
from urlsieve.gateway.learning import ACTIONS, SOURCES
from urlsieve.service.errors import Handler, _wrap
from urlsieve.service.reading import MAX_BATCH
from urlsieve.service.state import ServiceState, _state

__all__ = ["COMPONENTS", "Api", "Endpoint", "Endpoints", "Param"]

H = TypeVar("H", bound=Handler)

#: The methods an endpoint may declare (Starlette adds HEAD to a GET route by itself).
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: Where the document itself is served (it does not list itself).
DOCUMENT_PATH = "/openapi.json"
INFO = {
    "title": "urlsieve lookup service",
    "version": __version__,
    "description": "URL filtering verdicts, explanations and URL de-duplication.",
}
_PATH_PARAM = re.compile(r"\{([^{}:]+)(?::[^{}]+)?\}")


@dataclass(frozen=True)
class Param:
    """One parameter of an operation: a query parameter unless ``where="path"``."""

    name: str
    description: str = ""
    required: bool = False
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "string"})
    where: str = "query"

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "in": self.where}
        if self.required or self.where == "path":
            out["required"] = True
        if self.description:
            out["description"] = self.description
        out["schema"] = dict(self.schema)
        return out


@dataclass(frozen=True)
class Endpoint:
    """One route and its operation in the document.

    ``responses`` maps each status (``"200"``) to its response object and may not be
    empty; ``body`` is the request body object; ``token``: the operation takes
    ``Authorization: Bearer <token>``. ``listed``: the operation is in the document only
    when it says so of the service's state (the learn endpoints, served and answering 404
    when off). ``raw``: the handler answers its own errors (the console's pages); otherwise
    its :class:`~.errors.ApiError` is the JSON error body.
    """

    path: str
    method: str
    handler: Handler
    summary: str
    responses: Mapping[str, Any]
    params: tuple[Param, ...] = ()
    body: Mapping[str, Any] | None = None
    token: bool = False
    listed: Callable[[ServiceState], bool] | None = None
    raw: bool = False

    def __post_init__(self) -> None:
        where = f"{self.method} {self.path} ({getattr(self.handler, '__name__', '?')})"
        if not self.path.startswith("/"):
            raise ValueError(f"{where}: the path must start with /")
        if self.method not in METHODS:
            raise ValueError(f"{where}: the method must be one of {', '.join(METHODS)}")
        if not self.summary.strip():
            raise ValueError(f"{where}: an endpoint needs its summary for the document")
        if not self.responses:
            raise ValueError(f"{where}: an endpoint needs its responses for the document")
        for status, response in self.responses.items():
            if not (len(status) == 3 and status.isdigit()) or "description" not in response:
                raise ValueError(f"{where}: response {status!r} needs a status and description")
        names = [(p.where, p.name) for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"{where}: a parameter is declared twice")
        if any(p.where not in ("query", "path") for p in self.params):
            raise ValueError(f"{where}: parameters are in the query or the path")
        declared = {p.name for p in self.params if p.where == "path"}
        in_path = set(_PATH_PARAM.findall(self.path))
        if declared != in_path:
            raise ValueError(
                f"{where}: the path's parameters {sorted(in_path)} are not the declared "
                f"ones {sorted(declared)}"
            )
        if self.method == "GET" and self.body is not None:
            raise ValueError(f"{where}: a GET takes no body")

    def route(self) -> Route:
        handler = self.handler if self.raw else _wrap(self.handler)
        return Route(self.path, handler, methods=[self.method])

    def operation(self) -> dict[str, Any]:
        """The operation object of the document."""
        out: dict[str, Any] = {"summary": self.summary}
        if self.token:
            out["security"] = [{"bearer": []}]
        if self.params:
            out["parameters"] = [p.document() for p in self.params]
        if self.body is not None:
            out["requestBody"] = dict(self.body)
        out["responses"] = dict(self.responses)
        return out


class Endpoints:
    """One API area's endpoints, declared by decorating their handlers::

    API = Endpoints()

    @API.get("/v1/explain", "Why a URL gets its verdict", responses=...)
    async def explain(request: Request) -> Response: ...
    """

    def __init__(self) -> None:
        self._items: list[Endpoint] = []

    def declare(self, method: str, path: str, summary: str, **fields: Any) -> Callable[[H], H]:
        def add(handler: H) -> H:
            self._items.append(Endpoint(path, method, handler, summary, **fields))
            return handler

        return add

    def get(self, path: str, summary: str, **fields: Any) -> Callable[[H], H]:
        return self.declare("GET", path, summary, **fields)

    def post(self, path: str, summary: str, **fields: Any) -> Callable[[H], H]:
        return self.declare("POST", path, summary, **fields)

    def __iter__(self) -> Iterator[Endpoint]:
        return iter(self._items)


class Api:
    """The routes and the document of a list of endpoints (each path and method once)."""

    def __init__(self, endpoints: Iterable[Endpoint]) -> None:
        self.endpoints = tuple(endpoints)
        seen: set[tuple[str, str]] = set()
        for endpoint in self.endpoints:
            if not isinstance(endpoint, Endpoint):
                raise TypeError(f"{endpoint!r} is not an Endpoint: routes come with their document")
            key = (endpoint.path, endpoint.method)
            if key in seen or endpoint.path == DOCUMENT_PATH:
                raise ValueError(f"{endpoint.method} {endpoint.path} is declared twice")
            seen.add(key)

    def routes(self) -> list[Route]:
        """Starlette's routes: one per endpoint, and the document's own."""
        routes = [endpoint.route() for endpoint in self.endpoints]
        return [*routes, Route(DOCUMENT_PATH, _wrap(self.serve), methods=["GET"])]

    def paths(self) -> frozenset[str]:
        return frozenset(endpoint.path for endpoint in self.endpoints) | {DOCUMENT_PATH}

    def document(self, state: ServiceState | None) -> dict[str, Any]:
        """The OpenAPI document of what ``state``'s service serves (None: the endpoints
        listed whatever the state)."""
        listed = [
            endpoint
            for endpoint in self.endpoints
            if endpoint.listed is None or (state is not None and endpoint.listed(state))
        ]
        return {
            "openapi": "3.1.0",
            "info": dict(INFO),
            "paths": paths_of(listed),
            "components": COMPONENTS,
        }

    async def serve(self, request: Request) -> Response:
        """The OpenAPI document of what this service serves (the learn endpoints only when
        they are on)."""
        return JSONResponse(self.document(_state(request)))


def paths_of(endpoints: Iterable[Endpoint]) -> dict[str, dict[str, Any]]:
    """The document's ``paths`` of ``endpoints``: each path's operations by method."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = endpoint.operation()
    return paths


# -- what declarations are made of -------------------------------------------------------


def ref(name: str) -> dict[str, str]:
    if name not in COMPONENTS["schemas"]:
        raise ValueError(f"no component schema {name!r}")
    return {"$ref": f"#/components/schemas/{name}"}


def json_ok(schema: str, description: str) -> dict[str, Any]:
    """A JSON response of the component ``schema``."""
    return {"description": description, "content": {"application/json": {"schema": ref(schema)}}}


def html_page(description: str) -> dict[str, Any]:
    """An HTML page."""
    return {"description": description, "content": {"text/html": {}}}


def errors(*codes: int) -> dict[str, Any]:
    """The error responses (the ``Error`` body) of ``codes``."""
    body = {"content": {"application/json": {"schema": ref("Error")}}}
    return {str(code): {"description": "error", **body} for code in codes}


def json_body(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A required JSON request body (``schema``: a schema or a :func:`ref`)."""
    return {"required": True, "content": {"application/json": {"schema": dict(schema)}}}


def form_body(schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An urlencoded form body (``schema``: its fields, when they are documented)."""
    media: dict[str, Any] = {} if schema is None else {"schema": dict(schema)}
    out: dict[str, Any] = {"content": {"application/x-www-form-urlencoded": media}}
    if schema is not None:
        out = {"required": True, **out}
    return out


def url_param(description: str) -> Param:
    """The one required ``?url=``."""
    return Param("url", description, required=True)


#: Who asks, for a policy: believed only from a trusted proxy (service.trusted_proxies).
WHO = (
    Param("client", "for a policy, from a trusted proxy only: the client's address"),
    Param("user", "for a policy, from a trusted proxy only: the user name"),
    Param("client_name", "for a policy, from a trusted proxy only: the client's name"),
)


# -- the schemas the operations share ----------------------------------------------------

_ERROR = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
}
_RULE = {
    "type": ["object", "null"],
    "properties": {
        "pattern": {"type": "string"},
        "action": {"enum": ["block", "allow"]},
        "category": {"type": "string"},
        "source": {"type": ["string", "null"]},
        "line": {"type": ["integer", "null"]},
    },
}
_VERDICT = {
    "type": "object",
    "properties": {
        "url": {"type": "string"},
        "action": {"enum": ["block", "allow", "none"]},
        "category": {"type": ["string", "null"]},
        "canonical": {"type": "string"},
        "rule": {"$ref": "#/components/schemas/Rule"},
        "error": {"type": "string", "description": "set instead, in a batch"},
        "detail": {"type": "string"},
    },
}
_URLS = {"type": "array", "items": {"type": "string"}, "maxItems": MAX_BATCH}
_EXPLANATION = {
    "type": "object",
    "properties": {
        "url": {"type": "string"},
        "canonical": {"type": "string"},
        "action": {"enum": ["block", "allow", "none"]},
        "category": {"type": ["string", "null"]},
        "matching": {
            "type": "array",
            "items": {"type": "string"},
            "description": "every enforced category with a rule matching the URL "
            "(category: the one that decides)",
        },
        "probes": {"type": "array", "items": {"type": "string"}},
        "rule": {"$ref": "#/components/schemas/Rule"},
    },
}
_SEEN_FLAG = {
    "oneOf": [
        {"type": "boolean"},
        {
            "type": "object",
            "description": "in place of a URL the store's profile rejects",
            "properties": {
                "url": {"type": "string"},
                "error": {"type": "string"},
                "detail": {"type": "string"},
            },
        },
    ]
}
_SEEN_FLAGS = {"type": "array", "items": {"$ref": "#/components/schemas/SeenFlag"}}
_LEARNED = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "the rule: host/path?query, or a host"},
        "host": {"type": "string"},
        "is_host": {"type": "boolean"},
        "action": {"enum": list(ACTIONS)},
        "category": {"type": "string"},
        "source": {"enum": list(SOURCES)},
        "score": {"type": "integer"},
        "evidence": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "phrase": {"type": "string"},
                    "weight": {"type": "integer"},
                    "count": {"type": "integer"},
                },
            },
        },
        "url": {"type": "string"},
        "final_url": {"type": ["string", "null"]},
        "content_hash": {"type": ["string", "null"]},
        "fetched_at": {"type": ["number", "null"]},
        "first_seen": {"type": ["number", "null"]},
        "decided_at": {"type": "number"},
        "note": {"type": "string"},
    },
}
_OVERRIDE = {
    "allOf": [
        {"$ref": "#/components/schemas/Learned"},
        {
            "type": "object",
            "properties": {
                "overlay_rules": {"type": "integer"},
                "overlay_seconds": {"type": "number"},
                "rules_generation": {"type": "integer"},
                "gateway": {
                    "description": "this service's verdict for the URL now",
                    "oneOf": [{"$ref": "#/components/schemas/Verdict"}, {"type": "null"}],
                },
                "warning": {
                    "type": "string",
                    "description": "set when this service's rules decide otherwise",
                },
            },
        },
    ]
}

COMPONENTS: dict[str, Any] = {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    "schemas": {
        "Error": _ERROR,
        "Rule": _RULE,
        "Verdict": _VERDICT,
        "VerdictBatch": {
            "type": "object",
            "properties": {
                "results": {"type": "array", "items": {"$ref": "#/components/schemas/Verdict"}}
            },
        },
        "UrlBatch": {
            "type": "object",
            "required": ["urls"],
            "properties": {
                "urls": _URLS,
                **{p.name: {"type": "string", "description": p.description} for p in WHO},
            },
        },
        "Explanation": _EXPLANATION,
        "SeenOp": {
            "type": "object",
            "required": ["op", "urls"],
            "properties": {"op": {"enum": ["add", "test"]}, "urls": _URLS},
        },
        "SeenFlag": _SEEN_FLAG,
        "SeenResult": {
            "type": "object",
            "properties": {
                "op": {"enum": ["add", "test"]},
                "new": _SEEN_FLAGS,
                "seen": _SEEN_FLAGS,
            },
        },
        "Learned": _LEARNED,
        "LearnedPage": {
            "type": "object",
            "properties": {
                "verdicts": {"type": "array", "items": {"$ref": "#/components/schemas/Learned"}},
                "offset": {"type": "integer"},
                "limit": {"type": "integer"},
                "next_offset": {"type": ["integer", "null"]},
            },
        },
        "Override": _OVERRIDE,
    },
}
