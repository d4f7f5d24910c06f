"""Canvas builders, one module per operation, and the public Python API (``api``)."""
