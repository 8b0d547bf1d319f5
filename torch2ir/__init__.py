"""torch2ir: convert PyTorch models into the torch2ir IR."""
