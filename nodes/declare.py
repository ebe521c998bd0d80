"""One declaration per node, turned into a V3 ``io.ComfyNode`` or a V1 class (docs/comfyui.md sections 6.2-6.3).

A node is a ``NodeSpec``: its inputs and outputs as data and a plain Python function that takes the inputs as
keyword arguments and returns a tuple of outputs. Tests call the function directly without ComfyUI.
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")


# ---------------------------------------------------------------- errors as API clients see them
#
# A node's error reaches API clients, who must not learn the server's paths. Which paths to hide is the host's
# knowledge (its model folders, ``host.client_message``); the pack hands that rewrite over once at import
# (``nodes/__init__.py``: ``use_client_text``), so this module stays free of the host and of ComfyUI.

def _unchanged(text: str) -> str:
    return text


_client_text: list[Callable[[str], str]] = [_unchanged]


def use_client_text(rewrite: Callable[[str], str]) -> None:
    """Set the rewrite of error text for clients (``host.client_message``: server paths -> <folder>/<name>)."""
    _client_text[0] = rewrite


class client_errors:
    """Context manager: re-raise an error whose message names server paths with the client text
    (``use_client_text``; same exception type where possible; the original stays chained for the server log)."""

    def __enter__(self) -> "client_errors":
        return self

    def __exit__(self, typ, err, tb) -> None:
        if err is None or not isinstance(err, Exception):
            return
        text = str(err)
        safe = _client_text[0](text)
        if safe == text:
            return
        try:
            new = type(err)(safe)
            if str(new) != safe:
                raise TypeError
            new.__dict__.update(err.__dict__)  # attributes such as a step number survive
        except Exception:  # noqa: BLE001 - exceptions whose constructor wants more than a message
            new = RuntimeError(safe)
        raise new from err


@dataclass(frozen=True)
class Input:
    """A node input: a widget (INT/FLOAT/STRING/BOOLEAN/COMBO) or a socket (LATENT, IMAGE, WANCORE_*)."""

    name: str
    type: str
    default: Any = None
    min: float | None = None
    max: float | None = None
    step: float | None = None
    options: Sequence[str] | Callable[[], Sequence[str]] | None = None  # COMBO choices (callable: read live)
    tooltip: str = ""
    optional: bool = False
    multiline: bool = False
    control_after_generate: bool = False
    advanced: bool = False

    @property
    def is_widget(self) -> bool:
        return self.type in WIDGET_TYPES

    def choices(self) -> list[str]:
        opts = self.options() if callable(self.options) else self.options
        return list(opts or [])


@dataclass(frozen=True)
class Output:
    type: str
    name: str
    tooltip: str = ""


@dataclass(frozen=True)
class NodeSpec:
    node_id: str
    display_name: str
    category: str
    description: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    fn: Callable[..., tuple]
    output_node: bool = False
    validate: Callable[..., bool | str] | None = None  # explicit parameters; True or a message (pre-queue check)
    search_aliases: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        names = [i.name for i in self.inputs]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.node_id}: duplicate input names")

    def run(self, **kwargs) -> tuple:
        with client_errors():  # errors reach API clients: model paths as <folder>/<file>
            out = self.fn(**kwargs)
        if not isinstance(out, tuple) or len(out) != len(self.outputs):
            raise TypeError(f"{self.node_id}: function returned {type(out).__name__}, expected a tuple of "
                            f"{len(self.outputs)} output(s)")
        return out

    def range_problems(self, **values) -> list[str]:
        """One message per INT/FLOAT value outside its declared ``min``/``max`` (or not a finite number).

        ComfyUI skips its own range check for every input a custom validator takes, so validators call this
        with the values they receive; the declaration stays the one source of the limits. None (a linked
        input, whose value is not known before the run) is not checked.
        """
        declared = {i.name: i for i in self.inputs}
        problems = []
        for name, value in values.items():
            i = declared[name]
            if value is None or i.type not in ("INT", "FLOAT"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                    i.type == "INT" and not isinstance(value, int)):
                problems.append(f"{name}={value!r}: must be {'an integer' if i.type == 'INT' else 'a number'}")
            elif isinstance(value, float) and not math.isfinite(value):  # ints are finite (and may not fit a float)
                problems.append(f"{name}={value!r}: must be a finite number")
            elif i.min is not None and value < i.min:
                problems.append(f"{name}={value}: must be at least {i.min}")
            elif i.max is not None and value > i.max:
                problems.append(f"{name}={value}: must be at most {i.max}")
        return problems

    def signature_mismatches(self) -> list[str]:
        """Differences between declared inputs and the function's parameters (tested for every node)."""
        params = inspect.signature(self.fn).parameters
        problems = []
        for i in self.inputs:
            p = params.get(i.name)
            if p is None:
                problems.append(f"input {i.name!r} is not a parameter of {self.fn.__name__}")
            elif i.optional and p.default is inspect.Parameter.empty:
                problems.append(f"optional input {i.name!r} has no default in {self.fn.__name__}")
        declared = {i.name for i in self.inputs}
        for name, p in params.items():
            if name not in declared and p.default is inspect.Parameter.empty and p.kind not in (
                    p.VAR_KEYWORD, p.VAR_POSITIONAL):
                problems.append(f"parameter {name!r} of {self.fn.__name__} is not declared as an input")
        return problems


# ---------------------------------------------------------------- V1 (NODE_CLASS_MAPPINGS)

def _v1_input(i: Input):
    opts: dict[str, Any] = {}
    if i.tooltip:
        opts["tooltip"] = i.tooltip
    if i.default is not None:
        opts["default"] = i.default
    for key in ("min", "max", "step"):
        if getattr(i, key) is not None:
            opts[key] = getattr(i, key)
    if i.multiline:
        opts["multiline"] = True
    if i.control_after_generate:
        opts["control_after_generate"] = True
    if i.advanced:
        opts["advanced"] = True
    if i.type == "COMBO":
        return (i.choices(), opts)
    return (i.type, opts)


def v1_class(spec: NodeSpec) -> type:
    """A V1 node class (``INPUT_TYPES``, ``RETURN_TYPES``, ``FUNCTION``) for ``spec``."""

    def input_types(cls):
        req = {i.name: _v1_input(i) for i in spec.inputs if not i.optional}
        opt = {i.name: _v1_input(i) for i in spec.inputs if i.optional}
        return {"required": req, "optional": opt} if opt else {"required": req}

    def execute(self, **kwargs):
        return spec.run(**kwargs)

    return type(spec.node_id, (), {
        "INPUT_TYPES": classmethod(input_types),
        "RETURN_TYPES": tuple(o.type for o in spec.outputs),
        "RETURN_NAMES": tuple(o.name for o in spec.outputs),
        "OUTPUT_TOOLTIPS": tuple(o.tooltip for o in spec.outputs),
        "FUNCTION": "execute",
        "CATEGORY": spec.category,
        "DESCRIPTION": spec.description,
        "OUTPUT_NODE": spec.output_node,
        "SPEC": spec,
        "execute": execute,
        **({"VALIDATE_INPUTS": staticmethod(spec.validate)} if spec.validate else {}),
    })


# ---------------------------------------------------------------- V3 (comfy_api.latest)

# Keywords that only change how a node looks (advanced-inputs fold, search words, tooltips, widget style).
# They are passed only where the running ComfyUI's ``io`` accepts them: ``advanced`` and ``search_aliases``
# are newer than ComfyUI 0.3.64 and 0.8.0, and passing them there is a TypeError that fails the whole pack.
# Everything else (ids, types, defaults, ranges, choices) is passed as is: if ``io`` refuses that, the V3
# path cannot represent the node and the caller falls back to V1.
COSMETIC_KEYWORDS = frozenset({"advanced", "search_aliases", "tooltip", "description", "multiline",
                               "control_after_generate"})


def accepted_keywords(fn: Callable) -> frozenset[str] | None:
    """Keyword parameters ``fn`` (a function or a class) accepts; None when it takes ``**kwargs`` or its
    signature cannot be read (then every keyword is assumed accepted)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def call_with_supported(fn: Callable, *args, dropped: set[str] | None = None, **kwargs):
    """``fn(*args, **kwargs)`` without the cosmetic keywords ``fn`` does not accept (named in ``dropped``)."""
    accepted = accepted_keywords(fn)
    if accepted is not None:
        for key in [k for k in kwargs if k in COSMETIC_KEYWORDS and k not in accepted]:
            del kwargs[key]
            if dropped is not None:
                dropped.add(key)
    return fn(*args, **kwargs)


def _v3_type(io, type_name: str):
    builtin = {"INT": io.Int, "FLOAT": io.Float, "STRING": io.String, "BOOLEAN": io.Boolean, "COMBO": io.Combo,
               "LATENT": io.Latent, "IMAGE": io.Image, "MASK": io.Mask,
               "MODEL": getattr(io, "Model", None), "CONDITIONING": getattr(io, "Conditioning", None)}
    return builtin.get(type_name) or io.Custom(type_name)


def _v3_input(io, i: Input, dropped: set[str] | None = None):
    kw: dict[str, Any] = {"optional": i.optional}
    if i.tooltip:
        kw["tooltip"] = i.tooltip
    if i.advanced:
        kw["advanced"] = True
    if i.type == "COMBO":
        kw.update(options=i.choices(), default=i.default)
    elif i.type in ("INT", "FLOAT"):
        kw["default"] = i.default
        for key in ("min", "max", "step"):
            if getattr(i, key) is not None:
                kw[key] = getattr(i, key)
        if i.control_after_generate:
            kw["control_after_generate"] = True
    elif i.type == "STRING":
        kw.update(default=i.default, multiline=i.multiline)
    elif i.type == "BOOLEAN":
        kw["default"] = i.default
    return call_with_supported(_v3_type(io, i.type).Input, i.name, dropped=dropped, **kw)


def _v3_output(io, o: Output, dropped: set[str] | None = None):
    return call_with_supported(_v3_type(io, o.type).Output, display_name=o.name, tooltip=o.tooltip or None,
                               dropped=dropped)


def v3_validator(fn: Callable[..., bool | str]) -> classmethod:
    """``fn`` as a V3 ``validate_inputs`` classmethod.

    ComfyUI passes a validator only the inputs named in its signature (``inspect.getfullargspec``, which
    reads ``__signature__``), so the wrapper takes ``**inputs`` but presents ``(cls, <fn's parameters>)``;
    inputs ComfyUI does not send (unset optional ones) keep ``fn``'s defaults."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    unsupported = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL, p.KEYWORD_ONLY)]
    if unsupported or "cls" in sig.parameters:
        raise ValueError(f"validator {fn.__name__}: ComfyUI passes inputs by name to plain parameters; "
                         f"cannot forward {unsupported or ['cls']}")

    def validate_inputs(cls, **inputs):
        return fn(**inputs)

    validate_inputs.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD), *params])
    validate_inputs.__name__ = validate_inputs.__qualname__ = f"validate_inputs[{fn.__name__}]"
    validate_inputs.__doc__ = fn.__doc__
    return classmethod(validate_inputs)


def v3_class(spec: NodeSpec, io, dropped: set[str] | None = None) -> type:
    """A V3 ``io.ComfyNode`` subclass for ``spec`` (``io`` = ``comfy_api.latest.io``). Cosmetic keywords that
    this ``io`` does not know are left out and named in ``dropped``."""

    def define_schema(cls):
        return call_with_supported(
            io.Schema, dropped=dropped,
            node_id=spec.node_id, display_name=spec.display_name, category=spec.category,
            description=spec.description, inputs=[_v3_input(io, i, dropped) for i in spec.inputs],
            outputs=[_v3_output(io, o, dropped) for o in spec.outputs],
            is_output_node=spec.output_node,
            **({"search_aliases": list(spec.search_aliases)} if spec.search_aliases else {}),
        )

    def execute(cls, **kwargs):
        return io.NodeOutput(*spec.run(**kwargs))

    return type(spec.node_id, (io.ComfyNode,), {
        "define_schema": classmethod(define_schema),
        "execute": classmethod(execute),
        "SPEC": spec,
        **({"validate_inputs": v3_validator(spec.validate)} if spec.validate else {}),
    })
