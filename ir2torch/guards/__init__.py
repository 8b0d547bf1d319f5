"""Input guards: a rebuilt root or an executed FlatIR checks its inputs against what it was converted for.

- :mod:`.check`: the guard and its call check; :mod:`.specs`: what a guard checks, read from a file as data;
- :mod:`.root`: the guard of a root a builder made (not generated code);
- :mod:`.same_inputs`: inputs that were one tensor; :mod:`.signature_check`: calls of a rebuilt submodule that keeps
  its original ``forward`` signature.

May import: ``common`` (its core) and torch. Never ``torch2ir``.
"""
