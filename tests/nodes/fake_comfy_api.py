"""Stand-ins for ComfyUI's ``comfy_api.latest`` (``ComfyExtension`` and ``io``), for registration tests.

Modelled on the shapes of ComfyUI's ``comfy_api/latest/_io.py`` (0.3.64 and 0.33.0): every ``Input`` and
``Output`` constructor takes an explicit keyword list and raises TypeError on any other keyword, ``Schema``
is a dataclass, ``ComfyNode.GET_SCHEMA`` calls ``define_schema`` and checks the ids. Three generations:

- ``make_api("old")``: no ``advanced`` on inputs, no ``search_aliases`` on ``Schema`` (ComfyUI 0.3.64, 0.8.0);
- ``make_api("current")``: both present (ComfyUI 0.33 and later);
- ``make_api("refusing")``: current keywords, but creating a ``Schema`` raises (a V3 API the pack cannot use).

``comfyui_validate`` and ``comfyui_execute`` call a node the way ComfyUI's ``execution.py`` does.
"""
from __future__ import annotations

import abc
import dataclasses
import inspect
import types
from typing import Any

_P = inspect.Parameter

# Keywords of each widget input after the common ones, in ComfyUI's order (a subset is enough: what the
# pack could pass, plus a few it does not, so the signatures look like the real ones).
_WIDGET_KEYWORDS = {
    "INT": ("default", "min", "max", "step", "control_after_generate", "display_mode", "socketless",
            "force_input"),
    "FLOAT": ("default", "min", "max", "step", "round", "display_mode", "socketless", "force_input"),
    "STRING": ("multiline", "placeholder", "default", "dynamic_prompts", "socketless", "force_input"),
    "BOOLEAN": ("default", "label_on", "label_off", "socketless", "force_input"),
    "COMBO": ("options", "default", "control_after_generate", "upload", "image_folder", "remote",
              "socketless"),
}
_SCHEMA_FIELDS = ("node_id", "display_name", "category", "inputs", "outputs", "hidden", "description",
                  "is_input_list", "is_output_node", "is_deprecated", "is_experimental", "is_api_node",
                  "not_idempotent", "enable_expand")


def _strict_init(names: tuple[str, ...], positional: str | None):
    """An ``__init__`` taking exactly ``names`` as keywords (TypeError otherwise), storing them as attributes."""
    params = [_P("self", _P.POSITIONAL_OR_KEYWORD)]
    if positional:
        params.append(_P(positional, _P.POSITIONAL_OR_KEYWORD))
    params += [_P(n, _P.POSITIONAL_OR_KEYWORD if positional is None else _P.KEYWORD_ONLY, default=None)
               for n in names if n != positional]
    sig = inspect.Signature(params)

    def __init__(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)  # TypeError on an unknown keyword, as a real __init__
        bound.apply_defaults()
        for key, value in list(bound.arguments.items())[1:]:
            setattr(self, key, value)

    __init__.__signature__ = sig  # type: ignore[attr-defined]
    return __init__


def make_api(generation: str) -> types.SimpleNamespace:
    """``comfy_api.latest`` stand-in of one API generation: ``old``, ``current`` or ``refusing``."""
    if generation not in ("old", "current", "refusing"):
        raise ValueError(generation)
    new = generation != "old"
    common = ("display_name", "optional", "tooltip", "lazy") + (("advanced",) if new else ())

    def comfy_type(io_type: str, widget: bool) -> type:
        keywords = ("id",) + common + (_WIDGET_KEYWORDS[io_type] if widget else ())
        inp = type("Input", (), {"__init__": _strict_init(keywords, "id"), "io_type": io_type})
        out = type("Output", (), {"__init__": _strict_init(("id", "display_name", "tooltip", "is_output_list"),
                                                           None), "io_type": io_type})
        return type(io_type.title(), (), {"io_type": io_type, "Input": inp, "Output": out})

    io = types.SimpleNamespace()
    for name, io_type in (("Int", "INT"), ("Float", "FLOAT"), ("String", "STRING"), ("Boolean", "BOOLEAN"),
                          ("Combo", "COMBO")):
        setattr(io, name, comfy_type(io_type, widget=True))
    for name, io_type in (("Latent", "LATENT"), ("Image", "IMAGE"), ("Mask", "MASK")):
        setattr(io, name, comfy_type(io_type, widget=False))
    io.Custom = lambda io_type: comfy_type(io_type, widget=False)

    fields = _SCHEMA_FIELDS + (("search_aliases",) if new else ())

    def post_init(self):
        if generation == "refusing":
            raise RuntimeError("this io refuses every schema")

    io.Schema = dataclasses.make_dataclass(
        "Schema", [("node_id", str)] + [(f, Any, dataclasses.field(default=None)) for f in fields[1:]],
        namespace={"__post_init__": post_init})

    class NodeOutput:
        def __init__(self, *args, ui=None, expand=None, block_execution=None):
            self.args = args

    class ComfyNode:
        @classmethod
        def define_schema(cls):
            raise NotImplementedError

        @classmethod
        def execute(cls, **kwargs):
            raise NotImplementedError

        @classmethod
        def validate_inputs(cls, **kwargs):  # placeholder: ComfyUI ignores it unless overridden
            return True

        @classmethod
        def GET_BASE_CLASS(cls):
            return ComfyNode

        @classmethod
        def GET_SCHEMA(cls):
            schema = cls.define_schema()
            ids = [i.id for i in schema.inputs or []]
            if len(set(ids)) != len(ids):
                raise ValueError(f"{schema.node_id}: duplicate input ids")
            return schema

    io.NodeOutput = NodeOutput
    io.ComfyNode = ComfyNode

    class ComfyExtension(abc.ABC):
        async def on_load(self) -> None:
            return None

        @abc.abstractmethod
        async def get_node_list(self) -> list:
            ...

    return types.SimpleNamespace(io=io, ComfyExtension=ComfyExtension, generation=generation)


# ---------------------------------------------------------------- calling a node as ComfyUI does


def _real_override(cls: type, name: str):
    """ComfyUI's ``first_real_override``: the method if a subclass defines it, else None."""
    base = cls.GET_BASE_CLASS()
    for c in cls.mro():
        if c is base:
            return None
        if name in c.__dict__:
            return getattr(cls, name)
    return None


def comfyui_validate(cls: type, inputs: dict[str, Any]) -> list[str]:
    """Run a V3 node's ``validate_inputs`` as ComfyUI's ``execution.validate_inputs`` does: read the argument
    names with ``inspect.getfullargspec``, pass only those inputs (all of them if it takes ``**kwargs``),
    one error per passed input when the answer is not True. Returns the error details."""
    fn = _real_override(cls, "validate_inputs")
    if fn is None:
        return []
    spec = inspect.getfullargspec(fn)
    passed = {k: v for k, v in inputs.items() if k in spec.args or spec.varkw is not None}
    if not passed:
        return []
    result = cls.validate_inputs.__func__(cls, **passed)
    if result is True:
        return []
    return [f"{k}" + ("" if result is False else f" - {result}") for k in passed]


def comfyui_execute(cls: type, inputs: dict[str, Any]) -> tuple:
    """Call a V3 node's ``execute`` as ComfyUI does (class method function, inputs by name)."""
    return cls.execute.__func__(cls, **inputs).args
