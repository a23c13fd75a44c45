"""GCFL / GCFL+ (Xie et al., NeurIPS 2021): clustered FL on graphs, with Deep SVDD."""
