"""Generic baselines: local, centralized, FedAvg, FedProx with autoencoder / Deep SVDD."""
