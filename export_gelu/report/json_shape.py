"""How a typed record is written as JSON, and the JSON schema of it: both read from the record's
own dataclass fields and type hints, so the report's shape is declared once (its types).

A dataclass is written as an object of its fields (tuples and lists as arrays, dicts as
objects, paths as strings, a `Note` as {"code", "message"}). A `Shape` registered for a type
adjusts that, in one place per type: fields left out (`skip`: a record's non-JSON payload),
renamed, left out when None (`omit_none`), rounded, read-only properties added (`computed`),
another field's object merged into this one (`merge`), None written as {} (`empty`), a
field's type narrowed for the schema (`refine`, e.g. a status's Literal) and described
(`doc`), a field's object's keys written as the record's own (`flatten`), one field's
JSON as the record's (`inline`, a wrapper), or keys the report derives from the record
(`derived`). `schema_for(Report)` walks the same types with
the same shapes.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

from export_gelu.json_value import JsonValue
from export_gelu.notes import Note

#: The JSON value of a record: what `as_json` returns.
JSON = Any
#: A JSON schema (an object).
Schema = dict[str, JSON]
#: A type as annotations name it (a class, a union, a Literal, a generic alias).
TypeForm = object


@dataclass(frozen=True)
class Shape:
    """How one type differs from "every field, as it is" (module docstring)."""

    skip: frozenset[str] = frozenset()
    rename: Mapping[str, str] = field(default_factory=dict)
    omit_none: frozenset[str] = frozenset()
    rounded: Mapping[str, int] = field(default_factory=dict)
    computed: tuple[str, ...] = ()
    merge: Mapping[str, str] = field(default_factory=dict)  # field → the field merged into it
    empty: frozenset[str] = frozenset()  # None written as {}
    sorted_keys: frozenset[str] = frozenset()  # dicts written with their keys sorted
    refine: Mapping[str, TypeForm] = field(default_factory=dict)  # field → its JSON's type
    inline: str = ""  # the one field whose JSON is the record's (a wrapper's)
    flatten: frozenset[str] = frozenset()  # fields whose object's keys are the record's
    #: keys the report derives from the record (its type, and how), where the record's
    #: class has no property for them
    derived: Mapping[str, tuple[TypeForm, Callable[[Any], object]]] = field(
        default_factory=dict)
    doc: Mapping[str, str] = field(default_factory=dict)  # field → what it holds


_SHAPES: dict[type, Shape] = {}


def register(cls: type, shape: Shape) -> None:
    """Write `cls` (and its subclasses) as `shape` says."""
    _SHAPES[cls] = shape


def shape_of(cls: type) -> Shape:
    for klass in cls.__mro__:
        if klass in _SHAPES:
            return _SHAPES[klass]
    return Shape()


def _key(shape: Shape, name: str) -> str:
    return shape.rename.get(name, name)


def as_json(value: object) -> JSON:
    """`value` as JSON-ready Python (dicts, lists, strings, numbers, bools, None)."""
    if isinstance(value, Note):
        return value.to_json()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record_json(value)
    if isinstance(value, Mapping):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    return value


def _record_json(record: object) -> JSON:
    shape = shape_of(type(record))
    if shape.inline:
        return as_json(getattr(record, shape.inline))
    merged_away = set(shape.merge.values())
    out: dict[str, JSON] = {}
    for f in dataclasses.fields(record):  # type: ignore[arg-type]  # (a dataclass: as_json)
        name = f.name
        if name in shape.skip or name in merged_away:
            continue
        value = getattr(record, name)
        if value is None and name in shape.omit_none:
            continue
        if value is None and name in shape.empty:
            out[_key(shape, name)] = {}
            continue
        if name in shape.rounded:
            value = _rounded(value, shape.rounded[name])
        written = as_json(value)
        if name in shape.flatten:
            out.update(written)
            continue
        if name in shape.sorted_keys and isinstance(written, dict):
            written = dict(sorted(written.items()))
        extra = shape.merge.get(name)
        if extra is not None and getattr(record, extra) is not None:
            written = {**written, **as_json(getattr(record, extra))}
        out[_key(shape, name)] = written
    for name in shape.computed:
        out[_key(shape, name)] = as_json(getattr(record, name))
    for key, (_type, derive) in shape.derived.items():
        out[key] = as_json(derive(record))
    return out


def _rounded(value: JSON, digits: int) -> JSON:
    """A float (or each float of a dict) rounded to `digits`."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, Mapping):
        return {k: _rounded(v, digits) for k, v in value.items()}
    return value


# -- the schema ---------------------------------------------------------------------------------

def _snake(name: str) -> str:
    out = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
    return out


def _eval(annotation: object, owner: type) -> TypeForm:
    """A field's annotation (a string under `from __future__ import annotations`) as a type."""
    if not isinstance(annotation, str):
        return annotation
    module = sys.modules[owner.__module__]
    space = {**vars(typing), **vars(module)}
    try:
        return eval(annotation, space)  # noqa: S307 - the package's own annotations
    except NameError as exc:
        raise TypeError(f"{owner.__name__}: the report's JSON needs the type of {annotation!r} "
                        f"({exc}); import it in {owner.__module__} or skip the field") from exc


def _doc(cls: type) -> str:
    """The first paragraph of the record's docstring ("" for a dataclass without one)."""
    text = inspect.getdoc(cls) or ""
    if text.startswith(f"{cls.__name__}("):  # dataclass's own signature text
        return ""
    return " ".join(text.split("\n\n")[0].split())


class SchemaBuilder:
    """The JSON schema of a root record type, its nested records as `$defs`."""

    def __init__(self, root: type) -> None:
        self.root = root
        self.defs: dict[str, Schema] = {}

    def of(self, tp: TypeForm) -> Schema:
        """The schema of the type `tp`."""
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if tp is Any or tp is object or tp == JsonValue:  # any JSON value
            return {}
        if tp is type(None):
            return {"type": "null"}
        if tp is Note or (isinstance(tp, type) and issubclass(tp, Note)):
            return self._note()
        for base, name in ((bool, "boolean"), (int, "integer"), (float, "number"),
                           (str, "string")):
            if tp is base:
                return {"type": name}
        if tp is Path:
            return {"type": "string"}
        if origin is Literal:
            return {"const": args[0]} if len(args) == 1 else {"enum": list(args)}
        if origin in (Union, types.UnionType):
            return self._union(args)
        if origin in (list, Sequence, typing.Sequence) or origin is tuple and (
                len(args) == 2 and args[1] is Ellipsis):
            return {"type": "array", "items": self.of(args[0])}
        if origin is tuple:
            items = [self.of(a) for a in args]
            return {"type": "array", "prefixItems": items, "minItems": len(items),
                    "maxItems": len(items)}
        if origin in (dict, Mapping, typing.Mapping) or tp is dict:
            value = self.of(args[1]) if args else {}
            return {"type": "object", "additionalProperties": value}
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return self._ref(tp)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return {"enum": [m.value for m in tp]}
        raise TypeError(f"no JSON schema for {tp!r}")

    def _union(self, args: tuple[TypeForm, ...]) -> Schema:
        parts = [self.of(a) for a in args]
        simple = [p for p in parts if set(p) == {"type"} and isinstance(p["type"], str)]
        if len(simple) == len(parts):
            return {"type": [p["type"] for p in simple]}
        return {"anyOf": parts}

    def _note(self) -> Schema:
        self.defs.setdefault("note", {
            "type": "object", "description": "a note: what happened, in words, and its "
            "stable code (tools and tests match codes, not words)",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$"},
                           "message": {"type": "string"}},
            "additionalProperties": False})
        return {"$ref": "#/$defs/note"}

    def _ref(self, cls: type) -> Schema:
        if cls is self.root:
            return {"$ref": "#"}
        name = _snake(cls.__name__)
        if name not in self.defs:
            self.defs[name] = {}  # (a record that holds itself)
            self.defs[name] = self.record(cls)
        return {"$ref": f"#/$defs/{name}"}

    def record(self, cls: type) -> Schema:
        """The object schema of the record type `cls`."""
        shape = shape_of(cls)
        if shape.inline:
            inner = next(f for f in dataclasses.fields(cls) if f.name == shape.inline)
            return self.of(shape.refine.get(inner.name) or _eval(inner.type, cls))
        merged_away = set(shape.merge.values())
        props: Schema = {}
        required: list[str] = []
        for f in dataclasses.fields(cls):
            if f.name in shape.skip or f.name in merged_away:
                continue
            tp = shape.refine.get(f.name) or _eval(f.type, cls)
            key = _key(shape, f.name)
            if f.name in shape.flatten:
                inner_record = self.record(_a_class(tp))
                props.update(inner_record["properties"])
                required += inner_record["required"]
                continue
            schema = self.of(tp)
            if f.name in shape.empty:  # None is written as {}
                schema = {"anyOf": [self.of(_drop_none(tp)),
                                    {"type": "object", "maxProperties": 0}]}
            doc = shape.doc.get(f.name) or f.metadata.get("doc")
            props[key] = {**({"description": doc} if doc else {}), **schema}
            if f.name not in shape.omit_none:
                required.append(key)
            extra = shape.merge.get(f.name)
            if extra is not None:
                props[key] = self._merged(props[key], _eval(
                    next(g.type for g in dataclasses.fields(cls) if g.name == extra), cls))
        for name in shape.computed:
            tp = shape.refine.get(name) or typing.get_type_hints(
                getattr(cls, name).fget, vars(sys.modules[cls.__module__]))["return"]
            props[_key(shape, name)] = self.of(tp)
            required.append(_key(shape, name))
        for key, (derived_type, _derive) in shape.derived.items():
            props[key] = {**({"description": shape.doc[key]} if key in shape.doc else {}),
                          **self.of(derived_type)}
            required.append(key)
        out: Schema = {"type": "object"}
        if _doc(cls):
            out["description"] = _doc(cls)
        return {**out, "required": required, "properties": props,
                "additionalProperties": False}

    def _merged(self, base: Schema, extra_type: TypeForm) -> Schema:
        """`base` (a $ref) with the properties of `extra_type`'s record, optional, merged in."""
        inner = _a_class(_drop_none(extra_type))
        ref = base["$ref"].rsplit("/", 1)[-1]
        extra = self.record(inner)
        target = dict(self.defs[ref])
        target["properties"] = {**target["properties"], **extra["properties"]}
        name = f"{ref}_with_{_snake(inner.__name__)}"
        self.defs[name] = target
        description = {k: v for k, v in base.items() if k == "description"}
        return {**description, "$ref": f"#/$defs/{name}"}


def _a_class(tp: TypeForm) -> type:
    """`tp`, which must be a record's class (flattened or merged fields are records)."""
    if not isinstance(tp, type):
        raise TypeError(f"{tp!r}: only a record's fields can be flattened or merged")
    return tp


def _drop_none(tp: TypeForm) -> TypeForm:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (Union, types.UnionType) and args:
        return args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
    return tp


def schema_for(root: type, **head: JSON) -> Schema:
    """The JSON schema of `root`'s records as `as_json` writes them (`head`: $schema, $id,
    title, description... first)."""
    builder = SchemaBuilder(root)
    body = builder.record(root)
    return {**head, **body, "$defs": dict(sorted(builder.defs.items()))}
