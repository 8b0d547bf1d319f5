"""ir2torch.guards.check."""
