"""ONLAD (OS-ELM autoencoders on edge clients) with selective model aggregation."""
