"""ir2torch.rebuild.graphs."""
