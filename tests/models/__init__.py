"""Model zoo for tests: small hand-written modules (``zoo``) and config-built transformers models (``real``)."""
