"""Guessed targets, inside the capture worker: a changed class that nothing the repository runs
was seen building (a training repository's model file, with no tests) is built from its
constructor's signature and called with inputs shaped for its first layer, so that it still
gets a target with no configuration. The hooks record the guess like any call; the target says
it was guessed wherever it is shown.

The constructor: each required parameter from its annotation (a class built with its defaults,
a config dataclass; ``int`` and ``float`` by the parameter's name) or, unannotated, from its
name (``config``: the one config class of the module that builds with its defaults; ``dim``,
``n_head``, ``kernel_size``: sizes). A build whose parameters and buffers would pass
``MAX_ELEMENTS`` (counted on the meta device first) is not made. The inputs: for each required
forward parameter, a tensor shaped for the first layers the module holds (``nn.Embedding``:
token ids; ``nn.Linear``, norms: ``[8, 64, features]``; convolutions: ``[8, channels, 32,
32]``, a sequence of 1024, 64 or 128), tried in order until a forward runs: the same kind for
every input first, then one kind each (token ids and audio features).

``guess_unseen`` drives it over a ``Recorder``'s classes after the tests, examples or command
ran. Everything here runs the repository's code: any exception it raises (``SystemExit``
included) is a reason the guess failed, never the worker's end.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import ModuleType

import torch
from torch import nn

from harness.capture.hooks import Recorder
from harness.problem.uninitialized import built

BATCH, TOKENS, SIDE, WIDTH = 8, 64, 32, 64  # the guessed sizes: small, a forward in milliseconds
LAYERS_TRIED = 3  # the first layers whose inputs are tried
MAX_TRIES = 32  # forward calls tried per class: each a few milliseconds at the guessed sizes
MAX_ELEMENTS = 2**28  # a guessed build's parameters and buffers: 1 GiB in float32
CONFIG_NAME = re.compile(r"^(config|cfg|conf|args|hparams|params|opt|options|settings)$", re.I)
# An int parameter's value by its name, the first rule that matches; any other int is a width.
INT_RULES = [
    (re.compile(r"kernel", re.I), 3),
    (re.compile(r"stride|dilation|groups", re.I), 1),
    (re.compile(r"padding|^pad", re.I), 1),
    (re.compile(r"patch", re.I), 4),
    (re.compile(r"head_?dim|dim_?head|head_?size", re.I), 16),
    (re.compile(r"head", re.I), 4),
    (re.compile(r"layers|layer$|depth|blocks", re.I), 2),  # n_layer, layers_per_block
    (re.compile(r"dim|size|channels|features|hidden|width|embd|d_model|n_state|planes", re.I), 64),
]
SIZE_NAMES = [rule for rule, _ in INT_RULES]  # an unannotated parameter is a size by these
FLOAT_RULES = [
    (re.compile(r"eps", re.I), 1e-5),
    (re.compile(r"drop|^p$|prob|rate", re.I), 0.0),
    (re.compile(r"momentum", re.I), 0.1),
]
NOT_BUILT = (nn.Module, torch.Tensor)  # an annotation that names one: nothing to guess it from


class NoGuess(Exception):
    """Why a class cannot be guessed: said beside it, as a capture's problem is."""


def guess_unseen(recorder: Recorder) -> None:
    """Call each hooked class that no instance was seen called of with guessed inputs: an
    instance the repository built, or one built with guessed arguments; why not, where it
    cannot be (``recorder.no_guess``). The repository's code runs here: nothing it raises
    ends the worker."""
    argv = sys.argv
    for key, cls in recorder.classes.items():
        instances = recorder.instances[key]
        if any(one.calls for one in instances):
            continue  # seen for real, or inside an earlier guess
        sys.argv = [key.partition(":")[0]]  # a config that parses arguments gets none
        recorder.guessing = True
        try:
            built = [(one, module) for one in instances if (module := one.module()) is not None]
            if built:
                built[-1][0].inputs_guessed = True
            call(built[-1][1] if built else build(cls, recorder.unrecorded))
            if not any(one.calls for one in instances):
                raise NoGuess(f"its forward ran, but not through {cls.__name__}.forward")
        except BaseException as err:  # the repository's code, on our guess: said per class
            recorder.no_guess[key] = str(err) if isinstance(err, NoGuess) else (
                f"guessing raised {type(err).__name__}: {str(err)[:200]}"
            )  # fmt: skip
        finally:
            recorder.guessing = False
            sys.argv = argv


def build(cls: type[nn.Module], unrecorded: Callable[[], AbstractContextManager]) -> nn.Module:
    """An instance built with guessed constructor arguments; NoGuess where one has no guess.
    ``unrecorded()``: a context in which the hooks record nothing (the build on meta)."""
    module = sys.modules.get(cls.__module__)
    args: list = []
    kwargs: dict = {}
    for name, parameter in list(_signature(cls.__init__).parameters.items())[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.default is not parameter.empty:
            continue
        value = _value(name, parameter.annotation, module)
        if parameter.kind is parameter.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            args.append(value)
    _bounded(cls, args, kwargs, unrecorded)
    try:  # weights it leaves uninitialized drawn, as the harness draws them (``built``)
        return built(lambda: cls(*args, **kwargs), seed=0)
    except BaseException as err:  # the repository's constructor, on our guess: said, not hidden
        raise NoGuess(f"{cls.__name__} built with guessed arguments raised {_said(err)}") from None


def _bounded(
    cls: type[nn.Module], args: list, kwargs: dict, unrecorded: Callable[[], AbstractContextManager]
) -> None:
    """NoGuess where the build would hold more than MAX_ELEMENTS (a config's defaults may be a
    7B model's), counted on the meta device; a constructor meta cannot run is built for real."""
    try:
        with unrecorded(), torch.device("meta"):
            probe = cls(*args, **kwargs)
        held = sum(t.numel() for t in [*probe.parameters(), *probe.buffers()])
    except BaseException:  # the real build says what is wrong, if anything
        return
    if held > MAX_ELEMENTS:
        raise NoGuess(
            f"built with guessed arguments it would hold {held:,} parameter and buffer values, "
            f"over the guess's {MAX_ELEMENTS:,}"
        )


def call(instance: nn.Module) -> None:
    """Forward calls with guessed inputs until one runs (the hooks record that one); NoGuess
    with the last failure where none does."""
    parameters = list(_signature(type(instance).forward).parameters.values())[1:]
    required = [
        parameter
        for parameter in parameters
        if parameter.default is parameter.empty
        and parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]
    if not required and any(p.kind is p.VAR_POSITIONAL for p in parameters):
        required = parameters[:1]  # forward(self, *inputs): one input
    if not required:
        raise NoGuess("its forward takes no input to guess")
    failed = "no input was tried"
    try:
        makers = _distinct(list(_inputs(instance)))
    except BaseException as err:  # the module's own layers, read: a property may raise
        raise NoGuess(f"its layers could not be read: {_said(err)}") from None
    for chosen in _combinations(makers, len(required)):
        try:
            with torch.no_grad():
                instance(*[maker() for maker in chosen])
            return
        except BaseException as err:  # the guess did not fit (SystemExit too): the next may
            failed = _said(err)
    raise NoGuess(f"no guessed input ran its forward (the last: {failed})")


def _distinct(makers: list) -> list:
    """One maker per kind of input (shape and dtype), in order: three ``Linear(64, 64)`` layers
    make one kind, and the tries go to other kinds."""
    kinds: dict[tuple, Callable] = {}
    for maker in makers:
        made = maker()
        kinds.setdefault((tuple(made.shape), made.dtype), maker)
    return list(kinds.values())


def _combinations(makers: list, count: int) -> Iterator[tuple]:
    """Each maker for every input first (one kind of input); then, for a forward of several
    inputs, each input its own maker (token ids and audio features: ``TextDecoder(x, xa)``), the
    first ``MAX_TRIES`` in all."""
    same = ((maker,) * count for maker in makers)
    mixed = (chosen for chosen in itertools.product(makers, repeat=count) if len(set(chosen)) > 1)
    yield from itertools.islice(itertools.chain(same, mixed if count > 1 else ()), MAX_TRIES)


def _signature(function) -> inspect.Signature:
    try:
        return inspect.signature(function, eval_str=True)
    except Exception:  # an annotation that does not evaluate: the names still guide
        try:
            return inspect.signature(function)
        except (TypeError, ValueError) as err:  # no signature at all (a builtin)
            raise NoGuess(f"its signature cannot be read: {_said(err)}") from None


def _value(name: str, annotation, module: ModuleType | None):
    if isinstance(annotation, str):  # an annotation that did not evaluate: its name, looked up
        annotation = getattr(module, annotation, annotation)
    if annotation in (int, "int"):
        return _size(name)
    if annotation in (float, "float"):
        return next((value for rule, value in FLOAT_RULES if rule.search(name)), 1.0)
    if annotation in (bool, "bool"):
        return False
    if annotation is inspect.Parameter.empty:
        if CONFIG_NAME.match(name):
            return _defaults(_config_class(module, name), name)
        if any(rule.search(name) for rule in SIZE_NAMES):
            return _size(name)
    elif (
        isinstance(annotation, type)
        and annotation not in (str, bytes)
        and not issubclass(annotation, NOT_BUILT)
    ):
        return _defaults(annotation, name)
    raise NoGuess(f"no value to guess for its constructor's parameter {name!r}")


def _size(name: str) -> int:
    return next((value for rule, value in INT_RULES if rule.search(name)), WIDTH)


def _defaults(cls: type, name: str):
    try:
        return cls()
    except BaseException as err:  # a class that needs arguments: no guess for this parameter
        raise NoGuess(
            f"its constructor's parameter {name!r} is a {cls.__name__}, which does not build "
            f"with its defaults ({_said(err)})"
        ) from None


def _config_class(module: ModuleType | None, name: str) -> type:
    """The module's one config class: defined there, a dataclass or named ``...Config``."""
    found = [
        value
        for value in vars(module or ModuleType("none")).values()
        if isinstance(value, type)
        and value.__module__ == getattr(module, "__name__", None)
        and not issubclass(value, nn.Module)
        and (dataclasses.is_dataclass(value) or value.__name__.lower().endswith("config"))
    ]
    if len(found) != 1:
        where = "none" if not found else ", ".join(sorted(value.__name__ for value in found))
        raise NoGuess(
            f"its constructor's parameter {name!r} needs a config object, and its module "
            f"defines {'no config class' if not found else f'more than one ({where})'}"
        )
    return found[0]


def _inputs(instance: nn.Module) -> Iterator:
    """Makers of one guessed input each, for the first layers the module holds, then shapes
    for a module with none (a pointwise chain)."""
    layers = [m for m in instance.modules() if m is not instance and not list(m.children())]
    for layer in layers[:LAYERS_TRIED]:
        yield from _for_layer(layer)
    yield lambda: torch.randn(BATCH, TOKENS, WIDTH)
    yield lambda: torch.randn(BATCH, WIDTH, SIDE, SIDE)


def _for_layer(layer: nn.Module) -> Iterator:
    if isinstance(layer, nn.Embedding):
        yield lambda: torch.randint(0, layer.num_embeddings, (BATCH, TOKENS))
    elif isinstance(layer, nn.Linear):
        yield lambda: torch.randn(BATCH, TOKENS, layer.in_features)
        yield lambda: torch.randn(BATCH, layer.in_features)
    elif isinstance(layer, (nn.LayerNorm, nn.RMSNorm)):
        shape = list(layer.normalized_shape)
        yield lambda: torch.randn(BATCH, TOKENS, *shape)
    elif isinstance(layer, nn.modules.conv._ConvNd):
        spatial = len(layer.kernel_size)
        # A sequence may have to fit a guessed context (twice it, before a stride of 2).
        sides = {1: [SIDE * SIDE, TOKENS, 2 * TOKENS], 3: [SIDE // 2]}.get(spatial, [SIDE])
        for side in sides:
            yield lambda side=side: torch.randn(BATCH, layer.in_channels, *[side] * spatial)
    elif isinstance(layer, (nn.GroupNorm, nn.modules.batchnorm._BatchNorm)):
        channels = layer.num_channels if isinstance(layer, nn.GroupNorm) else layer.num_features
        yield lambda: torch.randn(BATCH, channels, SIDE, SIDE)
        yield lambda: torch.randn(BATCH, channels, SIDE * SIDE)
        yield lambda: torch.randn(BATCH, channels)


def _said(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err)[:200]}"
