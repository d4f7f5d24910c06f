"""Destination selection: host states, filters, weighers, and the claim of the winner."""
