"""Quantized models on the way in: eager int8 modules as handled leaves (:mod:`.int8`), and naming the observer
that stops ``torch.export`` (:mod:`.observers`), torchao's quantized weights stood in for while tracing
(:mod:`.torchao_weights`).

May import: ``common`` (its core, ``common.quant``) and torch. Never ``ir2torch``.
"""
