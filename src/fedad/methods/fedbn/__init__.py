"""FedBN (Li et al., ICLR 2021): FedAvg with normalisation layers kept on their client."""
