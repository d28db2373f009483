"""The service's OpenAPI document is made from the same declarations as its routes
(:mod:`urlsieve.service.openapi`): it lists exactly the routes the app serves (the
learn endpoints only when they are on, the console's pages only when the console is
mounted), each handler's parameters and body are the declared ones, a route cannot be
declared without its document entry, and the document validates as OpenAPI 3.1."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FunctionType
from typing import Any

import pytest
from openapi_spec_validator import validate
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from tests.gateway.test_service_learn import AUTH, app_for, write_config
from urlsieve.gateway.config import load_config
from urlsieve.service import app as service
from urlsieve.service import openapi, reading
from urlsieve.service.app import ENDPOINTS, create_app
from urlsieve.service.openapi import Api, Endpoint, Endpoints, Param, errors, json_ok

LEARN = {("/v1/learn/verdicts", "get"), ("/v1/learn/verdict", "get")} | {
    (f"/v1/learn/{op}", "post") for op in ("allow", "block", "forget")
}


def served_routes(client: TestClient) -> set[tuple[str, str]]:
    """(path, method) of every route the app serves, but the document's own."""
    out = set()
    for route in client.app.routes:  # type: ignore[attr-defined]
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD" and route.path != "/openapi.json":
                out.add((route.path, method.lower()))
    return out


def documented(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, method) for path, ops in doc["paths"].items() for method in ops}


@pytest.fixture(params=["learn", "no-learner", "no-token"])
def learn_client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    """The service with the learn endpoints on, without a learner, or without a token."""
    if request.param == "no-learner":
        config = load_config(str(write_config(tmp_path)), env={})
        with TestClient(create_app(config)) as client:
            yield client
        return
    config, admin = app_for(write_config(tmp_path))
    if request.param == "no-token":  # a learner, but no token configured: off
        config = load_config(str(write_config(tmp_path, token=False)), env={})
    try:
        with TestClient(create_app(config, learn=admin)) as client:
            yield client
    finally:
        admin.close()


def test_the_document_lists_exactly_the_routes_served(learn_client: TestClient) -> None:
    doc = learn_client.get("/openapi.json").json()
    validate(doc)
    served = served_routes(learn_client)
    assert served >= LEARN  # always routed: they answer 404 when off
    on = learn_client.get("/v1/learn/verdicts", headers=AUTH).status_code == 200
    assert documented(doc) == (served if on else served - LEARN)
    if not on:
        for path, method in LEARN:
            r = learn_client.request(method.upper(), path, headers=AUTH)
            assert (r.status_code, r.json()["error"]) == (404, "learn_disabled")
    # The console is mounted (Jinja2 is installed): its pages are documented too.
    assert ("/console/", "get") in served and ("/block", "get") in documented(doc)


def test_without_the_console_neither_its_routes_nor_its_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "_console", lambda *_args: None)
    config = load_config(str(write_config(tmp_path)), env={})
    with TestClient(create_app(config)) as client:
        doc = client.get("/openapi.json").json()
        served = served_routes(client)
    validate(doc)
    assert not any(path.startswith(("/console", "/block", "/static")) for path, _ in served)
    assert documented(doc) == served - LEARN
    assert client.get("/console/").status_code == 404


def test_the_document_is_the_declarations() -> None:
    """Every declared endpoint is one operation of the document, with its declaration's
    summary, parameters and body; every $ref names a component schema."""
    doc = Api(ENDPOINTS).document(None)
    assert {(e.path, e.method.lower()) for e in ENDPOINTS if e.listed is None} == documented(doc)
    for endpoint in ENDPOINTS:
        op = endpoint.operation()
        assert op["summary"] == endpoint.summary
        assert [p["name"] for p in op.get("parameters", [])] == [p.name for p in endpoint.params]
        assert ("requestBody" in op) == (endpoint.body is not None)
        assert ("security" in op) == endpoint.token
    refs = re.findall(r"'#/components/schemas/([^']+)'", repr(Api(ENDPOINTS).document(None)))
    assert refs and set(refs) <= set(openapi.COMPONENTS["schemas"])
    # The names the module kept from before the split are the generated parts.
    assert service.OPENAPI["paths"] == doc["paths"]
    assert set(service.LEARN_PATHS) == {path for path, _ in LEARN}


# -- a handler reads what its declaration says -------------------------------------------

#: How a handler reads a query parameter (a literal name) or its body.
_READS = (
    (re.compile(r"_url_param\(request\)"), lambda _m: {"url"}),
    (
        re.compile(r"_(?:one_query|choice|count_param)\(request, \"(\w+)\""),
        lambda m: {m.group(1)},
    ),
    (re.compile(r"_who\(request"), lambda _m: {"client", "user", "client_name"}),
)
_BODY = re.compile(r"_(?:json_body|read_body)\(request")


def _called(fn: Callable[..., Any]) -> Iterator[FunctionType]:
    """``fn`` and the functions of the API's area modules it calls, transitively (the
    request readers themselves are the leaves)."""
    todo, seen = [fn], set()
    while todo:
        current = inspect.unwrap(todo.pop())
        if not isinstance(current, FunctionType) or current in seen:
            continue
        seen.add(current)
        yield current
        if current.__module__ == reading.__name__:
            continue
        for name in current.__code__.co_names:
            target = current.__globals__.get(name)
            if isinstance(target, FunctionType) and target.__module__.startswith(
                "urlsieve.service."
            ):
                todo.append(target)


def reads(handler: Callable[..., Any]) -> tuple[set[str], bool]:
    """The query parameters ``handler`` reads, and whether it reads its body."""
    names: set[str] = set()
    body = False
    for fn in _called(handler):
        source = inspect.getsource(fn)
        for pattern, found in _READS:
            for match in pattern.finditer(source):
                names |= found(match)
        body = body or bool(_BODY.search(source))
    return names, body


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: f"{e.method} {e.path}")
def test_every_handler_reads_what_it_declares(endpoint: Endpoint) -> None:
    names, body = reads(endpoint.handler)
    assert names == {p.name for p in endpoint.params if p.where == "query"}
    assert body == (endpoint.body is not None)


def test_the_reading_check_sees_a_parameter_left_out() -> None:
    """The check above catches a handler reading more than it declares."""

    async def sneaky(request: Request) -> Response:
        reading._one_query(request, "secret")
        return Response()

    assert reads(sneaky) == ({"secret"}, False)


def test_every_handler_of_the_areas_is_declared() -> None:
    """A public coroutine of an area module taking the request is a declared handler: no
    handler is left to be routed by hand."""
    from urlsieve.service import check, learn, ops, pages, seen

    declared = {endpoint.handler for endpoint in ENDPOINTS}
    for module in (check, learn, ops, pages, seen):
        for name, fn in vars(module).items():
            if (
                inspect.iscoroutinefunction(fn)
                and fn.__module__ == module.__name__
                and not name.startswith("_")
            ):
                assert fn in declared, f"{module.__name__}.{name} is not declared"


# -- a route comes with its document entry, or not at all ---------------------------------


async def handler(request: Request) -> Response:
    return Response()


OK = {"200": {"description": "ok"}}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"summary": "", "responses": OK}, "summary"),
        ({"summary": "   ", "responses": OK}, "summary"),
        ({"summary": "x", "responses": {}}, "responses"),
        ({"summary": "x", "responses": {"200": {}}}, "description"),
        ({"summary": "x", "responses": {"ok": {"description": "ok"}}}, "status"),
        ({"summary": "x", "responses": OK, "path": "/v1/{id}"}, "path's parameters"),
        (
            {"summary": "x", "responses": OK, "params": (Param("id", where="path"),)},
            "path's parameters",
        ),
        ({"summary": "x", "responses": OK, "params": (Param("a"), Param("a"))}, "twice"),
        ({"summary": "x", "responses": OK, "params": (Param("a", where="header"),)}, "query"),
        ({"summary": "x", "responses": OK, "method": "get"}, "method"),
        ({"summary": "x", "responses": OK, "path": "v1"}, "start with /"),
        ({"summary": "x", "responses": OK, "body": {"content": {}}}, "GET takes no body"),
    ],
)
def test_an_endpoint_without_its_document_entry_is_refused(
    fields: dict[str, Any], message: str
) -> None:
    path = fields.pop("path", "/v1/x")
    method = fields.pop("method", "GET")
    with pytest.raises(ValueError, match=message):
        Endpoint(path, method, handler, **fields)


def test_the_api_refuses_a_bare_route_and_a_route_declared_twice() -> None:
    one = Endpoint("/v1/x", "GET", handler, "x", OK)
    with pytest.raises(TypeError, match="not an Endpoint"):
        Api([one, Route("/v1/y", handler)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="declared twice"):
        Api([one, Endpoint("/v1/x", "GET", handler, "again", OK)])
    with pytest.raises(ValueError, match="declared twice"):
        Api([Endpoint("/openapi.json", "GET", handler, "x", OK)])
    with pytest.raises(ValueError, match="no component schema"):
        json_ok("Nothing", "x")


def test_a_declared_endpoint_is_routed_and_documented() -> None:
    area = Endpoints()

    @area.post("/v1/echo", "Echo", responses={"200": {"description": "ok"}, **errors(400)})
    async def echo(request: Request) -> Response:
        return Response(await request.body())

    (endpoint,) = area
    assert endpoint.handler is echo  # the decorator hands the handler back unchanged
    api = Api(area)
    assert [(r.path, r.methods) for r in api.routes()] == [  # type: ignore[attr-defined]
        ("/v1/echo", {"POST"}),
        ("/openapi.json", {"GET", "HEAD"}),
    ]
    doc = api.document(None)
    validate(doc)
    assert doc["paths"] == {"/v1/echo": {"post": endpoint.operation()}}


def test_the_service_module_keeps_the_names_it_had_before_the_split() -> None:
    """Code written against urlsieve.service.app still imports from it."""
    names = [
        "ApiError", "CONFIRM_SECONDS", "INLINE_BATCH", "INLINE_CHARS", "LEARN_PAGE",
        "LEARN_PATHS", "MAX_BATCH", "MAX_CONFIRM_BODY", "MAX_LEARN_OFFSET", "MAX_LEARN_PAGE",
        "MAX_NUMBER_DIGITS", "MIN_CHECK_SECONDS", "NOTICE_SECONDS", "OPENAPI", "Reloader",
        "SeenResult", "ServiceLimits", "ServiceState", "check_batch", "check_one",
        "confirmation", "continue_key", "continue_page", "continue_warned", "create_app",
        "decision_json", "explain", "explanation_json", "healthz", "invalid_url_json",
        "learn_allow", "learn_block", "learn_forget", "learn_verdict", "learn_verdicts",
        "metrics", "pending", "reload", "rule_json", "seen", "verdict_json",
    ]  # fmt: skip
    missing = [name for name in names if not hasattr(service, name)]
    assert not missing
    assert not [name for name in names if inspect.ismodule(getattr(service, name))]


@pytest.mark.parametrize("op", ["allow", "block", "forget"])
def test_a_learn_write_documents_the_fields_it_takes(op: str) -> None:
    """The body schema of ``/v1/learn/<op>`` names the fields the handler accepts (it
    refuses any other)."""
    from urlsieve.service.learn import _LEARN_FIELDS

    (endpoint,) = (e for e in ENDPOINTS if e.path == f"/v1/learn/{op}")
    assert endpoint.body is not None
    schema = endpoint.body["content"]["application/json"]["schema"]
    assert set(schema["properties"]) == set(_LEARN_FIELDS[op])
    assert schema["additionalProperties"] is False and schema["required"] == ["url"]
