"""A model from its config: the one place that maps a config to its family's module, and building one without
weight memory (on the meta device) whatever sizes the config gives."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .base import Seq2Seq
from .config import DecoderOnlyConfig, ModelConfig, TransformerConfig


def build_model(config: ModelConfig) -> Seq2Seq:
    """A freshly initialised model for ``config`` (validated first: one line naming what is wrong)."""
    from .decoder_only import DecoderOnlyLM
    from .rnn import RNNSeq2Seq
    from .transformer import TransformerSeq2Seq

    config.validate()
    if isinstance(config, DecoderOnlyConfig):
        return DecoderOnlyLM(config)
    if isinstance(config, TransformerConfig):
        return TransformerSeq2Seq(config)
    return RNNSeq2Seq(config)


class _EmptyOnMeta(TorchFunctionMode):
    """``torch.empty`` without a device gives a meta tensor: what torch's modules (``nn.Linear``, ``nn.Embedding``,
    ``nn.GRU``, ``nn.LSTMCell``...) make their parameters from, so that a config of a huge model costs no memory
    while it is built (a GRU of hidden size 30,000 asks for 10.8 GB in one ``torch.empty``). The buffers a model
    computes from its config (position tables) are made by other functions and stay real."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.empty and kwargs.get("device") is None:
            kwargs = {**kwargs, "device": "meta"}
        return func(*args, **kwargs)


@contextlib.contextmanager
def parameters_on_meta():
    """While building: each parameter a module registers is made on (``_EmptyOnMeta``) or moved to the meta
    device, and ``torch.nn.init``'s functions leave meta tensors alone (initialising them would cost nothing but
    seconds of torch's decompositions), so building touches no weight memory, whatever sizes the config gives. A
    parameter already on meta is registered as it is, which keeps tied weights (``output.weight =
    embedding.weight``) one parameter."""
    register = nn.Module.register_parameter
    initialisers = {name: function for name, function in vars(nn.init).items()
                    if name.endswith("_") and not name.startswith("_") and callable(function)}

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    def skipping_meta(function):
        def initialise(tensor, *args, **kwargs):
            return tensor if tensor.device.type == "meta" else function(tensor, *args, **kwargs)
        return initialise

    nn.Module.register_parameter = on_meta
    for name, function in initialisers.items():
        setattr(nn.init, name, skipping_meta(function))
    try:
        with _EmptyOnMeta():
            yield
    finally:
        nn.Module.register_parameter = register
        for name, function in initialisers.items():
            setattr(nn.init, name, function)
