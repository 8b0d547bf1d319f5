"""Quantized models on the way in: eager int8 modules as handled leaves (:mod:`.int8`), and naming the observer
that stops ``torch.export`` (:mod:`.observers`).

May import: ``common`` (its core, ``common.quant``) and torch. Never ``ir2torch``.
"""
