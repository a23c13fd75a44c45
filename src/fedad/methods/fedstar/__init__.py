"""FedStar (Tan et al., AAAI 2023): shared structure encoder, personal feature encoder."""
