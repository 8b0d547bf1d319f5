"""Call signatures of non-leaf module calls: recorded by hooks during the one export trace (:mod:`.record`) and
matched against the calls the trace shows (:mod:`.match`).

May import: ``common`` (its core), torch and ``torch2ir.frontend``. Never ``ir2torch``.
"""
