"""Typed jobs: a payload type that carries its job name, checked when the job is recorded.

Declare the type once, where producers and handlers can both import it::

    @outbox.job_type("mail.welcome", queue="mail")
    class WelcomeEmail(pydantic.BaseModel):      # or a @dataclass, or a TypedDict
        user_id: int

    record(conn, "user:1:welcome", WelcomeEmail(user_id=1))   # the type names the job
    record(conn, key, Job("mail.welcome", WelcomeEmail(user_id=1), priority=3))

    @registry.job("mail.welcome")
    def welcome(payload: WelcomeEmail, ctx): ...               # gets a WelcomeEmail

A TypedDict's values are plain dicts, so they are given as ``typed_job(WelcomeDict, {...})``
(which works for every kind). The value is validated and serialised when the job is
recorded or pushed (``outbox.job.normalise``): a field of the wrong type raises
``InvalidJob`` naming the field, and nothing is written. A producer that never imports
the handlers' registry gets the same check: the type is all it needs.

Dataclasses and TypedDicts are checked here, field by field (``int``, ``float``,
``str``, ``bool``, ``None``, ``list[...]``, ``dict[str, ...]``, unions, ``Literal``,
nested dataclasses and TypedDicts, ``Any``); an annotation outside these is refused when
the type is declared. Pydantic v2 models (the ``typed`` extra) are checked by pydantic.

Versions: ``version=N`` stores ``"_version": N`` in the payload (absent means 1), and
``upgrade(data, from_version)`` turns an older payload still in the queue or the dead
letters into the current shape before it is validated for the handler. A payload of a
version newer than the handler's type knows is refused with ``PayloadVersionError``
(the job is dead-lettered, not lost: ``outbox queue retry`` once the new code runs).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, Union

from outbox import job as _job_module
from outbox.errors import ConfigurationError, InvalidJob, OutboxError
from outbox.job import Job, check_name

VERSION_FIELD = "_version"
Upgrade = Callable[[dict[str, Any], int], dict[str, Any]]
T = TypeVar("T")
_by_name: dict[str, PayloadType] = {}
_SCALARS: dict[type, str] = {int: "integer", float: "number", str: "string", bool: "boolean"}


class PayloadVersionError(OutboxError):
    """A typed payload's ``_version`` is newer than the handler's type knows (or not a
    version at all). The job is dead-lettered with this class, never run with a guess."""


@dataclasses.dataclass(frozen=True, slots=True)
class PayloadType:
    """What ``job_type`` declared: the class, its job name and queue, its version."""

    cls: type
    name: str
    queue: str
    version: int
    upgrade: Upgrade | None
    pydantic: bool

    def dump(self, value: Any) -> dict[str, Any]:
        """The value as the JSON object stored; ``InvalidJob`` naming a bad field."""
        if self.pydantic:
            data = _pydantic_dump(self.cls, value)
        else:
            data = _to_json(value, self.cls, "payload")
        if self.version > 1:
            data[VERSION_FIELD] = self.version
        return data

    def load(self, data: Any) -> Any:
        """A stored payload as the typed value, upgraded from an older version first."""
        if not isinstance(data, dict):
            raise InvalidJob(f"job {self.name!r}: payload is not an object")
        data = dict(data)
        version = data.pop(VERSION_FIELD, 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise PayloadVersionError(f"job {self.name!r}: payload _version is not a version")
        if version > self.version:
            raise PayloadVersionError(
                f"job {self.name!r}: payload version {version} is newer than this code's "
                f"{self.version}; deploy the newer handler, then retry the dead letter"
            )
        if version < self.version:
            if self.upgrade is None:
                raise PayloadVersionError(
                    f"job {self.name!r}: payload version {version} needs an upgrade to "
                    f"{self.version} and the type has none"
                )
            data = self.upgrade(data, version)
        if self.pydantic:
            return _pydantic_load(self.cls, data)
        return _from_json(data, self.cls, "payload")

    def schema(self) -> dict[str, Any]:
        """The payload's JSON Schema, for the services on the other side of the queue."""
        if self.pydantic:
            out: dict[str, Any] = dict(self.cls.model_json_schema())  # type: ignore[attr-defined]
        else:
            out = _schema(self.cls)
        if self.version > 1:
            out.setdefault("properties", {})[VERSION_FIELD] = {"const": self.version}
        out["title"] = out.get("title", self.cls.__name__)
        out["x-outbox-job"] = self.name
        return out

    def job(self, value: Any, **options: Any) -> Job:
        return Job(self.name, Typed(self, value), **{"queue": self.queue, **options})


@dataclasses.dataclass(frozen=True, slots=True)
class Typed:
    """A value bound to its payload type (``typed_job(WelcomeDict, {...})``)."""

    spec: PayloadType
    value: Any


def job_type(
    name: str, *, queue: str = "default", version: int = 1, upgrade: Upgrade | None = None
) -> Callable[[type[T]], type[T]]:
    """Declare a payload type for job ``name`` (module docstring); checked here."""
    check_name(name, "job name")
    check_name(queue, "queue name")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigurationError(f"job_type {name!r}: version must be an int >= 1")
    if version > 1 and upgrade is None:
        raise ConfigurationError(
            f"job_type {name!r}: version {version} needs upgrade=, for payloads of older versions"
        )

    def declare(cls: type[T]) -> type[T]:
        pydantic = _is_pydantic(cls)
        if not pydantic:
            if not (dataclasses.is_dataclass(cls) or typing.is_typeddict(cls)):
                raise ConfigurationError(
                    f"job_type {name!r}: {cls.__name__} is not a dataclass, TypedDict or "
                    "pydantic model"
                )
            _schema(cls)  # every annotation must map to JSON: refused here, not at a job
        spec = PayloadType(cls, name, queue, version, upgrade, pydantic)
        held = _by_name.get(name)
        if held is not None and held.cls.__qualname__ != cls.__qualname__:
            raise ConfigurationError(f"job {name!r} already has payload type {held.cls.__name__}")
        _by_name[name] = spec
        cls.__outbox_job__ = spec  # type: ignore[attr-defined]
        return cls

    return declare


def typed_job(cls: type, value: Any, **options: Any) -> Job:
    """A ``Job`` of ``cls``'s job name (and queue) carrying ``value`` to check at record
    time: the form for a TypedDict, and for job options (priority, ...) of any kind."""
    return spec_of(cls).job(value, **options)


def spec_of(cls: type) -> PayloadType:
    spec = getattr(cls, "__outbox_job__", None)
    if not isinstance(spec, PayloadType):
        raise InvalidJob(f"{getattr(cls, '__name__', cls)!r} is not declared with job_type")
    return spec


def by_name(name: str) -> PayloadType | None:
    """The payload type declared for job ``name`` in this process (``outbox schema``)."""
    return _by_name.get(name)


def names() -> list[str]:
    """The job names with a payload type declared in this process."""
    return list(_by_name)


def as_job(value: object) -> Job | None:
    """``record(conn, key, WelcomeEmail(...))``: the job a typed value names, else None."""
    spec = getattr(type(value), "__outbox_job__", None)
    return spec.job(value) if isinstance(spec, PayloadType) else None


def dump_payload(payload: object) -> Any:
    """A ``Job`` payload as JSON: a typed value (or ``Typed``) validated and dumped."""
    if isinstance(payload, Typed):
        return payload.spec.dump(payload.value)
    spec = getattr(type(payload), "__outbox_job__", None)
    return spec.dump(payload) if isinstance(spec, PayloadType) else payload


# -- pydantic --------------------------------------------------------------------------


def _is_pydantic(cls: type) -> bool:
    try:
        from pydantic import BaseModel
    except ImportError:
        return False
    return isinstance(cls, type) and issubclass(cls, BaseModel)


def _pydantic_error(name: str, exc: Any) -> InvalidJob:
    errors = exc.errors(include_input=False, include_url=False)
    where = ".".join(str(p) for p in errors[0]["loc"]) if errors else "?"
    return InvalidJob(f"payload field {where!r}: {errors[0]['msg'] if errors else exc}")


def _pydantic_dump(cls: Any, value: Any) -> dict[str, Any]:
    from pydantic import ValidationError

    try:
        model = cls.model_validate(value if isinstance(value, Mapping) else value.model_dump())
    except ValidationError as exc:
        raise _pydantic_error(cls.__name__, exc) from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidJob(
            f"payload of {cls.__name__} cannot be serialised: {type(exc).__name__}"
        ) from None
    try:
        return dict(model.model_dump(mode="json"))
    except (TypeError, ValueError) as exc:  # PydanticSerializationError is a ValueError
        where = _unserialisable_field(model)
        field = "" if where is None else f" field {where!r}"
        raise InvalidJob(
            f"payload{field} of {cls.__name__} cannot be serialised to JSON "
            f"({type(exc).__name__})"
        ) from None


def _unserialisable_field(model: Any) -> str | None:
    """The first field of ``model`` that does not dump to JSON on its own (pydantic's
    error says which type failed, not where): probed only once a dump has failed."""
    for name in type(model).model_fields:
        try:
            model.model_dump(mode="json", include={name})
        except (TypeError, ValueError):
            return str(name)
    return None


def _pydantic_load(cls: Any, data: dict[str, Any]) -> Any:
    from pydantic import ValidationError

    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_error(cls.__name__, exc) from None


# -- dataclasses and TypedDicts ----------------------------------------------------------


def _fields(cls: Any) -> dict[str, tuple[Any, bool]]:
    """Field name -> (annotation, required)."""
    hints = typing.get_type_hints(cls)
    if dataclasses.is_dataclass(cls):
        return {
            f.name: (
                hints[f.name],
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        }
    required = getattr(cls, "__required_keys__", frozenset(hints))
    return {k: (t, k in required) for k, t in hints.items()}


def _is_union(origin: Any) -> bool:
    return origin is Union or origin is types.UnionType


def _to_json(value: Any, tp: Any, path: str) -> Any:
    """``value`` checked against ``tp`` and made a JSON value; ``InvalidJob`` naming the
    field (its dotted path) when it does not fit."""
    return _convert(value, tp, path, loading=False)


def _from_json(value: Any, tp: Any, path: str) -> Any:
    return _convert(value, tp, path, loading=True)


def _wrong(path: str, tp: Any, value: Any) -> InvalidJob:
    name = getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
    return InvalidJob(f"payload field {path!r} must be {name} (got {type(value).__name__})")


def _convert(value: Any, tp: Any, path: str, *, loading: bool) -> Any:
    if tp is Any:
        return value if loading else _any_json(value, path)
    if tp is None or tp is type(None):
        if value is None:
            return None
        raise _wrong(path, None, value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(origin):
        for arm in args:
            try:
                return _convert(value, arm, path, loading=loading)
            except InvalidJob:
                continue
        raise _wrong(path, tp, value)
    if origin is Literal:
        if value in args:
            return value
        raise InvalidJob(f"payload field {path!r} must be one of {list(args)!r}")
    if tp in _SCALARS:
        ok = isinstance(value, tp) and not (tp is not bool and isinstance(value, bool))
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if ok:
            return value
        raise _wrong(path, tp, value)
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise _wrong(path, tp, value)
        item = args[0] if args else Any
        return [_convert(v, item, f"{path}[{i}]", loading=loading) for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise _wrong(path, tp, value)
        item = args[1] if len(args) == 2 else Any
        return {str(k): _convert(v, item, f"{path}.{k}", loading=loading) for k, v in value.items()}
    if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp):
        return _record(value, tp, path, loading)
    raise _wrong(path, tp, value)


def _any_json(value: Any, path: str) -> Any:
    """A field annotated ``Any`` holds any JSON value: checked here, so the error names
    the field (``canonical_json`` would say only what is wrong, not where)."""
    try:
        _job_module._check_value(value, depth=0)
    except InvalidJob as exc:
        raise InvalidJob(f"payload field {path!r}: {exc}") from None
    return value


def _record(value: Any, tp: Any, path: str, loading: bool) -> Any:
    is_dc = dataclasses.is_dataclass(tp)
    if is_dc and not loading:
        if not isinstance(value, tp):
            raise _wrong(path, tp, value)
        source = {f.name: getattr(value, f.name) for f in dataclasses.fields(tp)}
    elif isinstance(value, dict):
        source = value
    else:
        raise _wrong(path, tp, value)
    out: dict[str, Any] = {}
    for field_name, (ftype, required) in _fields(tp).items():
        where = field_name if path == "payload" else f"{path}.{field_name}"
        if field_name not in source:
            if required:
                raise InvalidJob(f"payload field {where!r} is missing")
            continue
        out[field_name] = _convert(source[field_name], ftype, where, loading=loading)
    return tp(**out) if is_dc and loading else out


def _schema(tp: Any) -> dict[str, Any]:
    """JSON Schema of an annotation; ``ConfigurationError`` for one JSON cannot hold."""
    if tp is Any:
        return {}
    if tp is None or tp is type(None):
        return {"type": "null"}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(origin):
        return {"anyOf": [_schema(a) for a in args]}
    if origin is Literal:
        return {"enum": list(args)}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if origin in (list, tuple) or tp in (list, tuple):
        return {"type": "array", "items": _schema(args[0]) if args else {}}
    if origin is dict or tp is dict:
        if args and args[0] is not str:
            raise ConfigurationError(f"dict keys must be str for JSON (got {args[0]!r})")
        return {"type": "object", "additionalProperties": _schema(args[1]) if args else {}}
    if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp):
        fields = _fields(tp)
        return {
            "title": tp.__name__,
            "type": "object",
            "properties": {k: _schema(t) for k, (t, _) in fields.items()},
            "required": [k for k, (_, req) in fields.items() if req],
        }
    raise ConfigurationError(f"{tp!r} cannot be a JSON payload field (no JSON form)")


# Plugged into outbox.job, which sits below this module (see its ``typed_job``).
_job_module.typed_job = as_job
_job_module.typed_payload = dump_payload
