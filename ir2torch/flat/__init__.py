"""ir2torch.flat.run."""
