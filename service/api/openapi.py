"""The OpenAPI 3.1 document of the HTTP API, generated from its endpoint table and their models."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from service.api.http import READ_COOKIE, Endpoint
from service.core.models.api import BatchRefused, CaseBatch, ErrorBody
from service.core.models.case import SLUG_PATTERN

REF = "#/components/schemas/{model}"


def openapi_document(endpoints: list[Endpoint], description: str) -> dict[str, Any]:
    """An OpenAPI 3.1 document: the endpoints' paths, and their models' JSON Schemas as components."""
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (ErrorBody, "serialization"),
        (BatchRefused, "serialization"),
    ]
    for e in endpoints:
        if e.body is not None:
            wanted.append((e.body, "validation"))
        if not isinstance(e.answer, str):
            wanted.append((e.answer, "serialization"))
    refs, defs = models_json_schema(list(dict.fromkeys(wanted)), ref_template=REF)
    error = {"content": {"application/json": {"schema": refs[(ErrorBody, "serialization")]}}}
    paths: dict[str, dict[str, Any]] = {}
    for e in endpoints:
        if isinstance(e.answer, str):
            kind = "object" if e.answer == "application/json" else "string"
            content: dict[str, Any] = {e.answer: {"schema": {"type": kind}}}
        else:
            content = {"application/json": {"schema": refs[(e.answer, "serialization")]}}
        responses: dict[str, Any] = {"200": {"description": "OK", "content": content}}
        if e.body is not None:
            responses["201"] = {"description": "Created", "content": content}
        responses |= {str(code): {"description": "Error", **error} for code in e.errors}
        if e.body is CaseBatch:  # invalid items are named one by one; a body that is no batch, as any 422
            refused = {"anyOf": [refs[(BatchRefused, "serialization")], refs[(ErrorBody, "serialization")]]}
            responses["422"] = {
                "description": "Refused",
                "content": {"application/json": {"schema": refused}},
            }
        params = _parameters(e)
        op: dict[str, Any] = {"operationId": e.handler.__name__, "summary": e.summary, "responses": responses}
        if params:
            op["parameters"] = params
        if e.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[(e.body, "validation")]}},
            }
        if e.access != "public":
            op["security"] = [{"bearer": []}] if e.access == "write" else [{"bearer": []}, {"readCookie": []}]
        paths.setdefault(e.path, {})[e.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "tunefleet", "version": _version(), "description": description},
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "readCookie": {"type": "apiKey", "in": "cookie", "name": READ_COOKIE},
            },
        },
    }


def _version() -> str:
    try:
        return version("tunefleet")
    except PackageNotFoundError:
        return "0"


def _parameters(e: Endpoint) -> list[dict[str, Any]]:
    """The path parameters (safe slugs) and query parameters of an endpoint."""
    params: list[dict[str, Any]] = [
        {"name": n, "in": "path", "required": True, "schema": {"type": "string", "pattern": SLUG_PATTERN}}
        for n in re.findall(r"{(\w+)}", e.path)
    ]
    if e.query is not None:
        schema = e.query.model_json_schema(ref_template=REF)
        for name, prop in schema["properties"].items():
            required = name in schema.get("required", [])
            doc = prop.get("description", "")
            params.append(
                {"name": name, "in": "query", "required": required, "schema": prop, "description": doc}
            )
    return params
