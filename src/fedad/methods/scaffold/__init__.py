"""SCAFFOLD (Karimireddy et al., ICML 2020): FedAvg with control variates."""
