"""ir2torch.codegen.source."""
