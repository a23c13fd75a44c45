"""Shared torch modules: CNN, GIN and MLP backbones, the baseline networks, patch scoring."""
